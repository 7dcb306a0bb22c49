package consume

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pause"
	"github.com/reconcile/reconcile/internal/queue"
)

// A recorder records the results of one Run. Functions named record* run
// their own transactions and sort out failures; those named write* issue
// statements in a transaction they are given and return its errors.
type recorder struct {
	c *Consumer
	// in carries outcomes to loop; nil: each worker records its own
	// outcome (RecordBatch 1).
	in chan outcome
	// flushed is closed when loop has recorded everything sent on in.
	flushed chan struct{}
}

// startRecorder returns the recorder of a Run, whose loop records with ctx
// unless Config.RecordBatch is 1.
func (c *Consumer) startRecorder(ctx context.Context) *recorder {
	r := &recorder{c: c}
	if c.cfg.RecordBatch > 1 {
		// Workers hand outcomes to the loop without waiting for its
		// commit: a full batch fits in the channel.
		r.in = make(chan outcome, c.cfg.RecordBatch)
		r.flushed = make(chan struct{})
		go func() {
			defer close(r.flushed)
			r.loop(ctx)
		}()
	}
	return r
}

// flush returns once every outcome submitted is recorded (or its recording
// given up). Nothing may be submitted after it.
func (r *recorder) flush() {
	if r.in != nil {
		close(r.in)
		<-r.flushed
	}
}

// submit hands o to the recorder's loop or, without one, records it at
// once. Recording failures leave the message to come back after its lease.
func (r *recorder) submit(ctx context.Context, o outcome) {
	if r.in == nil {
		r.recordOne(ctx, o)
		return
	}
	select {
	case r.in <- o:
	case <-ctx.Done():
	}
}

// loop records the outcomes it receives until r.in is closed, in batches of
// what has gathered, at most RecordBatch.
func (r *recorder) loop(ctx context.Context) {
	batch := make([]outcome, 0, r.c.cfg.RecordBatch)
	for first := range r.in {
		batch = append(batch[:0], first)
	gather:
		for len(batch) < r.c.cfg.RecordBatch {
			select {
			case res, ok := <-r.in:
				if !ok {
					break gather
				}
				batch = append(batch, res)
			default:
				break gather
			}
		}
		r.recordBatch(ctx, batch)
	}
}

