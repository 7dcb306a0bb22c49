package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs a statement: *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PruneTicks deletes the schedule_ticks recorded before before whose run, if
// they have one, is one of completed (the caller passes the runs completed
// before before, as the ledger lists them: ledger.RunsCompletedBefore), so
// a tick of a run still open stays, to explain it. A few ticks are written
// a day, so one statement does. With dryRun it only counts. It returns the
// number of ticks deleted or to delete.
func PruneTicks(ctx context.Context, db Execer, before time.Time, completed []uuid.UUID, dryRun bool) (int64, error) {
	const where = `recorded_at < @before AND (run_id IS NULL OR run_id = ANY (@completed))`
	args := pgx.StrictNamedArgs{"before": before, "completed": completed}
	if dryRun {
		var n int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM schedule_ticks WHERE `+where, args).Scan(&n); err != nil {
			return 0, fmt.Errorf("count schedule ticks before %s: %w", before.Format(time.RFC3339), err)
		}
		return n, nil
	}
	tag, err := db.Exec(ctx, `DELETE FROM schedule_ticks WHERE `+where, args)
	if err != nil {
		return 0, fmt.Errorf("prune schedule ticks before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}
