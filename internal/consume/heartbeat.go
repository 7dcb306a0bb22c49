package consume

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/reconcile/reconcile/internal/limiter"
)

// HeartbeatEvery is how often a running consumer refreshes its row in the
// consumers table, by which `reconcile status` tells a run nobody works on
// from a slow one, and restores the limits set for a while that expired.
const HeartbeatEvery = 5 * time.Second

// heartbeat upserts this process's row in consumers at once and then every
// HeartbeatEvery until ctx ends. A failed beat is logged at debug level and
// retried at the next: the heartbeat only informs status, it never stops
// the consumer.
func (c *Consumer) heartbeat(ctx context.Context) {
	host, _ := os.Hostname()
	if i := strings.LastIndexByte(c.cfg.Actor, ':'); i > 0 {
		host = c.cfg.Actor[:i]
	}
	beat := func() {
		// A limit set for a while comes back on time while any consumer
		// runs; only one of them restores it.
		if n, err := limiter.ExpireSettings(ctx, c.pool); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Debug("expired limits not restored", "err", err)
		} else if n > 0 {
			c.cfg.Logger.Info("a limit set for a while expired; the settings before it are back", "limiters", n)
		}
		if _, err := c.pool.Exec(ctx, `
			INSERT INTO consumers (consumer_id, host, pid, started_at, last_seen) VALUES ($1, $2, $3, now(), now())
			ON CONFLICT (consumer_id) DO UPDATE SET last_seen = now()`, c.cfg.Actor, host, os.Getpid()); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Debug("heartbeat not recorded", "err", err)
		}
	}
	beat()
	t := time.NewTicker(HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			beat()
		}
	}
}

// PruneHeartbeats deletes the rows of consumers last seen before before, or
// with dryRun only counts them, and returns how many.
func PruneHeartbeats(ctx context.Context, db *pgxpool.Pool, before time.Time, dryRun bool) (int64, error) {
	if dryRun {
		var n int64
		if err := db.QueryRow(ctx, `SELECT count(*) FROM consumers WHERE last_seen < $1`, before).Scan(&n); err != nil {
			return 0, fmt.Errorf("count consumers last seen before %s: %w", before.Format(time.RFC3339), err)
		}
		return n, nil
	}
	tag, err := db.Exec(ctx, `DELETE FROM consumers WHERE last_seen < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("prune consumers last seen before %s: %w", before.Format(time.RFC3339), err)
	}
	return tag.RowsAffected(), nil
}

// Heartbeats is what the consumers' heartbeats say.
type Heartbeats struct {
	// Alive counts the consumers whose latest heartbeat is after the time
	// asked for: those running then, give or take HeartbeatEvery.
	Alive int
	// LastSeen is the latest heartbeat of any consumer; zero when none was
	// ever recorded.
	LastSeen time.Time
}

// ReadHeartbeats counts the consumers seen after since, on the caller's
// clock, and finds the latest heartbeat of any (a scan of consumers: one
// row per process until pruned). `status` and the metrics read it.
func ReadHeartbeats(ctx context.Context, db Querier, since time.Time) (Heartbeats, error) {
	var h Heartbeats
	var last *time.Time
	if err := db.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE last_seen > $1), max(last_seen)
		  FROM consumers`, since).Scan(&h.Alive, &last); err != nil {
		return Heartbeats{}, fmt.Errorf("read consumers' heartbeats: %w", err)
	}
	if last != nil {
		h.LastSeen = *last
	}
	return h, nil
}
