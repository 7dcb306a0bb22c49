// Package schedule runs the nightly enqueue on a cron expression: at each
// tick it works out the business date, opens that date's source and
// enqueues it through the same enqueue.Enqueuer as `reconcile enqueue`, with
// trigger cron.
//
// Any number of schedulers may run against one database, on any machines.
// A tick's date is enqueued once: the scheduler holds a transaction-scoped
// advisory lock keyed on the date (pg_try_advisory_xact_lock, in a
// transaction kept open for the enqueue, so that it works through a
// transaction pooler) for the enqueue, and the runs
// table's unique (business_date, generation) key stops anything the lock does
// not. A tick whose date's lock is held elsewhere (a slow enqueue still
// running) is skipped with a log line. At start-up, ticks missed within
// Config.CatchUp are enqueued, so a night without a scheduler is not lost.
// Every tick's outcome, failures included, is recorded in schedule_ticks,
// which the package owns: status reads the failures through Failures.
//
// Time comes from a Clock, so tests drive the loop without sleeping.
package schedule

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
)

// Clock tells the time and waits. The scheduler's only source of time.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// SystemClock is the machine's clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// After returns time.After(d).
func (SystemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Outcome is what came of one tick.
type Outcome string

// Outcomes, as recorded in schedule_ticks.outcome.
const (
	// Enqueued: this scheduler created the date's run.
	Enqueued Outcome = "enqueued"
	// Existing: the date had a run already; nothing was written.
	Existing Outcome = "existing"
	// Skipped: another enqueue of the date held its lock.
	Skipped Outcome = "skipped"
	// Failed: the enqueue failed (missing source, bad input, database error).
	Failed Outcome = "failed"
)

// Tick is the outcome of one tick.
type Tick struct {
	// At is the firing time.
	At time.Time
	// Date is the business date the tick reconciles.
	Date payments.Date
	// CatchUp is true for a tick missed before start-up.
	CatchUp bool
	// Source names the date's source.
	Source  string
	Outcome Outcome
	// Result is the enqueue's result for Enqueued and Existing.
	Result enqueue.Result
	// Err is the failure for Failed.
	Err error
}

// Config configures a Scheduler.
type Config struct {
	// Spec is the parsed cron expression and its zone. Required.
	Spec Spec
	// DateOffset is added to the firing day to get the business date: -1
	// reconciles yesterday. Defaults to 0 (the firing day itself).
	DateOffset int
	// Source returns the input of a business date. Required.
	Source SourceFunc
	// CatchUp is how far back from start-up missed ticks are enqueued.
	// Defaults to 0: no catch-up.
	CatchUp time.Duration
	// AllowOutsideDate is passed to every enqueue. Defaults to false.
	AllowOutsideDate bool
	// Name identifies this scheduler in schedule_ticks (host:pid). Defaults
	// to "scheduler".
	Name string
	// Clock tells the time. Defaults to SystemClock.
	Clock Clock
	// Logger receives a line per tick. Defaults to discarding them.
	Logger *slog.Logger
	// PruneAfter, when positive, makes Run call Prune after every tick with
	// the clock's time less PruneAfter: retention without a job of its own.
	// Defaults to 0: no pruning.
	PruneAfter time.Duration
	// Prune deletes what only served the queue for runs completed before
	// before (cmd/reconcile gives it what `reconcile prune` does). Its
	// failure is logged and the scheduler carries on. Required with
	// PruneAfter.
	Prune func(ctx context.Context, before time.Time) error
}

// Scheduler enqueues a date at each tick of a cron expression. Run it once;
// Tick and CatchUp are safe for concurrent use.
type Scheduler struct {
	pool *pgxpool.Pool
	enq  *enqueue.Enqueuer
	cfg  Config
}

// New returns a Scheduler enqueuing through enq and recording ticks in pool.
func New(pool *pgxpool.Pool, enq *enqueue.Enqueuer, cfg Config) (*Scheduler, error) {
	switch {
	case enq == nil:
		return nil, errors.New("schedule: an Enqueuer is required")
	case cfg.Spec.sched == nil:
		return nil, errors.New("schedule: Config.Spec is required (see ParseSpec)")
	case cfg.Source == nil:
		return nil, errors.New("schedule: Config.Source is required")
	case cfg.CatchUp < 0:
		return nil, fmt.Errorf("schedule: Config.CatchUp %s is negative", cfg.CatchUp)
	case cfg.PruneAfter < 0:
		return nil, fmt.Errorf("schedule: Config.PruneAfter %s is negative", cfg.PruneAfter)
	case cfg.PruneAfter > 0 && cfg.Prune == nil:
		return nil, errors.New("schedule: Config.Prune is required with Config.PruneAfter")
	}
	cfg.Name = cmp.Or(cfg.Name, "scheduler")
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{pool: pool, enq: enq, cfg: cfg}, nil
}

// Run catches up missed ticks, then handles every tick until ctx ends, and
// returns ctx's error. At each tick it first catches up again: a date of
// the window whose tick failed is retried. After the catch-up and after
// every tick it prunes (Config.PruneAfter). A failing tick is logged and
// recorded; it does not stop the loop. Ticks are computed from the previous firing time, not from
// the clock after a tick, so a slow tick does not lose the next one.
func (s *Scheduler) Run(ctx context.Context) error {
	now := s.cfg.Clock.Now()
	if len(s.CatchUp(ctx, now)) > 0 {
		s.prune(ctx)
	}
	s.cfg.Logger.Info("scheduler started", "cron", s.cfg.Spec.Expr, "time_zone", s.cfg.Spec.Location.String(),
		"date_offset", s.cfg.DateOffset, "next_tick", s.cfg.Spec.Next(now))
	last := now
	for {
		next := s.cfg.Spec.Next(last)
		if next.IsZero() {
			return fmt.Errorf("cron expression %q never fires again", s.cfg.Spec.Expr)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.cfg.Clock.After(next.Sub(s.cfg.Clock.Now())):
		}
		// Dates of earlier ticks within the catch-up window that still have
		// no run (their source was missing, say) are tried again first, so
		// a file that arrives late is picked up without a restart.
		s.CatchUp(ctx, last)
		s.Tick(ctx, next, false)
		s.prune(ctx)
		last = next
	}
}

// prune calls Config.Prune, when PruneAfter is set, for the runs completed
// more than PruneAfter before now.
func (s *Scheduler) prune(ctx context.Context) {
	if s.cfg.PruneAfter == 0 {
		return
	}
	before := s.cfg.Clock.Now().Add(-s.cfg.PruneAfter)
	if err := s.cfg.Prune(ctx, before); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Error("prune failed; the scheduler carries on", "before", before, "err", err)
	}
}

