package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Requeue moves dead-lettered items of a run back to queued (a redrive or a
// `--rerun failed`), records a transition for each and reopens the run's
// completion bookkeeping: the items count as open again, and their outcome
// (and, on their accounts' rows, their calls and throttles) leaves the
// counters' totals until they finish anew.
// Items not dead-lettered are left alone. It returns the transaction ids it
// requeued.
func Requeue(ctx context.Context, tx DB, runID uuid.UUID, transactionIDs []string, reason, actor string, at time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, requeueItems, runID, transactionIDs, reason, nullTime(at))
	if err != nil {
		return nil, fmt.Errorf("requeue items of run %s: %w", runID, err)
	}
	type reopened struct {
		ID          string
		Account     string
		Shard       int16
		Provider    string
		Currency    string
		AmountMinor int64
		Attempts    int32
		Throttles   int32
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reopened])
	if err != nil {
		return nil, fmt.Errorf("requeue items of run %s: %w", runID, err)
	}
	if len(items) == 0 {
		return nil, nil
	}
	ids := make([]string, len(items))
	accounts := make([]string, len(items))
	shards := make([]int16, len(items))
	attempts := make([]int32, len(items))
	throttles := make([]int32, len(items))
	providers := make([]string, len(items))
	currencies := make([]string, len(items))
	amounts := make([]int64, len(items))
	for i, r := range items {
		ids[i], accounts[i], shards[i], attempts[i], throttles[i] = r.ID, r.Account, r.Shard, r.Attempts, r.Throttles
		providers[i], currencies[i], amounts[i] = r.Provider, r.Currency, r.AmountMinor
	}
	var a changeArrays
	for _, id := range ids {
		if err := a.add(Change{RunID: runID, TransactionID: id, From: DeadLettered, To: Queued,
			Reason: reason, Actor: actor, At: at}); err != nil {
			return nil, err
		}
	}
	b := &pgx.Batch{}
	a.queueTransitions(b)
	b.Queue(`UPDATE account_progress p SET `+reopen+`,
	               provider_calls = p.provider_calls - r.calls, throttles = p.throttles - r.throttles
	           FROM (SELECT g, count(*) AS n, sum(calls) AS calls, sum(throttles) AS throttles
	                   FROM unnest($2::text[], $3::int[], $4::int[]) AS u(g, calls, throttles) GROUP BY g) r
	          WHERE p.run_id = $1 AND p.account_id = r.g`, runID, accounts, attempts, throttles)
	b.Queue(`UPDATE run_shards p SET `+reopen+`
	           FROM (SELECT g, pr, count(*) AS n FROM unnest($2::smallint[], $3::text[]) AS u(g, pr) GROUP BY g, pr) r
	          WHERE p.run_id = $1 AND p.shard = r.g AND p.provider = r.pr`, runID, shards, providers)
	b.Queue(`UPDATE run_breakdown p SET dead_lettered = p.dead_lettered - r.n, dead_lettered_minor = p.dead_lettered_minor - r.amount
	           FROM (SELECT s, pr, cu, count(*) AS n, sum(amount) AS amount
	                   FROM unnest($2::smallint[], $3::text[], $4::text[], $5::bigint[]) AS u(s, pr, cu, amount)
	                  GROUP BY s, pr, cu) r
	          WHERE p.run_id = $1 AND p.shard = r.s AND p.provider = r.pr AND p.currency = r.cu`,
		runID, shards, providers, currencies, amounts)
	b.Queue(`UPDATE runs SET completed_at = NULL WHERE run_id = $1`, runID)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("record requeue of %d items in run %s: %w", len(ids), runID, err)
	}
	return ids, nil
}

// requeueItems moves the given dead letters of run $1 back to queued.
var requeueItems = `
		UPDATE items SET state = ` + Queued.literal() + `, terminal_at = NULL, first_attempt_at = NULL,
		       last_reason = $3, updated_at = coalesce($4, now())
		 WHERE run_id = $1 AND transaction_id = ANY($2) AND state = ` + DeadLettered.literal() + `
		RETURNING transaction_id, account_id, shard, provider, currency, amount_minor, attempts, throttles`

// reopen counts requeued dead letters open again on a counter row: only
// dead letters are requeued, so only the dead_lettered column goes down.
// An account's row also gives back their calls and throttles, which it
// counts for its closed items only (they are added again when the items
// close); a shard's row counts every call of its items, open or closed, so
// it keeps them.
const reopen = `remaining = p.remaining + r.n, ` + string(DeadLettered) + ` = p.` + string(DeadLettered) + ` - r.n`
