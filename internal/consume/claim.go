package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pause"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// job is one claimed delivery with its ledger item.
type job struct {
	d         queue.Delivery
	item      ledger.Item
	ok        bool      // the item exists
	claimedAt time.Time // when the lease started, by Config.Now
	// listed is the provider's record of the item from the run's listing
	// (list mode); nil: the item is looked up.
	listed *provider.Record
}

// The kinds of database failure the consumer logs through dbWarn.
const (
	warnClaim   = "claim failed; retrying"
	warnRecord  = "recording failed; retrying"
	warnRelease = "release failed; the messages return after their lease"
	// warnRecordGaveUp: recording failed until the lease ran out; the
	// message comes back to a consumer, which calls the provider again
	// under the same key.
	warnRecordGaveUp = "recording failed until the lease ran out; the messages return"
)

// claimLoop claims batches of l's messages for free worker slots until ctx
// ends or, with UntilDone, every run is complete. It claims once at least
// half of the buffer is free (or the buffer is empty), so batches stay large
// when the workers are fast. While l's circuit is open it claims nothing but
// the one message of the next probe, so the process holds no leases it
// cannot use.
func (c *Consumer) claimLoop(ctx context.Context, l *lane) error {
	listener, err := c.queue.Listen(ctx)
	if err != nil {
		return fmt.Errorf("listen for queue messages: %w", err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	jobs := l.jobs
	failures := 0
	for ctx.Err() == nil {
		free := cap(jobs) - len(jobs)
		if free < cap(jobs)/2 && len(jobs) > 0 {
			// Wait for the workers to make room for a full batch.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-l.taken:
			}
			continue
		}
		if st := l.circuitState(); st.Open {
			now := c.cfg.Now()
			if now.Before(st.NextProbe) || len(jobs) > 0 || l.busy.Load() > 0 {
				// Not yet time to probe, or the probe is out.
				wait := min(max(st.NextProbe.Sub(now), circuitPoll), c.cfg.IdleWait)
				if err := pause.For(ctx, wait); err != nil {
					return err
				}
				continue
			}
			free = 1 // the probe's message
		}
		// A claim is not cancelled half way: messages leased by a claim
		// whose answer was lost would stay invisible for a whole lease.
		batch, err := c.claim(context.WithoutCancel(ctx), l, free)
		if ctx.Err() != nil {
			for _, j := range batch {
				c.release(context.WithoutCancel(ctx), j.d)
			}
			return ctx.Err()
		}
		if err != nil {
			failures++
			wait := backoffDB(failures)
			c.dbWarn.Fail(warnClaim, dbconn.ElideValues(err), "retry_in", wait)
			if err := pause.For(ctx, wait); err != nil {
				return err
			}
			continue
		}
		c.dbWarn.OK(warnClaim, "claims work again")
		failures = 0
		if len(batch) > 0 {
			if batch, err = c.listFirst(ctx, l, batch); err != nil {
				if errors.Is(err, ErrProviderAuth) || ctx.Err() != nil {
					return err
				}
				c.cfg.Logger.Warn("listing failed; retrying", "err", err)
				if err := pause.For(ctx, c.cfg.IdleWait); err != nil {
					return err
				}
				continue
			}
			if len(batch) == 0 {
				continue
			}
		}
		for _, j := range batch {
			jobs <- j
		}
		if len(batch) > 0 {
			continue
		}
		// Whether a worker is still busy does not matter: once the ledger
		// has no open run, what it is finishing is a duplicate delivery,
		// and Run waits for it. Waiting for idle workers here instead
		// could miss the wake-up of the run that a worker just completed.
		if c.cfg.UntilDone && len(jobs) == 0 {
			done, err := c.allRunsComplete(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				c.cfg.Logger.Warn("checking for open runs failed; looking again after the idle wait", "err", err)
			case err == nil && done:
				return nil
			}
		}
		if err := c.idle(ctx, listener, l.runDone); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// idle waits for the queue listener; with UntilDone, also for runDone, as
// the run that completed may be the last one.
func (c *Consumer) idle(ctx context.Context, listener *queue.Listener, runDone <-chan struct{}) error {
	if !c.cfg.UntilDone {
		return listener.Wait(ctx, c.cfg.IdleWait)
	}
	waitCtx, wake := context.WithCancel(ctx)
	defer wake()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-runDone:
			wake()
		case <-stop:
		}
	}()
	if err := listener.Wait(waitCtx, c.cfg.IdleWait); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// circuitPoll is how often a claimer whose circuit is open and whose probe is
// out looks again.
const circuitPoll = 50 * time.Millisecond

// claim claims up to n of l's messages and loads their items in one query.
func (c *Consumer) claim(ctx context.Context, l *lane, n int) ([]job, error) {
	ds, err := c.queue.ClaimProviders(ctx, n, l.claim)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	return c.jobsOf(ctx, ds)
}

// jobsOf loads the items of claimed deliveries in one query; when that
// fails it hands the deliveries back.
func (c *Consumer) jobsOf(ctx context.Context, ds []queue.Delivery) ([]job, error) {
	keys := make([]ledger.Key, len(ds))
	for i, d := range ds {
		keys[i] = ledger.Key{RunID: d.RunID, TransactionID: d.TransactionID}
	}
	items, err := ledger.Items(ctx, c.pool, keys)
	if err != nil {
		if rerr := c.queue.Release(ctx, ds); rerr != nil {
			c.dbWarn.Fail(warnRelease, dbconn.ElideValues(rerr), "messages", len(ds))
		}
		return nil, err
	}
	batch := make([]job, len(ds))
	claimedAt := c.cfg.Now()
	for i, d := range ds {
		it, ok := items[keys[i]]
		batch[i] = job{d: d, item: it, ok: ok, claimedAt: claimedAt}
	}
	return batch, nil
}

// allRunsComplete reports whether no run in the ledger is open.
func (c *Consumer) allRunsComplete(ctx context.Context) (bool, error) {
	open, err := ledger.OpenRuns(ctx, c.pool)
	return open == 0, err
}

// release hands an unprocessed delivery back to the queue.
func (c *Consumer) release(ctx context.Context, d queue.Delivery) {
	if err := c.queue.Release(ctx, []queue.Delivery{d}); err != nil {
		c.dbWarn.Fail(warnRelease, dbconn.ElideValues(err), "message_id", d.ID)
		return
	}
	c.dbWarn.OK(warnRelease, "releases work again")
	c.stats.released.Add(1)
}