// CatchUp enqueues, for every tick within Config.CatchUp before now (now
// included) whose business date has no run, that date. It returns the ticks
// it handled, oldest first.
func (s *Scheduler) CatchUp(ctx context.Context, now time.Time) []Tick {
	if s.cfg.CatchUp == 0 {
		return nil
	}
	var ticks []Tick
	seen := map[payments.Date]bool{}
	for at := s.cfg.Spec.Next(now.Add(-s.cfg.CatchUp)); !at.IsZero() && !at.After(now); at = s.cfg.Spec.Next(at) {
		d := s.cfg.Spec.DateOf(at, s.cfg.DateOffset)
		if seen[d] {
			continue
		}
		seen[d] = true
		latest, err := ledger.LatestGeneration(ctx, s.pool, d)
		if err != nil {
			s.cfg.Logger.Error("catch-up: check for a run", "business_date", d.String(), "err", err)
			continue
		}
		if latest > 0 {
			continue
		}
		ticks = append(ticks, s.Tick(ctx, at, true))
	}
	return ticks
}

// LockKey is the advisory lock key of a business date: the pair
// (LockClass, days since 1970-01-01), taken with the two-int4 form of
// pg_try_advisory_xact_lock so it cannot collide with single-key locks (such as
// the migration lock) or with another date.
func LockKey(d payments.Date) (class, key int32) {
	days := d.Start(time.UTC).Unix() / 86400
	return LockClass, int32(days)
}

