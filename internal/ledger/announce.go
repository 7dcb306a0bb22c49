package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/outbox"
)

// announceCompletion adds the announcement of a run's completion round to
// the outbox inside the completing transaction, so that the completion and
// its announcement commit or roll back together. at is the completion time
// (nil: the database clock).
func announceCompletion(ctx context.Context, tx DB, runID uuid.UUID, round int, at *time.Time) error {
	r, err := runFacts(ctx, tx, runID)
	if err != nil {
		return err
	}
	r.Round = round
	var completed time.Time
	if at != nil {
		completed = *at
	} else if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&completed); err != nil {
		return fmt.Errorf("announce completion of run %s: %w", runID, err)
	}
	r.CompletedAt = &completed
	r.DurationSeconds = completed.Sub(r.EnqueuedAt).Seconds()
	if _, err := outbox.Add(ctx, tx, outbox.Event{Type: outbox.Completed, Run: r, CreatedAt: completed}); err != nil {
		return err
	}
	return nil
}

// runFacts reads what an announcement says about a run, as the run stands
// in the caller's transaction: its row, the totals of its shard counters
// (which the completion record copies), its amounts at stake per currency
// (run_breakdown) and, when it has dead letters, their reasons. The last is
// the one read of the run's items (a scan of the run's primary-key range,
// once per announcement); the others read a few counter rows.
func runFacts(ctx context.Context, tx DB, runID uuid.UUID) (outbox.Run, error) {
	r := outbox.Run{RunID: runID, Outcomes: map[string]int{}, DeadLetters: map[string]int{}, AtStake: []outbox.Amount{}}
	counts := make([]int, len(TerminalStates()))
	dest := []any{&r.ReconciliationID, &r.BusinessDate, &r.Generation, &r.Trigger, &r.Items, &r.EnqueuedAt,
		&r.DeadlineAt, &r.Open}
	for i := range counts {
		dest = append(dest, &counts[i])
	}
	dest = append(dest, &r.ProviderCalls, &r.Throttles)
	b := &pgx.Batch{}
	b.Queue(`
		SELECT r.reconciliation_id, r.business_date::text, r.generation, r.trigger, r.item_count, r.created_at,
		       r.deadline_at, coalesce(sum(s.remaining), 0)::int, `+perTerminal(`coalesce(sum(s.%s), 0)::int`, `, `)+`,
		       coalesce(sum(s.provider_calls), 0)::bigint, coalesce(sum(s.throttles), 0)::bigint
		  FROM runs r LEFT JOIN run_shards s USING (run_id)
		 WHERE r.run_id = $1
		 GROUP BY r.run_id`, runID)
	b.Queue(`
		SELECT currency, sum(mismatched_minor)::bigint, sum(missing_minor)::bigint, sum(dead_lettered_minor)::bigint
		  FROM run_breakdown WHERE run_id = $1
		 GROUP BY currency
		HAVING sum(mismatched_minor) <> 0 OR sum(missing_minor) <> 0 OR sum(dead_lettered_minor) <> 0
		 ORDER BY currency`, runID)
	err := func() error {
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if err := br.QueryRow().Scan(dest...); err != nil {
			return err
		}
		rows, err := br.Query()
		if err != nil {
			return err
		}
		amounts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outbox.Amount])
		if err != nil {
			return err
		}
		r.AtStake = append(r.AtStake, amounts...)
		return br.Close()
	}()
	if err != nil {
		return outbox.Run{}, fmt.Errorf("read run %s for its announcement: %w", runID, err)
	}
	for i, s := range TerminalStates() {
		r.Outcomes[string(s)] = counts[i]
	}
	if r.Outcomes[string(DeadLettered)] == 0 {
		return r, nil
	}
	rows, err := tx.Query(ctx, `
		SELECT coalesce(last_reason, ''), count(*)::int FROM items
		 WHERE run_id = $1 AND state = `+DeadLettered.literal()+`
		 GROUP BY 1`, runID)
	if err != nil {
		return outbox.Run{}, fmt.Errorf("count dead letters of run %s: %w", runID, err)
	}
	var reason string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&reason, &n}, func() error {
		r.DeadLetters[reason] = n
		return nil
	}); err != nil {
		return outbox.Run{}, fmt.Errorf("count dead letters of run %s: %w", runID, err)
	}
	return r, nil
}
