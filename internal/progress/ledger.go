package progress

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DB is what Runs reads from: a pgx pool, connection or transaction.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Runs counts the items of the runs that are open or completed at or after
// since: Total is their items, Done those in a terminal state. It reads the
// completion counters (run_shards), not the items, so it stays cheap on
// runs of millions of items. Throttles is left zero.
func Runs(ctx context.Context, db DB, since time.Time) (Counts, error) {
	var c Counts
	err := db.QueryRow(ctx, `
		SELECT coalesce(sum(r.item_count), 0)::bigint,
		       coalesce(sum(r.item_count - coalesce(s.remaining, 0)), 0)::bigint
		  FROM runs r
		  LEFT JOIN LATERAL (SELECT sum(remaining) AS remaining FROM run_shards WHERE run_id = r.run_id) s ON true
		 WHERE r.completed_at IS NULL OR r.completed_at >= $1`, since).Scan(&c.Total, &c.Done)
	if err != nil {
		return Counts{}, fmt.Errorf("count progress of open runs: %w", err)
	}
	return c, nil
}
