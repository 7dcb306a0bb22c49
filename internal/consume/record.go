package consume

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pause"
	"github.com/reconcile/reconcile/internal/queue"
)

// fate is what becomes of a delivery's message when its result is recorded.
// The zero fate is ack.
type fate int

const (
	// ack marks the message done: the item is settled, or was already.
	ack fate = iota
	// retryLater reschedules the message for settlement.at plus
	// settlement.delay.
	retryLater
	// deadLetter sets the message aside for an operator.
	deadLetter
)

// settlement is what to record for one delivery: the message's fate and the
// item's change, if any.
type settlement struct {
	fate fate
	// countsAttempt makes a retryLater use up one of the item's attempts
	// (throttles do not).
	countsAttempt bool
	// to is the item's new state; empty: the item is not changed (its
	// outcome is recorded already, or there is no item).
	to          ledger.State
	called      bool
	throttled   bool
	status      int
	reason      string
	detail      string
	differences []decision.Difference
	provider    *ledger.Provider
	delay       time.Duration
	at          time.Time
}

// result is a settlement waiting for the recorder.
type result struct {
	j      job
	s      settlement
	logger *slog.Logger
}

// A recorder records the results of one Run. Functions named record* run
// their own transactions and sort out failures; those named write* issue
// statements in a transaction they are given and return its errors.
type recorder struct {
	c *Consumer
	// in carries results to loop; nil: each worker records its own result
	// (RecordBatch 1).
	in chan result
}

// submit hands s to the recorder's loop or, without one, records it at
// once. Recording failures leave the message to come back after its lease.
func (r *recorder) submit(ctx context.Context, logger *slog.Logger, j job, s settlement) {
	if s.at.IsZero() {
		s.at = r.c.cfg.Now()
	}
	if r.in == nil {
		r.recordOne(ctx, logger, j, s)
		return
	}
	select {
	case r.in <- result{j: j, s: s, logger: logger}:
	case <-ctx.Done():
	}
}

