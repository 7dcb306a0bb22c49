package ledger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/payments"
)

// NewRun is the row of a run being created.
type NewRun struct {
	RunID            uuid.UUID
	ReconciliationID string
	BusinessDate     payments.Date
	// Generation is 1 for the first run of the date, N+1 for each full
	// re-run.
	Generation int
	// Trigger is what started the run: manual or cron.
	Trigger string
	// TriggeredBy names who started it.
	TriggeredBy string
	// Source names the input: a file path, "-" or table:NAME.
	Source string
	// TimeZone is the IANA zone in which BusinessDate was read.
	TimeZone string
}

// CreateRun inserts the row of a new run with no items yet, inside the
// caller's transaction. It returns false, and writes nothing, when the date
// already has a run of that generation. The unique (business_date,
// generation) key makes a concurrent creator of the same run wait for the
// first to commit, and then get false. Insert the items with InsertItems,
// then call InitCounters and FinishRun.
func CreateRun(ctx context.Context, tx DB, r NewRun) (bool, error) {
	tag, err := tx.Exec(ctx, `
		INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by,
		                  source, source_sha256, time_zone, item_count)
		VALUES ($1, $2, $3, $4, $5, $6, $7, '', $8, 0)
		ON CONFLICT DO NOTHING`,
		r.RunID, r.ReconciliationID, r.BusinessDate.String(), r.Generation, r.Trigger, r.TriggeredBy,
		r.Source, r.TimeZone)
	if err != nil {
		return false, fmt.Errorf("create run %s: %w", r.ReconciliationID, err)
	}
	return tag.RowsAffected() > 0, nil
}

// FinishRun records the item count and the input's SHA-256 (hex) of a run
// that CreateRun created, once InsertItems has written its items. It does
// not complete the run: that happens when its last item ends (see
// RecordBatch).
func FinishRun(ctx context.Context, tx DB, runID uuid.UUID, items int, sourceSHA256 string) error {
	if _, err := tx.Exec(ctx, `UPDATE runs SET item_count = $2, source_sha256 = $3 WHERE run_id = $1`,
		runID, items, sourceSHA256); err != nil {
		return fmt.Errorf("finish run %s: %w", runID, err)
	}
	return nil
}

// Run identifies a run and its size.
type Run struct {
	RunID            uuid.UUID
	ReconciliationID string
	Generation       int
	// Items is the run's item count as recorded by FinishRun.
	Items int
	// SourceSHA256 is the SHA-256 (hex) of the input the run was created
	// from.
	SourceSHA256 string
	// Completed is true when no item of the run is open.
	Completed bool
	// Cancelled is true when the run was withdrawn (CancelRun).
	Cancelled bool
}

// runColumns are the columns scanned by scanRun.
const runColumns = `run_id, reconciliation_id, generation, item_count, source_sha256,
	completed_at IS NOT NULL, cancelled_at IS NOT NULL`

func scanRun(row pgx.Row) (Run, error) {
	var r Run
	err := row.Scan(&r.RunID, &r.ReconciliationID, &r.Generation, &r.Items, &r.SourceSHA256, &r.Completed, &r.Cancelled)
	return r, err
}

// LatestGeneration returns the highest generation of the date's runs, 0
// when it has none, from the (business_date, generation) key.
func LatestGeneration(ctx context.Context, db Querier, d payments.Date) (int, error) {
	var latest int
	if err := db.QueryRow(ctx, `SELECT coalesce(max(generation), 0) FROM runs WHERE business_date = $1`,
		d.String()).Scan(&latest); err != nil {
		return 0, fmt.Errorf("find latest generation of %s: %w", d, err)
	}
	return latest, nil
}

// FindRun returns the run of the date and generation, or ErrNotFound, by
// the (business_date, generation) key.
func FindRun(ctx context.Context, db Querier, d payments.Date, generation int) (Run, error) {
	r, err := scanRun(db.QueryRow(ctx, `SELECT `+runColumns+` FROM runs
		WHERE business_date = $1 AND generation = $2`, d.String(), generation))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, fmt.Errorf("find run %d of %s: %w", generation, d, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("find run %d of %s: %w", generation, d, err)
	}
	return r, nil
}

