package ledger

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// accountKey names one account of a run.
type accountKey struct {
	RunID     uuid.UUID
	AccountID string
}

// stamp is when and by whom a completion was made: the latest terminal
// change of the account or run in the batch (nil at: the database clock).
type stamp struct {
	at    *time.Time
	actor string
	set   bool
}

func (s stamp) later(c Change) stamp {
	at := nullTime(c.At)
	switch {
	case !s.set:
		return stamp{at: at, actor: c.Actor, set: true}
	case s.at == nil:
		return s
	case at == nil || at.After(*s.at):
		return stamp{at: at, actor: c.Actor, set: true}
	}
	return s
}

// complete writes the completion records of the accounts whose counters
// reached zero and of the runs that had a shard reach zero and now have
// none open, in one round trip, and adds the announcement of each run it
// completed to the outbox (two more per run).
func complete(ctx context.Context, tx DB, cs []Change, changed []changedRow, accounts []accountKey, runs []uuid.UUID) (Result, error) {
	accountOf := make(map[Key]string, len(changed))
	for _, c := range changed {
		accountOf[Key{c.RunID, c.TransactionID}] = c.AccountID
	}
	byAccount := map[accountKey]stamp{}
	byRun := map[uuid.UUID]stamp{}
	for _, c := range cs {
		if c.To.Terminal() {
			k := accountKey{c.RunID, accountOf[Key{c.RunID, c.TransactionID}]}
			byAccount[k] = byAccount[k].later(c)
			byRun[c.RunID] = byRun[c.RunID].later(c)
		}
	}

	b := &pgx.Batch{}
	if len(accounts) > 0 {
		var runIDs []uuid.UUID
		var ids, actors []string
		var ats []*time.Time
		for _, k := range accounts {
			s := byAccount[k]
			runIDs, ids, ats, actors = append(runIDs, k.RunID), append(ids, k.AccountID), append(ats, s.at), append(actors, s.actor)
		}
		b.Queue(completeAccounts, runIDs, ids, ats, actors)
	}
	// Run rows are locked in one order, like the counters.
	slices.SortFunc(runs, func(x, y uuid.UUID) int { return bytes.Compare(x[:], y[:]) })
	runs = slices.Compact(runs)
	for _, run := range runs {
		s := byRun[run]
		b.Queue(lockRun, run)
		b.Queue(completeRun, run, s.at, s.actor)
	}

	res := Result{AccountsCompleted: len(accounts)}
	rounds, err := sendCompletions(ctx, tx, b, len(accounts), runs, &res)
	if err != nil {
		return Result{}, err
	}
	for i, run := range res.RunsCompleted {
		if err := announceCompletion(ctx, tx, run, rounds[i], byRun[run].at); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// CompleteListed completes run runID, in tx, if none of its items is open:
// the transaction that ends a listing of the run (done or failed) calls it,
// as the items judged from the listed pages may all have been recorded
// before the listing's last page. It takes the run's lock like the
// recorders that empty a shard, so exactly one of them completes the run,
// and returns whether tx did.
func CompleteListed(ctx context.Context, tx DB, runID uuid.UUID, at time.Time, actor string) (bool, error) {
	b := &pgx.Batch{}
	b.Queue(lockRun, runID)
	b.Queue(completeRun, runID, at, actor)
	var res Result
	rounds, err := sendCompletions(ctx, tx, b, 0, []uuid.UUID{runID}, &res)
	if err != nil || len(rounds) == 0 {
		return false, err
	}
	return true, announceCompletion(ctx, tx, runID, rounds[0], &at)
}

// sendCompletions sends the batch of complete and reads its answers: it
// adds the runs it completed to res and returns their completion rounds, in
// the same order.
func sendCompletions(ctx context.Context, tx DB, b *pgx.Batch, accounts int, runs []uuid.UUID, res *Result) ([]int, error) {
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if accounts > 0 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("complete %d accounts: %w", accounts, err)
		}
	}
	var rounds []int
	for _, run := range runs {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("lock run %s: %w", run, err)
		}
		var round int
		switch err := br.QueryRow().Scan(&round); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("complete run %s: %w", run, err)
		default:
			res.RunsCompleted = append(res.RunsCompleted, run)
			rounds = append(rounds, round)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("complete runs: %w", err)
	}
	return rounds, nil
}