// recordBatch records a batch in one transaction. If any part of it fails
// (a stale lease, an item that moved on, a database error), the transaction
// rolls back and every result is recorded on its own with recordOne, which
// sorts out which ones still apply.
func (r *recorder) recordBatch(ctx context.Context, batch []outcome) {
	if len(batch) > 1 {
		slices.SortFunc(batch, func(a, b outcome) int {
			return cmp.Or(bytes.Compare(a.job.d.RunID[:], b.job.d.RunID[:]), cmp.Compare(a.job.d.TransactionID, b.job.d.TransactionID))
		})
		var res ledger.Result
		err := pgx.BeginFunc(ctx, r.c.pool, func(tx pgx.Tx) (err error) {
			res, err = r.writeBatch(ctx, tx, batch)
			return err
		})
		if err == nil {
			r.c.dbWarn.OK(warnRecord, "recording works again")
			r.c.dbWarn.OK(warnRecordGaveUp, "results whose lease ran out while recording failed came back to the queue")
			for _, o := range batch {
				r.c.stats.count(o)
			}
			r.completed(res)
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.c.cfg.Logger.Debug("batch not recorded; recording its results one by one", "results", len(batch), "err", err)
	}
	for _, o := range batch {
		r.recordOne(ctx, o)
	}
}

// recordOne records o in one transaction: the item's state change and
// transition, the completion join, and the message's ack, reschedule or dead
// letter. A database failure is retried with backoff while the lease lasts;
// after that the message comes back by itself.
func (r *recorder) recordOne(ctx context.Context, o outcome) {
	for failures := 0; ; failures++ {
		var res ledger.Result
		err := pgx.BeginFunc(ctx, r.c.pool, func(tx pgx.Tx) (err error) {
			res, err = r.writeOne(ctx, tx, o)
			return err
		})
		switch {
		case err == nil:
			r.c.dbWarn.OK(warnRecord, "recording works again")
			r.c.dbWarn.OK(warnRecordGaveUp, "results whose lease ran out while recording failed came back to the queue")
			r.c.stats.count(o)
			r.completed(res)
			return
		case errors.Is(err, queue.ErrStaleLease):
			r.c.stats.stale.Add(1)
			o.logger.Debug("result dropped: message was redelivered elsewhere")
			return
		case errors.Is(err, ledger.ErrConflict):
			r.c.stats.conflicts.Add(1)
			o.logger.Debug("result dropped: item moved on")
			r.c.release(ctx, o.job.d)
			return
		case ctx.Err() != nil:
			return
		}
		wait := backoffDB(failures + 1)
		if r.c.cfg.Now().Sub(o.job.claimedAt)+wait >= r.c.queue.Visibility() {
			// The lease is over: the message comes back to a consumer,
			// which calls the provider again under the same key.
			r.c.dbWarn.Fail(warnRecordGaveUp, dbconn.ElideValues(err), "message_id", o.job.d.ID)
			return
		}
		r.c.dbWarn.Fail(warnRecord, dbconn.ElideValues(err), "retry_in", wait)
		if pause.For(ctx, wait) != nil {
			return
		}
	}
}

// completed wakes the idle claimers if a recorded transaction completed a
// run, so UntilDone returns without waiting out IdleWait.
func (r *recorder) completed(res ledger.Result) {
	if len(res.RunsCompleted) == 0 {
		return
	}
	for _, l := range r.c.lanes {
		select {
		case l.runDone <- struct{}{}:
		default:
		}
	}
}

// writeBatch writes a batch sorted by item in tx: every item's change in
// one ledger batch, the rare retries and dead letters one by one, and the
// acks in one statement.
func (r *recorder) writeBatch(ctx context.Context, tx pgx.Tx, batch []outcome) (ledger.Result, error) {
	changes := make([]ledger.Change, 0, len(batch))
	for _, o := range batch {
		if ch, ok := o.change(r.c.cfg.Actor); ok {
			changes = append(changes, ch)
		}
	}
	res, err := ledger.RecordBatch(ctx, tx, changes)
	if err != nil {
		return res, err
	}
	var acks []queue.Delivery
	for _, o := range batch {
		if o.fate != ack {
			if err := r.writeFate(ctx, tx, o); err != nil {
				return res, err
			}
			continue
		}
		acks = append(acks, o.job.d)
	}
	stale, err := r.c.queue.AckBatch(ctx, tx, acks)
	if err != nil {
		return res, err
	}
	if len(stale) > 0 {
		return res, fmt.Errorf("ack %d messages: %w", len(stale), queue.ErrStaleLease)
	}
	return res, nil
}

// writeOne writes o in tx: the item's change, if any, and the message's
// fate.
func (r *recorder) writeOne(ctx context.Context, tx pgx.Tx, o outcome) (ledger.Result, error) {
	var res ledger.Result
	if ch, ok := o.change(r.c.cfg.Actor); ok {
		var err error
		if res, err = ledger.Record(ctx, tx, ch); err != nil {
			return res, err
		}
	}
	return res, r.writeFate(ctx, tx, o)
}

// writeFate acks, reschedules or dead-letters o's message in tx.
func (r *recorder) writeFate(ctx context.Context, tx pgx.Tx, o outcome) error {
	switch o.fate {
	case retryLater:
		d := o.job.d
		if o.countsAttempt {
			d.Attempt++
		}
		return r.c.queue.RetryAt(ctx, tx, d, o.at.Add(o.delay), o.reason)
	case deadLetter:
		return r.c.queue.DeadLetter(ctx, tx, o.job.d, o.reason, o.detail)
	case ack:
		return r.c.queue.Ack(ctx, tx, o.job.d)
	default:
		return fmt.Errorf("record message %d: fate %s is not recorded", o.job.d.ID, o.fate)
	}
}