// LockLatestRun returns the date's run of the highest generation and locks
// its row (FOR NO KEY UPDATE) until the caller's transaction ends, so that
// concurrent requeues of the date take turns. It returns ErrNotFound when
// the date has no run.
func LockLatestRun(ctx context.Context, tx DB, d payments.Date) (Run, error) {
	return LockRun(ctx, tx, d, 0)
}

// LockRun is LockLatestRun for the given generation; 0 means the latest.
func LockRun(ctx context.Context, tx DB, d payments.Date, generation int) (Run, error) {
	what := "latest run"
	if generation > 0 {
		what = fmt.Sprintf("run %d", generation)
	}
	r, err := scanRun(tx.QueryRow(ctx, `SELECT `+runColumns+` FROM runs
		WHERE business_date = $1 AND ($2 = 0 OR generation = $2)
		ORDER BY generation DESC LIMIT 1 FOR NO KEY UPDATE`, d.String(), generation))
	if errors.Is(err, pgx.ErrNoRows) {
		return Run{}, fmt.Errorf("find %s of %s: %w", what, d, ErrNotFound)
	}
	if err != nil {
		return Run{}, fmt.Errorf("find %s of %s: %w", what, d, err)
	}
	return r, nil
}

// OpenRuns counts the runs that are not complete: those with an item in an
// open state. It reads runs whole (a row a day).
func OpenRuns(ctx context.Context, db Querier) (int, error) {
	var open int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM runs WHERE completed_at IS NULL`).Scan(&open); err != nil {
		return 0, fmt.Errorf("count open runs: %w", err)
	}
	return open, nil
}

// Completion is the latest completion record of a run: its totals when
// its last item ended, the last time it did.
type Completion struct {
	RunID            uuid.UUID
	ReconciliationID string
	// Round is 1 for the run's first completion, N when redriven items
	// finished it for the N-th time.
	Round        int
	Items        int
	Matched      int
	Mismatched   int
	Missing      int
	DeadLettered int
	Cancelled    int
	// Unexpected counts the records the provider listed that the file
	// lacks (list mode); Items includes them.
	Unexpected int
	// ProviderCalls counts the provider calls made for the run's items,
	// Throttles those answered 429.
	ProviderCalls int64
	Throttles     int64
	// CompletedAt is when the completion was recorded, and CompletedBy by
	// which consumer (or operator).
	CompletedAt time.Time
	CompletedBy string
	// Took is the time from the run's creation to this completion.
	Took time.Duration
	// CancelledBy and CancelReason say who withdrew the run and why; empty
	// if nobody did.
	CancelledBy  string
	CancelReason string
}

// Completions returns the latest completion record of each complete run
// completed at or after since, by business date and generation: a run
// redriven and completed again shows its last round's totals (from
// completion_rounds), not its first's (run_completions keeps those), and a
// run reopened by a redrive shows nothing until it completes again.
func Completions(ctx context.Context, db Querier, since time.Time) ([]Completion, error) {
	rows, err := db.Query(ctx, `
		SELECT r.run_id, r.reconciliation_id, c.round, coalesce(k.items, c.items), `+perTerminal(`coalesce(k.%s, c.%s)`, `, `)+`,
		       coalesce(k.provider_calls, c.provider_calls), coalesce(k.throttles, c.throttles),
		       coalesce(k.completed_at, c.completed_at), coalesce(k.completed_by, c.completed_by),
		       coalesce(k.completed_at, c.completed_at) - r.created_at,
		       coalesce(r.cancelled_by, ''), coalesce(r.cancel_reason, '')
		  FROM runs r JOIN run_completions c USING (run_id)
		  LEFT JOIN completion_rounds k ON k.run_id = c.run_id AND k.account_id IS NULL AND k.round = c.round AND c.round > 1
		 WHERE r.completed_at IS NOT NULL AND coalesce(k.completed_at, c.completed_at) >= $1
		 ORDER BY r.business_date, r.generation`, since)
	if err != nil {
		return nil, fmt.Errorf("read completions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Completion])
	if err != nil {
		return nil, fmt.Errorf("read completions: %w", err)
	}
	return out, nil
}

// Progress counts the items of a set of runs.
type Progress struct {
	// Items is the number of items of the runs.
	Items int64
	// Done is the number of those in a terminal state.
	Done int64
}

// RunProgress counts the items of the runs that are open or completed at or
// after since. It reads the completion counters (run_shards), not the
// items, so it stays cheap on runs of millions of items.
func RunProgress(ctx context.Context, db Querier, since time.Time) (Progress, error) {
	var p Progress
	err := db.QueryRow(ctx, `
		SELECT coalesce(sum(r.item_count), 0)::bigint,
		       coalesce(sum(r.item_count - coalesce(s.remaining, 0)), 0)::bigint
		  FROM runs r
		  LEFT JOIN LATERAL (SELECT sum(remaining) AS remaining FROM run_shards WHERE run_id = r.run_id) s ON true
		 WHERE r.completed_at IS NULL OR r.completed_at >= $1`, since).Scan(&p.Items, &p.Done)
	if err != nil {
		return Progress{}, fmt.Errorf("count progress of open runs: %w", err)
	}
	return p, nil
}

// ResolveRun returns the id of the run named by name: its run id, or its
// reconciliation id such as nightly-2026-10-24 (the unique key on
// reconciliation_id, or the primary key), or ErrNotFound.
func ResolveRun(ctx context.Context, db Querier, name string) (uuid.UUID, error) {
	var id uuid.UUID
	q := `SELECT run_id FROM runs WHERE reconciliation_id = $1`
	if parsed, err := uuid.Parse(name); err == nil {
		q = `SELECT run_id FROM runs WHERE run_id = $2 OR reconciliation_id = $1`
		err = db.QueryRow(ctx, q, name, parsed).Scan(&id)
		return id, resolveErr(name, err)
	}
	err := db.QueryRow(ctx, q, name).Scan(&id)
	return id, resolveErr(name, err)
}

func resolveErr(name string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("find run %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("find run %q: %w", name, err)
	}
	return nil
}

// RunsCompletedBefore returns the runs completed (and not reopened) before
// before. It reads runs whole: a row a day.
func RunsCompletedBefore(ctx context.Context, db Querier, before time.Time) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT run_id FROM runs WHERE completed_at < $1 ORDER BY run_id`, before)
	if err != nil {
		return nil, fmt.Errorf("find runs completed before %s: %w", before.Format(time.RFC3339), err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("find runs completed before %s: %w", before.Format(time.RFC3339), err)
	}
	return ids, nil
}

