package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/schedule"
)

func cmdPrune(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "prune", "--older-than AGE [--dry-run]",
		"Delete what only served the queue for runs completed more than AGE ago: their acked queue\n"+
			"messages and their schedule ticks; and the limiters' own history rows and the heartbeats of\n"+
			"consumers last seen more than AGE ago (operators' `limit set` rows are kept). The ledger\n"+
			"(runs, items, transitions, completions) is never touched, and a pruned date still cannot be\n"+
			"enqueued twice. Deletes in batches, each a short transaction of its own, so running\n"+
			"consumers are not held up.",
		"reconcile prune --older-than 90d --dry-run")
	olderThan := fs.String("older-than", "", "age of the runs' completion, in days (90d) or as a duration (2160h) (required)")
	dryRun := fs.Bool("dry-run", false, "count what would be deleted; delete nothing")
	batch := fs.Int("batch", queue.DefaultPruneBatch, "message ids per delete statement")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// No default: a deletion nobody sized is not one to make for them, and
	// a dry run is a rehearsal of a real one.
	if *olderThan == "" {
		return usageErrorf("prune: --older-than is required: how long ago a run must have completed for its queue data to go, e.g. --older-than 90d (nothing was deleted)")
	}
	age, err := parseAge("prune: --older-than", *olderThan)
	if err != nil {
		return err
	}
	if *batch < 1 {
		return usageErrorf("prune: --batch %d: want at least 1", *batch)
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := prune(ctx, pool, logger, time.Now().Add(-age), *batch, *dryRun)
	if err != nil {
		return err
	}
	verb := "deleted"
	if *dryRun {
		verb = "would delete"
	}
	before := res.before.UTC().Format(time.RFC3339)
	fmt.Fprintf(e.stdout, "%s %d acked queue messages and %d schedule ticks of runs completed before %s, "+
		"%d limiter history rows and %d consumer heartbeats recorded before then (%s)\n",
		verb, res.messages, res.ticks, before, res.history, res.heartbeats, res.elapsed.Round(time.Millisecond))
	return nil
}

type pruneResult struct {
	before     time.Time
	messages   int64
	ticks      int64
	history    int64
	heartbeats int64
	elapsed    time.Duration
}

// prune deletes (or counts) the acked messages and schedule ticks of the
// runs completed before before, and the limiter history and consumer
// heartbeats recorded before it.
func prune(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, before time.Time, batch int, dryRun bool) (pruneResult, error) {
	start := time.Now()
	completed, err := ledger.RunsCompletedBefore(ctx, pool, before)
	if err != nil {
		return pruneResult{}, err
	}
	q := queue.New(pool, queue.Config{Logger: logger})
	pr, err := q.PruneAcked(ctx, completed, batch, dryRun)
	if err != nil {
		return pruneResult{}, err
	}
	ticks, err := schedule.PruneTicks(ctx, pool, before, completed, dryRun)
	if err != nil {
		return pruneResult{}, err
	}
	history, err := limiter.PruneHistory(ctx, pool, before, dryRun)
	if err != nil {
		return pruneResult{}, err
	}
	heartbeats, err := consume.PruneHeartbeats(ctx, pool, before, dryRun)
	if err != nil {
		return pruneResult{}, err
	}
	res := pruneResult{before: before, messages: pr.Messages, ticks: ticks, history: history, heartbeats: heartbeats,
		elapsed: time.Since(start)}
	logger.Debug("pruned", "before", before, "messages", pr.Messages, "batches", pr.Batches, "ticks", ticks,
		"history", history, "heartbeats", heartbeats,
		"dry_run", dryRun, "elapsed", res.elapsed)
	return res, nil
}

// parseAge reads an age in days (90d) or as a Go duration (2160h); what
// names the flag in errors.
func parseAge(what, s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 1 && n <= 36500 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, usageErrorf("%s %q: want days (90d) or a duration (2160h)", what, s)
}
