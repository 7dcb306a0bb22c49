package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// A run's transitions over time, for the console's chart: every read here
// walks transitions_run (run_id, transition_id), the run's transitions in
// insertion order.

// How a transition counts in a run's traffic: a provider call is a change
// out of an open state with an attempt number (a poison dead letter made
// without a call counts too; it is rare), a throttle one answered 429, and
// an item done one into a terminal state the provider decided (a cancel is
// no provider work).
var (
	callFilter     = `attempt > 0 AND from_state IN ` + sqlList(OpenStates())
	throttleFilter = `http_status = 429`
	doneFilter     = `to_state IN ` + sqlList(slices.DeleteFunc(TerminalStates(), func(s State) bool { return s == Cancelled }))
)

// Span is the first and last transition of a run, by insertion order.
type Span struct {
	FirstID, LastID int64
	First, Last     time.Time
}

// TransitionSpan returns the span of a run's transitions; false when it has
// none. It reads the two ends of the run's range of transitions_run.
func TransitionSpan(ctx context.Context, db Querier, runID uuid.UUID) (Span, bool, error) {
	var s Span
	err := db.QueryRow(ctx, `
		SELECT lo.transition_id, lo.at, hi.transition_id, hi.at
		  FROM (SELECT transition_id, at FROM transitions WHERE run_id = $1 ORDER BY transition_id LIMIT 1) lo,
		       (SELECT transition_id, at FROM transitions WHERE run_id = $1 ORDER BY transition_id DESC LIMIT 1) hi`,
		runID).Scan(&s.FirstID, &s.First, &s.LastID, &s.Last)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, false, nil
	}
	if err != nil {
		return s, false, fmt.Errorf("read transition span of run %s: %w", runID, err)
	}
	return s, true, nil
}

// TrafficBin counts a run's transitions recorded in one bin of time.
type TrafficBin struct {
	// Start is the bin's start.
	Start time.Time
	// Calls, Throttles and Done count the provider calls, the throttles and
	// the items done.
	Calls, Throttles, Done int64
}

// Traffic counts all of a run's transitions in bins of width bin from
// start, in time order; only bins with transitions are returned. It reads
// the run's whole range of transitions_run: for runs of a bounded number of
// transitions (see SampleTraffic for larger ones).
func Traffic(ctx context.Context, db Querier, runID uuid.UUID, start time.Time, bin time.Duration) ([]TrafficBin, error) {
	rows, err := db.Query(ctx, `
		SELECT date_bin($2::interval, at, $3::timestamptz) AS b,
		       count(*) FILTER (WHERE `+callFilter+`),
		       count(*) FILTER (WHERE `+throttleFilter+`),
		       count(*) FILTER (WHERE `+doneFilter+`)
		  FROM transitions WHERE run_id = $1
		 GROUP BY b ORDER BY b`, runID, bin, start)
	if err != nil {
		return nil, fmt.Errorf("bin transitions of run %s: %w", runID, err)
	}
	var out []TrafficBin
	var b TrafficBin
	_, err = pgx.ForEachRow(rows, []any{&b.Start, &b.Calls, &b.Throttles, &b.Done}, func() error {
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bin transitions of run %s: %w", runID, err)
	}
	return out, nil
}

// SampledTransition is one transition of a sampled probe window.
type SampledTransition struct {
	// Probe numbers the window, from 0.
	Probe int
	ID    int64
	At    time.Time
	// Call, Throttle and Done say how the transition counts.
	Call, Throttle, Done bool
}

// SampleTraffic reads probes windows of at most window transitions of a
// run each, the p-th starting at the run's first transition id at or after
// from + p×step, in probe and id order: a bounded read of a run of any
// size, one short range of transitions_run per probe.
func SampleTraffic(ctx context.Context, db Querier, runID uuid.UUID, from, step int64, probes, window int) ([]SampledTransition, error) {
	rows, err := db.Query(ctx, `
		SELECT p, t.transition_id, t.at, (`+callFilter+`), coalesce(`+throttleFilter+`, false), (`+doneFilter+`)
		  FROM generate_series(0, $3::int - 1) p
		 CROSS JOIN LATERAL (
		       SELECT transition_id, at, attempt, from_state, to_state, http_status FROM transitions
		        WHERE run_id = $1 AND transition_id >= $2::bigint + p * $4::bigint
		        ORDER BY transition_id LIMIT $5) t
		 ORDER BY p, t.transition_id`, runID, from, probes, step, window)
	if err != nil {
		return nil, fmt.Errorf("sample transitions of run %s: %w", runID, err)
	}
	out := make([]SampledTransition, 0, probes*window)
	var t SampledTransition
	_, err = pgx.ForEachRow(rows, []any{&t.Probe, &t.ID, &t.At, &t.Call, &t.Throttle, &t.Done}, func() error {
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sample transitions of run %s: %w", runID, err)
	}
	return out, nil
}

// Transition is one row of an item's history as stored.
type Transition struct {
	// ID is the global insertion order.
	ID            int64
	TransactionID string
	// Seq is the row's place in its item's chain, from 1.
	Seq  int
	From State
	To   State
	At   time.Time
	// Attempt is the item's call count at the change.
	Attempt int
	// HTTPStatus is the call's status; 0 for none.
	HTTPStatus int
	Reason     string
	// RetryAfter is the delay chosen before the next attempt; 0 for none.
	RetryAfter time.Duration
	// Details is the JSON details as stored; empty for none.
	Details string
	Actor   string
	// PrevHash and Hash link the row into its item's chain; PrevHash is
	// nil for the first.
	PrevHash, Hash []byte
}

// EachTransition calls fn with each of a run's transitions in insertion
// order, streaming them (memory does not grow with the run) along the
// run's range of transitions_run. fn's error stops the walk and is
// returned.
func EachTransition(ctx context.Context, db Querier, runID uuid.UUID, fn func(Transition) error) error {
	rows, err := db.Query(ctx, `
		SELECT transition_id, transaction_id, seq, from_state, to_state, at, attempt, coalesce(http_status, 0),
		       reason, coalesce(retry_after_ms, 0), coalesce(details::text, ''), actor, prev_hash, hash
		  FROM transitions WHERE run_id = $1 ORDER BY transition_id`, runID)
	if err != nil {
		return fmt.Errorf("read transitions of run %s: %w", runID, err)
	}
	var t Transition
	var retryMS int64
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.TransactionID, &t.Seq, &t.From, &t.To, &t.At, &t.Attempt,
		&t.HTTPStatus, &t.Reason, &retryMS, &t.Details, &t.Actor, &t.PrevHash, &t.Hash}, func() error {
		t.RetryAfter = time.Duration(retryMS) * time.Millisecond
		return fn(t)
	})
	if err != nil {
		return fmt.Errorf("read transitions of run %s: %w", runID, err)
	}
	return nil
}