// loop records the results it receives until r.in is closed, in batches of
// what has gathered, at most RecordBatch.
func (r *recorder) loop(ctx context.Context) {
	batch := make([]result, 0, r.c.cfg.RecordBatch)
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
func (r *recorder) recordBatch(ctx context.Context, batch []result) {
	if len(batch) > 1 {
		slices.SortFunc(batch, func(a, b result) int {
			return cmp.Or(bytes.Compare(a.j.d.RunID[:], b.j.d.RunID[:]), cmp.Compare(a.j.d.TransactionID, b.j.d.TransactionID))
		})
		var res ledger.Result
		err := pgx.BeginFunc(ctx, r.c.pool, func(tx pgx.Tx) (err error) {
			res, err = r.writeBatch(ctx, tx, batch)
			return err
		})
		if err == nil {
			r.c.dbWarn.OK(warnRecord, "recording works again")
			r.c.dbWarn.OK(warnRecordGaveUp, "results whose lease ran out while recording failed came back to the queue")
			for _, b := range batch {
				r.c.stats.count(b.s)
			}
			r.completed(res)
			return
		}
		if ctx.Err() != nil {
			return
		}
		r.c.cfg.Logger.Debug("batch not recorded; recording its results one by one", "results", len(batch), "err", err)
	}
	for _, b := range batch {
		r.recordOne(ctx, b.logger, b.j, b.s)
	}
}

// recordOne records s in one transaction: the item's state change and
// transition, the completion join, and the message's ack, reschedule or dead
// letter. A database failure is retried with backoff while the lease lasts;
// after that the message comes back by itself.
func (r *recorder) recordOne(ctx context.Context, logger *slog.Logger, j job, s settlement) {
	for failures := 0; ; failures++ {
		var res ledger.Result
		err := pgx.BeginFunc(ctx, r.c.pool, func(tx pgx.Tx) (err error) {
			res, err = r.writeOne(ctx, tx, j, s)
			return err
		})
		switch {
		case err == nil:
			r.c.dbWarn.OK(warnRecord, "recording works again")
			r.c.dbWarn.OK(warnRecordGaveUp, "results whose lease ran out while recording failed came back to the queue")
			r.c.stats.count(s)
			r.completed(res)
			return
		case errors.Is(err, queue.ErrStaleLease):
			r.c.stats.stale.Add(1)
			logger.Debug("result dropped: message was redelivered elsewhere")
			return
		case errors.Is(err, ledger.ErrConflict):
			r.c.stats.conflicts.Add(1)
			logger.Debug("result dropped: item moved on")
			r.c.release(ctx, j.d)
			return
		case ctx.Err() != nil:
			return
		}
		wait := backoffDB(failures + 1)
		if time.Since(j.claimedAt)+wait >= r.c.queue.Visibility() {
			// The lease is over: the message comes back to a consumer,
			// which calls the provider again under the same key.
			r.c.dbWarn.Fail(warnRecordGaveUp, dbconn.ElideValues(err), "message_id", j.d.ID)
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
func (r *recorder) writeBatch(ctx context.Context, tx pgx.Tx, batch []result) (ledger.Result, error) {
	changes := make([]ledger.Change, 0, len(batch))
	for _, b := range batch {
		if ch, ok := r.changeOf(b.j, b.s); ok {
			changes = append(changes, ch)
		}
	}
	res, err := ledger.RecordBatch(ctx, tx, changes)
	if err != nil {
		return res, err
	}
	var acks []queue.Delivery
	for _, b := range batch {
		if b.s.fate != ack {
			if err := r.writeFate(ctx, tx, b.j, b.s); err != nil {
				return res, err
			}
			continue
		}
		acks = append(acks, b.j.d)
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

// writeOne writes s in tx: the item's change, if any, and the message's
// fate.
func (r *recorder) writeOne(ctx context.Context, tx pgx.Tx, j job, s settlement) (ledger.Result, error) {
	var res ledger.Result
	if ch, ok := r.changeOf(j, s); ok {
		var err error
		if res, err = ledger.Record(ctx, tx, ch); err != nil {
			return res, err
		}
	}
	return res, r.writeFate(ctx, tx, j, s)
}

// writeFate acks, reschedules or dead-letters j's message in tx.
func (r *recorder) writeFate(ctx context.Context, tx pgx.Tx, j job, s settlement) error {
	switch s.fate {
	case retryLater:
		d := j.d
		if s.countsAttempt {
			d.Attempt++
		}
		return r.c.queue.RetryAt(ctx, tx, d, s.at.Add(s.delay), s.reason)
	case deadLetter:
		return r.c.queue.DeadLetter(ctx, tx, j.d, s.reason, s.detail)
	default:
		return r.c.queue.Ack(ctx, tx, j.d)
	}
}

// changeOf returns the item's state change s records, if it records one.
func (r *recorder) changeOf(j job, s settlement) (ledger.Change, bool) {
	if s.to == "" {
		return ledger.Change{}, false
	}
	attempt := 0
	if s.called {
		attempt = j.d.Attempt + 1
	}
	diffs := make([]ledger.Difference, len(s.differences))
	for i, d := range s.differences {
		diffs[i] = ledger.Difference{Field: d.Field, Expected: d.Expected, Provider: d.Provider}
	}
	var details map[string]any
	if s.detail != "" {
		details = map[string]any{"detail": s.detail}
	}
	if s.fate == retryLater {
		if details == nil {
			details = map[string]any{}
		}
		details["next_attempt_at"] = s.at.Add(s.delay).UTC().Format(time.RFC3339Nano)
	}
	return ledger.Change{
		RunID: j.d.RunID, TransactionID: j.d.TransactionID, From: j.item.State, To: s.to,
		Called: s.called, Throttled: s.throttled, Attempt: attempt, HTTPStatus: s.status,
		Reason: s.reason, RetryAfter: s.delay, Details: details, Provider: s.provider,
		Differences: diffs, Actor: r.c.cfg.Actor, At: s.at,
	}, true
}