// LockClass is the first half of every schedule lock key ("RCSC").
const LockClass int32 = 0x52435343

// Tick handles one firing at at: it enqueues the business date under the
// date's advisory lock, then logs and records the outcome. catchUp marks a
// tick missed before start-up.
func (s *Scheduler) Tick(ctx context.Context, at time.Time, catchUp bool) Tick {
	d := s.cfg.Spec.DateOf(at, s.cfg.DateOffset)
	src := s.cfg.Source(d)
	t := Tick{At: at, Date: d, CatchUp: catchUp, Source: src.Name}
	t.Outcome, t.Result, t.Err = s.enqueueLocked(ctx, d, src)
	log := s.cfg.Logger.With("business_date", d.String(), "tick", at, "source", src.Name, "catch_up", catchUp)
	switch t.Outcome {
	case Enqueued:
		log.Info("tick: run enqueued", "run_id", t.Result.RunID, "reconciliation_id", t.Result.ReconciliationID,
			"items", t.Result.Items, "elapsed", t.Result.Elapsed.Round(time.Millisecond))
	case Existing:
		log.Info("tick: the date has a run already; nothing enqueued", "run_id", t.Result.RunID,
			"reconciliation_id", t.Result.ReconciliationID)
	case Skipped:
		log.Warn("tick skipped: an enqueue of this date is still running (its lock is held)")
	case Failed:
		log.Error("tick failed; the scheduler carries on", "err", t.Err)
	}
	if err := s.record(ctx, t); err != nil {
		log.Error("record tick", "err", err)
	}
	return t
}

// enqueueLocked enqueues d while holding its advisory lock. The lock is
// transaction-scoped (pg_try_advisory_xact_lock), taken in a transaction of
// its own that stays open, writing nothing, for the whole enqueue and is then
// rolled back, which releases it. Unlike a session lock this works through a
// transaction pooler such as PgBouncer: the open transaction keeps one server
// connection, and the lock with it, until it ends, where a session lock would
// be taken on one server connection and "released" on another. Should the
// scheduler die, its connection closes and the server ends the transaction.
func (s *Scheduler) enqueueLocked(ctx context.Context, d payments.Date, src Source) (Outcome, enqueue.Result, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Failed, enqueue.Result{}, fmt.Errorf("begin lock transaction of %s: %w", d, err)
	}
	// Rolling back releases the lock; on a cancelled context it still runs.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	class, key := LockKey(d)
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int4, $2::int4)`, class, key).Scan(&locked); err != nil {
		return Failed, enqueue.Result{}, fmt.Errorf("lock business date %s: %w", d, err)
	}
	if !locked {
		return Skipped, enqueue.Result{}, nil
	}
	res, err := s.enq.Enqueue(ctx, enqueue.Request{
		Date:             d,
		Location:         s.cfg.Spec.Location,
		Source:           src.Name,
		Open:             src.Open,
		Format:           src.Format,
		AllowOutsideDate: s.cfg.AllowOutsideDate,
		Trigger:          enqueue.Cron,
	})
	switch {
	case err != nil:
		return Failed, res, fmt.Errorf("enqueue %s from %s: %w", d, src.Name, err)
	case res.Existing:
		return Existing, res, nil
	}
	return Enqueued, res, nil
}

// record writes t to schedule_ticks.
func (s *Scheduler) record(ctx context.Context, t Tick) error {
	var runID *uuid.UUID
	if t.Outcome == Enqueued || t.Outcome == Existing {
		runID = &t.Result.RunID
	}
	var errText *string
	if t.Err != nil {
		msg := t.Err.Error()
		errText = &msg
	}
	_, err := s.pool.Exec(context.WithoutCancel(ctx), `
		INSERT INTO schedule_ticks (scheduled_at, business_date, catch_up, outcome, run_id, source, error, scheduler, recorded_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		t.At, t.Date.String(), t.CatchUp, string(t.Outcome), runID, t.Source, errText, s.cfg.Name, s.cfg.Clock.Now())
	if err != nil {
		return fmt.Errorf("record tick of %s: %w", t.Date, err)
	}
	return nil
}
