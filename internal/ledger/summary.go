package ledger

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/payments"
)

// Summary is a run with its totals, read from its completion counters: a
// fixed number of rows per run, whatever its size.
type Summary struct {
	RunID            uuid.UUID
	ReconciliationID string
	BusinessDate     payments.Date
	Generation       int
	// Trigger is cron or manual; TriggeredBy who started the run.
	Trigger     string
	TriggeredBy string
	// Source names the input, SourceSHA256 the SHA-256 (hex) of its bytes
	// and TimeZone the zone the business date was read in.
	Source       string
	SourceSHA256 string
	TimeZone     string
	// Items is the run's item count.
	Items     int64
	CreatedAt time.Time
	// CompletedAt is when the run last completed; nil while an item is
	// open (also after a redrive reopened it).
	CompletedAt *time.Time
	// Open counts the items not in a terminal state yet.
	Open int64
	// Queued and RetryScheduled split Open by state.
	Queued, RetryScheduled int64
	// Matched, Mismatched, Missing, DeadLettered, Cancelled and Unexpected
	// count the terminal items by outcome.
	Matched, Mismatched, Missing, DeadLettered, Cancelled, Unexpected int64
	// ProviderCalls counts the provider calls made for the run's items and
	// Throttles those answered 429.
	ProviderCalls, Throttles int64
	// Completion is the run's first completion record; nil before the run
	// first completed.
	Completion *Completion
	// CancelledAt is when the run was withdrawn (nil if never), CancelledBy
	// by whom and CancelReason why.
	CancelledAt               *time.Time
	CancelledBy, CancelReason string
	// DeadlineAt is when the run should be complete (nil: no deadline set;
	// see SetDeadlines).
	DeadlineAt *time.Time
	// CheckMode is how its items are checked against the provider (lookup,
	// list or auto; see ChooseCheckMode); empty until a consumer claims one.
	CheckMode string
}

// Done is the number of items in a terminal state.
func (s Summary) Done() int64 { return s.Items - s.Open }

// RunKey is a run's place in (business date, generation) order.
type RunKey struct {
	Date       payments.Date
	Generation int
}

// RunFilter selects the runs Summaries reads. The zero value selects every
// run, oldest business date and generation first. Every condition is on
// the runs table, so the planner picks the runs before reading their
// counters.
type RunFilter struct {
	// RunID selects one run.
	RunID uuid.UUID
	// Date selects the runs of one business date.
	Date payments.Date
	// Generation, with Date, selects one generation of it.
	Generation int
	// OpenOrLatestDate selects the runs not completed and every run of the
	// latest business date.
	OpenOrLatestDate bool
	// CompletedSince, when not zero, selects the runs not completed and
	// those completed at or after it.
	CompletedSince time.Time
	// Before selects the runs strictly before it in (business date,
	// generation) order: the next page after a page ending there.
	Before *RunKey
	// NewestFirst orders by business date and generation descending.
	NewestFirst bool
	// Limit caps the number of runs; 0: no cap.
	Limit int
}

// summarySQL selects a Summary of runs r: its figures from the run's
// counter rows (the range of run_shards' primary key (run_id, shard,
// provider)), open or complete, and the completion record from
// run_completions' primary key.
var summarySQL = `
		SELECT r.run_id, r.reconciliation_id, r.business_date::text, r.generation, r.trigger, r.triggered_by,
		       r.source, r.source_sha256, r.time_zone, r.item_count, r.created_at, r.completed_at,
		       coalesce(s.open, 0), ` + perTerminal(`coalesce(s.%s, 0)`, `, `) + `,
		       coalesce(s.calls, 0)::bigint, coalesce(s.throttles, 0)::bigint,
		       coalesce(s.open - s.retry_scheduled, 0), coalesce(s.retry_scheduled, 0),
		       c.round, c.items, ` + perTerminal(`c.%s`, `, `) + `, c.provider_calls, c.throttles,
		       c.completed_at, c.completed_by,
		       r.cancelled_at, coalesce(r.cancelled_by, ''), coalesce(r.cancel_reason, ''), r.deadline_at,
		       coalesce(r.check_mode, '')
		  FROM runs r
		  LEFT JOIN LATERAL (
		        SELECT sum(remaining) AS open, sum(retry_scheduled) AS retry_scheduled,
		               ` + perTerminal(`sum(%s) AS %s`, `, `) + `,
		               sum(provider_calls) AS calls, sum(throttles) AS throttles
		          FROM run_shards WHERE run_id = r.run_id) s ON true
		  LEFT JOIN run_completions c ON c.run_id = r.run_id`

