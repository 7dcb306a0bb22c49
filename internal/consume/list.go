package consume

import (
	"context"
	"errors"
	"fmt"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/listing"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// Mode is how a consumer checks items against the provider.
type Mode int

// Modes.
const (
	// ModeLookup asks the provider for each item by its id.
	ModeLookup Mode = iota
	// ModeList pages through the provider's list of each run's business
	// date first, judges the items it lists without a call, looks up the
	// rest by id, and records the listed records no item has as
	// unexpected. A provider whose profile has no list request is refused.
	ModeList
	// ModeAuto lists where the provider's profile has a list request and
	// looks up elsewhere.
	ModeAuto
)

var modeNames = []string{"lookup", "list", "auto"}

// String returns the mode's name as `consume --mode` takes it.
func (m Mode) String() string { return modeNames[m] }

// ParseMode reads a mode's name.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("mode %q: want lookup, list or auto", s)
}

// newLister returns the lister of provider p, or nil when its profile has
// no list request. A consumer in lookup mode has one too: a run that the
// first consumer to claim it checks in list mode is listed by every
// consumer (see listFirst).
func (c *Consumer) newLister(p Provider) (*listing.Lister, error) {
	if p.Client == nil {
		return nil, nil
	}
	if p.Client.Profile().List == nil {
		if c.cfg.Mode == ModeList {
			return nil, fmt.Errorf("consume: mode list: profile %s of provider %q has no list request (use --mode auto or lookup)",
				p.Client.Profile().Name, p.Name)
		}
		return nil, nil
	}
	return &listing.Lister{Pool: c.pool, Provider: p.Name, Client: p.Client, Limiter: p.Limiter, Actor: c.cfg.Actor,
		Margin: c.cfg.ListMargin, Lease: c.queue.Visibility(), Logger: c.cfg.Logger}, nil
}

// listFirst makes sure that the listed runs of a claimed batch are listed
// before their items are judged. Whether a run is listed is the run's check
// mode, which the first consumer to claim one of its items chose
// (runsListed). The deliveries of a listed run whose listing this lane has
// not seen end are handed back, the run is listed (or its listing by
// another process awaited) while the items of each stored page are judged
// (judgeStored), and the rest of the batch gets the listed records of its
// items; the deliveries of runs checked by lookups pass unchanged.
func (c *Consumer) listFirst(ctx context.Context, l *lane, batch []job) ([]job, error) {
	if err := c.runsListed(ctx, l, batch); err != nil {
		if rerr := c.queue.Release(ctx, deliveries(batch)); rerr != nil {
			c.dbWarn.Fail(warnRelease, dbconn.ElideValues(rerr), "messages", len(batch))
		}
		return nil, err
	}
	var pending []queue.Delivery // the first delivery of each run to list
	var lookup, keep []job
	var back []queue.Delivery
	for _, j := range batch {
		switch {
		case !l.listsRun[j.d.RunID]:
			lookup = append(lookup, j)
		case l.settled[j.d.RunID]:
			keep = append(keep, j)
		default:
			if len(back) == 0 || back[len(back)-1].RunID != j.d.RunID {
				pending = append(pending, j.d)
			}
			back = append(back, j.d)
		}
	}
	if len(back) > 0 {
		if err := c.queue.Release(ctx, back); err != nil {
			c.dbWarn.Fail(warnRelease, dbconn.ElideValues(err), "messages", len(back))
		}
		for _, d := range pending {
			if l.settled[d.RunID] {
				continue
			}
			res, err := l.lister.List(ctx, d.RunID, func(ctx context.Context, ids []string) {
				c.judgeStored(ctx, l, d.ReconciliationID, ids)
			})
			if errors.Is(err, listing.ErrAuth) {
				c.releaseJobs(ctx, lookup, keep)
				return nil, fmt.Errorf("%w: %w", ErrProviderAuth, err)
			}
			if err != nil {
				c.releaseJobs(ctx, lookup, keep)
				return nil, err
			}
			c.stats.listCalls.Add(int64(res.Calls))
			l.settled[d.RunID] = true
			if res.State == listing.Done && res.Records > 0 {
				// The provider found the day's records at this URL with
				// these credentials: the run's "not found" answers are
				// its own, not a wrong URL's (see circuit.NotFound).
				l.record(c.cfg.Now(), circuit.Event{Kind: circuit.Found, Run: d.RunID.String()})
			}
		}
	}
	if len(keep) > 0 {
		var err error
		if keep, err = c.withListed(ctx, l, keep); err != nil {
			c.releaseJobs(ctx, lookup)
			return nil, err
		}
	}
	return append(lookup, keep...), nil
}