// lockRun is taken only by transactions that emptied a shard counter row of
// the run (one per shard and provider), so at most one per row ever waits
// on it. FOR NO KEY UPDATE, not FOR
// UPDATE: account completions hold a KEY SHARE lock on the run row through
// their foreign key, and FOR UPDATE would deadlock against them.
const lockRun = `SELECT 1 FROM runs WHERE run_id = $1 FOR NO KEY UPDATE`

// The completion statements; their per-state columns are built from
// [TerminalStates] once. The first completion of an account or a run is
// inserted and never changed afterwards; a later one (after requeued items
// finished it again) only counts its round there and adds its record to
// completion_rounds.
var (
	completeAccounts = `
		WITH k AS (
		    SELECT p.run_id, p.account_id, p.item_count AS items, ` + perTerminal(`p.%s`, `, `) + `,
		           p.provider_calls, p.throttles, coalesce(k.at, now()) AS completed_at, k.actor AS completed_by
		      FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[]) AS k(run_id, account_id, at, actor)
		      JOIN account_progress p USING (run_id, account_id)),
		up AS (
		    INSERT INTO account_completions AS c (run_id, account_id, items, ` + perTerminal(`%s`, `, `) + `,
		                                          provider_calls, throttles, completed_at, completed_by)
		    SELECT run_id, account_id, items, ` + perTerminal(`%s`, `, `) + `, provider_calls, throttles, completed_at, completed_by
		      FROM k
		    ON CONFLICT (run_id, account_id) DO UPDATE SET round = c.round + 1
		    RETURNING c.run_id, c.account_id, c.round)
		INSERT INTO completion_rounds (run_id, account_id, round, items, ` + perTerminal(`%s`, `, `) + `,
		                               provider_calls, throttles, completed_at, completed_by)
		SELECT k.run_id, k.account_id, up.round, k.items, ` + perTerminal(`k.%s`, `, `) + `,
		       k.provider_calls, k.throttles, k.completed_at, k.completed_by
		  FROM up JOIN k USING (run_id, account_id)
		 WHERE up.round > 1`

	// completeRun runs after lockRun, in a fresh READ COMMITTED snapshot:
	// the last shard-emptying transaction to get the lock sees all the
	// others committed, finds no open item and writes the completion. It
	// answers one row when it completed the run. A run whose provider list
	// is still being paged through (list mode) is not complete however
	// many of its items are judged: the listing's end records its
	// unexpected items and then completes it (CompleteListed).
	completeRun = `
		WITH totals AS (
		    SELECT ` + perTerminal(`sum(%s) AS %s`, `, `) + `,
		           sum(provider_calls) AS provider_calls, sum(throttles) AS throttles
		      FROM run_shards WHERE run_id = $1
		    HAVING sum(remaining) = 0
		       AND NOT EXISTS (SELECT FROM run_listings WHERE run_id = $1 AND state = 'listing')),
		done AS (
		    UPDATE runs SET completed_at = coalesce($2, now()),
		                    first_completed_at = coalesce(first_completed_at, $2, now())
		      FROM totals WHERE run_id = $1),
		up AS (
		    INSERT INTO run_completions AS c (run_id, items, ` + perTerminal(`%s`, `, `) + `,
		                                      provider_calls, throttles, completed_at, completed_by)
		    SELECT $1, ` + perTerminal(`%s`, ` + `) + `, ` + perTerminal(`%s`, `, `) + `,
		           provider_calls, throttles, coalesce($2, now()), $3
		      FROM totals
		    ON CONFLICT (run_id) DO UPDATE SET round = c.round + 1
		    RETURNING c.round),
		later AS (
		    INSERT INTO completion_rounds (run_id, account_id, round, items, ` + perTerminal(`%s`, `, `) + `,
		                                   provider_calls, throttles, completed_at, completed_by)
		    SELECT $1, NULL, up.round, ` + perTerminal(`totals.%s`, ` + `) + `, ` + perTerminal(`totals.%s`, `, `) + `,
		           totals.provider_calls, totals.throttles, coalesce($2, now()), $3
		      FROM up, totals
		     WHERE up.round > 1)
		SELECT round FROM up`
)