// DatesWithRuns reports which of dates have a run, by the (business_date,
// generation) key.
func DatesWithRuns(ctx context.Context, db Querier, dates []payments.Date) (map[payments.Date]bool, error) {
	if len(dates) == 0 {
		return map[payments.Date]bool{}, nil
	}
	texts := make([]string, len(dates))
	for i, d := range dates {
		texts[i] = d.String()
	}
	rows, err := db.Query(ctx, `
		SELECT d::text FROM unnest($1::date[]) d
		 WHERE EXISTS (SELECT FROM runs WHERE business_date = d)`, texts)
	if err != nil {
		return nil, fmt.Errorf("find the runs of %d dates: %w", len(dates), err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find the runs of %d dates: %w", len(dates), err)
	}
	out := make(map[payments.Date]bool, len(found))
	for _, s := range found {
		d, err := payments.ParseDate(s)
		if err != nil {
			return nil, err
		}
		out[d] = true
	}
	return out, nil
}

// CountRuns counts the runs, stopping at limit+1 so a page can show
// "limit+" without reading every run (the primary key, to at most limit+1
// entries). The limit is a literal, so the statement keeps its plan.
func CountRuns(ctx context.Context, db Querier, limit int) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM runs LIMIT `+strconv.Itoa(limit+1)+`) r`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count runs: %w", err)
	}
	return n, nil
}