// scanSummary scans a row of summarySQL.
func scanSummary(row pgx.CollectableRow) (Summary, error) {
	var s Summary
	var date string
	var round *int
	var c Completion
	var cItems, cMatched, cMismatched, cMissing, cDead, cCancelled, cUnexpected *int
	var cCalls, cThrottles *int64
	var cAt *time.Time
	var cBy *string
	err := row.Scan(&s.RunID, &s.ReconciliationID, &date, &s.Generation, &s.Trigger, &s.TriggeredBy,
		&s.Source, &s.SourceSHA256, &s.TimeZone, &s.Items, &s.CreatedAt, &s.CompletedAt,
		&s.Open, &s.Matched, &s.Mismatched, &s.Missing, &s.DeadLettered, &s.Cancelled, &s.Unexpected,
		&s.ProviderCalls, &s.Throttles, &s.Queued, &s.RetryScheduled,
		&round, &cItems, &cMatched, &cMismatched, &cMissing, &cDead, &cCancelled, &cUnexpected, &cCalls, &cThrottles, &cAt, &cBy,
		&s.CancelledAt, &s.CancelledBy, &s.CancelReason, &s.DeadlineAt, &s.CheckMode)
	if err != nil {
		return s, err
	}
	if s.BusinessDate, err = payments.ParseDate(date); err != nil {
		return s, err
	}
	if round != nil {
		c = Completion{ReconciliationID: s.ReconciliationID, RunID: s.RunID, Round: *round, Items: *cItems,
			Matched: *cMatched, Mismatched: *cMismatched, Missing: *cMissing, DeadLettered: *cDead,
			Cancelled: *cCancelled, Unexpected: *cUnexpected, ProviderCalls: *cCalls, Throttles: *cThrottles, CompletedAt: *cAt,
			CompletedBy: *cBy, Took: cAt.Sub(s.CreatedAt)}
		s.Completion = &c
	}
	return s, nil
}

// Summaries reads the summaries of the runs f selects, through the indexes
// summarySQL names; the runs themselves are picked from runs by its
// primary key or its (business_date, generation) key, or read whole (one
// row a day) for the conditions on completion. Only the conditions f sets
// are written, and the limit as a literal, so a statement without
// parameters keeps its plan.
func Summaries(ctx context.Context, db Querier, f RunFilter) ([]Summary, error) {
	var where []string
	args := pgx.StrictNamedArgs{}
	if f.RunID != uuid.Nil {
		where = append(where, `r.run_id = @run_id`)
		args["run_id"] = f.RunID
	}
	if !f.Date.IsZero() {
		where = append(where, `r.business_date = @date::date`)
		args["date"] = f.Date.String()
		if f.Generation > 0 {
			where = append(where, `r.generation = @generation`)
			args["generation"] = f.Generation
		}
	}
	if f.OpenOrLatestDate {
		where = append(where, `(r.completed_at IS NULL OR r.business_date = (SELECT max(business_date) FROM runs))`)
	}
	if !f.CompletedSince.IsZero() {
		where = append(where, `(r.completed_at IS NULL OR r.completed_at >= @since)`)
		args["since"] = f.CompletedSince
	}
	if f.Before != nil {
		where = append(where, `(r.business_date, r.generation) < (@before_date::date, @before_generation)`)
		args["before_date"], args["before_generation"] = f.Before.Date.String(), f.Before.Generation
	}
	sql := summarySQL
	if len(where) > 0 {
		sql += "\n WHERE " + strings.Join(where, " AND ")
	}
	if f.NewestFirst {
		sql += "\n ORDER BY r.business_date DESC, r.generation DESC"
	} else {
		sql += "\n ORDER BY r.business_date, r.generation"
	}
	if f.Limit > 0 {
		sql += "\n LIMIT " + strconv.Itoa(f.Limit)
	}
	rows, err := db.Query(ctx, sql, args)
	if err != nil {
		return nil, fmt.Errorf("read run summaries: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanSummary)
	if err != nil {
		return nil, fmt.Errorf("read run summaries: %w", err)
	}
	return out, nil
}

// FindSummary returns the first summary of the runs f selects (with
// f.NewestFirst, the latest), or ErrNotFound.
func FindSummary(ctx context.Context, db Querier, f RunFilter) (Summary, error) {
	f.Limit = 1
	ss, err := Summaries(ctx, db, f)
	if err != nil {
		return Summary{}, err
	}
	if len(ss) == 0 {
		return Summary{}, ErrNotFound
	}
	return ss[0], nil
}

// Account is one account of a run: its counters and, once its last item
// finished, its first completion record.
type Account struct {
	AccountID string
	// Items counts the account's items, Open those not terminal yet.
	Items, Open int64
	// Matched, Mismatched, Missing and DeadLettered count its terminal
	// items by outcome; ProviderCalls and Throttles the calls made for them.
	Matched, Mismatched, Missing, DeadLettered int64
	ProviderCalls, Throttles                   int64
	// Round counts the account's completions (0 before the first);
	// CompletedAt and CompletedBy are the first's.
	Round       int
	CompletedAt time.Time
	CompletedBy string
}

// Accounts returns the accounts of a run after the account id after, in
// account id order, at most limit: a range of account_progress's primary
// key (run_id, account_id), each with its account_completions row by key.
func Accounts(ctx context.Context, db Querier, runID uuid.UUID, after string, limit int) ([]Account, error) {
	rows, err := db.Query(ctx, `
		SELECT p.account_id, p.item_count, p.remaining, p.matched, p.mismatched, p.missing, p.dead_lettered,
		       p.provider_calls, p.throttles, coalesce(c.round, 0), c.completed_at,
		       coalesce(c.completed_by, '')
		  FROM account_progress p
		  LEFT JOIN account_completions c ON c.run_id = p.run_id AND c.account_id = p.account_id
		 WHERE p.run_id = $1 AND p.account_id > $2
		 ORDER BY p.account_id LIMIT $3`, runID, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read accounts of run %s: %w", runID, err)
	}
	as, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Account, error) {
		var a Account
		var at *time.Time
		err := row.Scan(&a.AccountID, &a.Items, &a.Open, &a.Matched, &a.Mismatched, &a.Missing, &a.DeadLettered,
			&a.ProviderCalls, &a.Throttles, &a.Round, &at, &a.CompletedBy)
		if at != nil {
			a.CompletedAt = *at
		}
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("read accounts of run %s: %w", runID, err)
	}
	return as, nil
}
