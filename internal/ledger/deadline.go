package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/outbox"
)

// SetDeadlines gives every open run without a deadline the deadline its
// enqueue time plus after, and returns how many it set. A run keeps the
// first deadline it was given: processes started with different --deadline
// values do not move it.
func SetDeadlines(ctx context.Context, db DB, after time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, `
		UPDATE runs SET deadline_at = created_at + $1::bigint * interval '1 microsecond'
		 WHERE completed_at IS NULL AND deadline_at IS NULL`, after.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("set run deadlines: %w", err)
	}
	return tag.RowsAffected(), nil
}

// OverdueRuns returns the open runs whose deadline has passed at now (zero:
// the database clock), oldest deadline first.
func OverdueRuns(ctx context.Context, db Querier, now time.Time) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `
		SELECT run_id FROM runs
		 WHERE completed_at IS NULL AND deadline_at <= coalesce($1::timestamptz, now())
		 ORDER BY deadline_at, run_id`, nullTime(now))
	if err != nil {
		return nil, fmt.Errorf("find overdue runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("find overdue runs: %w", err)
	}
	return ids, nil
}

// AnnounceMissedDeadline adds the announcement that run was still open at
// its deadline to the outbox, in the caller's transaction, and reports
// whether it did: a run complete by now, or already announced (by this or
// any other process), is not announced.
func AnnounceMissedDeadline(ctx context.Context, tx DB, runID uuid.UUID, now time.Time) (bool, error) {
	r, err := runFacts(ctx, tx, runID)
	if err != nil {
		return false, err
	}
	if r.Open == 0 || r.DeadlineAt == nil {
		return false, nil
	}
	r.DurationSeconds = r.DeadlineAt.Sub(r.EnqueuedAt).Seconds()
	return outbox.Add(ctx, tx, outbox.Event{Type: outbox.DeadlineMissed, Run: r, CreatedAt: now})
}

// RunClock is when a run was enqueued, is due and completed.
type RunClock struct {
	ReconciliationID string
	EnqueuedAt       time.Time
	// DeadlineAt is the run's deadline; zero when it has none.
	DeadlineAt time.Time
	// CompletedAt is when it last completed; zero while open.
	CompletedAt time.Time
}

// RunClocks returns the times of the open runs and of those completed at
// or after since, by reconciliation id (a scan of runs: one row per date
// and generation).
func RunClocks(ctx context.Context, db Querier, since time.Time) ([]RunClock, error) {
	rows, err := db.Query(ctx, `
		SELECT reconciliation_id, created_at, deadline_at, completed_at
		  FROM runs
		 WHERE completed_at IS NULL OR completed_at >= $1
		 ORDER BY reconciliation_id`, since)
	if err != nil {
		return nil, fmt.Errorf("read run times: %w", err)
	}
	var out []RunClock
	var c RunClock
	var deadline, completed *time.Time
	if _, err := pgx.ForEachRow(rows, []any{&c.ReconciliationID, &c.EnqueuedAt, &deadline, &completed}, func() error {
		c.DeadlineAt, c.CompletedAt = time.Time{}, time.Time{}
		if deadline != nil {
			c.DeadlineAt = *deadline
		}
		if completed != nil {
			c.CompletedAt = *completed
		}
		out = append(out, c)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read run times: %w", err)
	}
	return out, nil
}