// runsListed learns, for each run of batch not seen before, whether the
// lane lists it: the run's check mode is chosen by the first consumer to
// claim one of its items (this one's --mode, when it is first), and every
// consumer follows it, with a line in the log when it differs from its own.
// A lane whose profile has no list request looks its items up whatever the
// run's mode: a listing is per provider, and nobody lists this one (a
// warning says so when the run is in list mode).
func (c *Consumer) runsListed(ctx context.Context, l *lane, batch []job) error {
	for _, j := range batch {
		run := j.d.RunID
		if _, seen := l.listsRun[run]; seen {
			continue
		}
		name, err := ledger.ChooseCheckMode(ctx, c.pool, run, c.cfg.Mode.String())
		if err != nil {
			return err
		}
		mode, err := ParseMode(name)
		if err != nil {
			return fmt.Errorf("run %s: %w", run, err)
		}
		if mode != c.cfg.Mode {
			l.logger.Info("following the run's check mode, chosen by the first consumer to claim it",
				"run_id", run, "run_mode", mode.String(), "own_mode", c.cfg.Mode.String())
		}
		if mode == ModeList && l.lister == nil {
			l.logger.Warn("the run is checked in list mode, but this provider's profile has no list request: its items are looked up",
				"run_id", run, "provider", l.label(), "profile", l.Client.Profile().Name)
		}
		l.listsRun[run] = mode != ModeLookup && l.lister != nil
	}
	return nil
}

// releaseJobs hands back the deliveries of the job lists.
func (c *Consumer) releaseJobs(ctx context.Context, lists ...[]job) {
	for _, jobs := range lists {
		if len(jobs) == 0 {
			continue
		}
		if err := c.queue.Release(ctx, deliveries(jobs)); err != nil {
			c.dbWarn.Fail(warnRelease, dbconn.ElideValues(err), "messages", len(jobs))
		}
	}
}

// judgeStored hands the lane's workers the items of a page of a run's
// listing that this process just stored, while later pages are still to be
// fetched: it claims their messages (those no other consumer holds) and
// gives each job its listed record, so judging overlaps the listing
// instead of following it. An item without a listed record is not claimed
// here: it is looked up, and found missing, only after the listing ends.
// A failure leaves the page's items in the queue, to be judged after the
// listing like the rest.
func (c *Consumer) judgeStored(ctx context.Context, l *lane, reconciliationID string, ids []string) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = enqueue.IdempotencyKey(reconciliationID, id)
	}
	// As claimLoop's claims, not cancelled half way.
	ds, err := c.queue.ClaimKeys(context.WithoutCancel(ctx), keys, l.claim)
	if err != nil {
		c.dbWarn.Fail(warnClaim, dbconn.ElideValues(err), "messages", len(keys))
		return
	}
	if len(ds) == 0 {
		return
	}
	jobs, err := c.jobsOf(ctx, ds)
	if err == nil {
		jobs, err = c.withListed(ctx, l, jobs)
	}
	if err != nil {
		c.dbWarn.Fail(warnClaim, dbconn.ElideValues(err), "messages", len(ds))
		return
	}
	for i, j := range jobs {
		select {
		case l.jobs <- j:
		case <-ctx.Done():
			if err := c.queue.Release(context.WithoutCancel(ctx), deliveries(jobs[i:])); err != nil {
				c.dbWarn.Fail(warnRelease, dbconn.ElideValues(err), "messages", len(jobs)-i)
			}
			return
		}
	}
}

// withListed gives each job of a run l lists the record l's listing stored
// for its item, if any; when reading them fails it hands the jobs back.
func (c *Consumer) withListed(ctx context.Context, l *lane, jobs []job) ([]job, error) {
	keys := make([]ledger.Key, 0, len(jobs))
	for _, j := range jobs {
		if j.ok && !j.item.State.Terminal() {
			keys = append(keys, ledger.Key{RunID: j.d.RunID, TransactionID: j.d.TransactionID})
		}
	}
	listed, err := ledger.ListedFor(ctx, c.pool, l.lister.Provider, keys)
	if err != nil {
		if rerr := c.queue.Release(ctx, deliveries(jobs)); rerr != nil {
			c.dbWarn.Fail(warnRelease, dbconn.ElideValues(rerr), "messages", len(jobs))
		}
		return nil, err
	}
	for i := range jobs {
		if r, ok := listed[ledger.Key{RunID: jobs[i].d.RunID, TransactionID: jobs[i].d.TransactionID}]; ok {
			jobs[i].listed = &provider.Record{ID: r.ID, AmountMinor: r.AmountMinor, Currency: r.Currency, Status: r.Status}
		}
	}
	return jobs, nil
}

// deliveries returns the deliveries of jobs.
func deliveries(jobs []job) []queue.Delivery {
	ds := make([]queue.Delivery, len(jobs))
	for i, j := range jobs {
		ds[i] = j.d
	}
	return ds
}
