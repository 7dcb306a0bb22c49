// Package ledger records the durable state of reconciliation runs: item
// state changes with their append-only history, and the completion join.
//
// Every change is a conditional update from the state the caller last saw, so
// a duplicate delivery can never record a second terminal outcome. Callers
// run the functions inside their own transaction, together with the queue
// operation that settles the item's message.
package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// State is an item's state.
type State string

// Item states. Queued and RetryScheduled are open; the rest are terminal.
const (
	Queued         State = "queued"
	RetryScheduled State = "retry_scheduled"
	Matched        State = "matched"
	Mismatched     State = "mismatched"
	Missing        State = "missing"
	DeadLettered   State = "dead_lettered"
)

// Terminal reports whether s is a final outcome.
func (s State) Terminal() bool {
	switch s {
	case Matched, Mismatched, Missing, DeadLettered:
		return true
	}
	return false
}

// ErrConflict is returned when an item is not in the state a change expects:
// another delivery of the same message recorded its outcome first.
var ErrConflict = errors.New("item is no longer in the expected state")

// ErrNotFound is returned when a run or item does not exist.
var ErrNotFound = errors.New("not found")

// DB is what the ledger needs from a connection: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool all satisfy it. Callers pass a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Provider is the provider's view of a transaction.
type Provider struct {
	AmountMinor int64
	Currency    string
	Status      string
}

// Difference is one field whose expected and provider values differ.
type Difference struct {
	Field    string `json:"field"`
	Expected string `json:"expected"`
	Provider string `json:"provider"`
}

// Change is one state change of an item, with the provider call that caused
// it (if any).
type Change struct {
	RunID         uuid.UUID
	TransactionID string
	// From is the state the caller saw; the change applies only if the item
	// is still in it.
	From State
	To   State
	// Called is true when a provider call was made: it counts towards the
	// item's attempts and sets its first-attempt time.
	Called bool
	// Throttled is true when the call was answered 429.
	Throttled bool
	// Attempt is the item's provider attempt number this change belongs to
	// (0 for changes without a call).
	Attempt int
	// HTTPStatus is the provider's status code; 0 for none (network error,
	// operator action).
	HTTPStatus int
	// Reason is a short machine word: matched, http_503, throttled, ...
	Reason string
	// RetryAfter is the delay chosen before the next attempt, for retries.
	RetryAfter time.Duration
	// Details is stored as the transition's JSON details; may be nil.
	Details map[string]any
	// Provider is the provider's record when it answered one.
	Provider *Provider
	// Differences lists the differing fields of a mismatch.
	Differences []Difference
	// Actor names the process or person recording the change.
	Actor string
	// At is when the change happened. Defaults to the database clock.
	At time.Time
}

// Result reports what a batch of changes completed.
type Result struct {
	// AccountsCompleted counts the accounts whose last open item the
	// changes ended; their completion records were written.
	AccountsCompleted int
	// RunsCompleted lists the runs whose last open item the changes ended;
	// their completion records were written.
	RunsCompleted []uuid.UUID
}

// Record applies one change inside the caller's transaction; see
// RecordBatch.
func Record(ctx context.Context, tx DB, c Change) (Result, error) {
	return RecordBatch(ctx, tx, []Change{c})
}

// RecordBatch applies cs inside the caller's transaction in a fixed number
// of round trips, whatever their count: the conditional item updates, their
// transition rows and, for terminal changes, the completion counters and the
// completion records of the accounts and runs they close. It returns
// ErrConflict if an item is not in its change's From state, or appears
// twice; the other changes were applied, so the caller must roll back.
//
// Concurrent batches lock the counter rows they count down in one shared
// order (accounts, then shards, each sorted), so they cannot deadlock on
// them.
func RecordBatch(ctx context.Context, tx DB, cs []Change) (Result, error) {
	if len(cs) == 0 {
		return Result{}, nil
	}
	var a changeArrays
	for _, c := range cs {
		if c.From.Terminal() {
			return Result{}, fmt.Errorf("record %s→%s for %s: a terminal item changes only through Requeue", c.From, c.To, c.TransactionID)
		}
		if err := a.add(c); err != nil {
			return Result{}, err
		}
	}
	closing := len(a.closingRuns) > 0

	b := &pgx.Batch{}
	if closing {
		b.Queue(lockAccounts, a.closingRuns, a.closingIDs)
		b.Queue(lockShards, a.closingRuns, a.closingIDs)
	}
	b.Queue(changeItems, a.runs, a.ids, a.from, a.to, a.called, a.throttled, a.at, a.answered,
		a.provAmount, a.provCurrency, a.provStatus, a.diffs, a.httpStatus, a.reason)
	a.queueTransitions(b)
	var changed []changedRow
	err := func() error {
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if closing {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("lock account counters: %w", err)
			}
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("lock shard counters: %w", err)
			}
		}
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("update %d items: %w", len(cs), err)
		}
		if changed, err = pgx.CollectRows(rows, pgx.RowToStructByPos[changedRow]); err != nil {
			return fmt.Errorf("update %d items: %w", len(cs), err)
		}
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("insert %d transitions: %w", len(cs), err)
		}
		return br.Close()
	}()
	if err != nil {
		return Result{}, err
	}
	var items []changedRow
	var accounts []accountKey
	var runs []uuid.UUID
	for _, r := range changed {
		switch r.Kind {
		case "item":
			items = append(items, r)
		case "account":
			accounts = append(accounts, accountKey{r.RunID, r.AccountID})
		case "run":
			runs = append(runs, r.RunID)
		}
	}
	if len(items) != len(cs) {
		return Result{}, conflict(cs, items)
	}
	if len(accounts) == 0 && len(runs) == 0 {
		return Result{}, nil
	}
	return complete(ctx, tx, cs, items, accounts, runs)
}

// changedRow is a row of changeItems: an item the batch changed, an account
// or a run one of whose counters it emptied.
type changedRow struct {
	Kind          string
	RunID         uuid.UUID
	TransactionID string
	AccountID     string
}

// accountKey names one account of a run.
type accountKey struct {
	RunID     uuid.UUID
	AccountID string
}

// conflict names the first change whose item did not change.
func conflict(cs []Change, changed []changedRow) error {
	done := make(map[Key]bool, len(changed))
	for _, c := range changed {
		done[Key{c.RunID, c.TransactionID}] = true
	}
	for _, c := range cs {
		k := Key{c.RunID, c.TransactionID}
		if !done[k] {
			return fmt.Errorf("record %s→%s for %s in run %s: %w", c.From, c.To, c.TransactionID, c.RunID, ErrConflict)
		}
		delete(done, k) // a second change of the same item conflicts
	}
	return ErrConflict
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
// none open, in one round trip.
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
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if len(accounts) > 0 {
		if _, err := br.Exec(); err != nil {
			return Result{}, fmt.Errorf("complete %d accounts: %w", len(accounts), err)
		}
	}
	for _, run := range runs {
		if _, err := br.Exec(); err != nil {
			return Result{}, fmt.Errorf("lock run %s: %w", run, err)
		}
		tag, err := br.Exec()
		if err != nil {
			return Result{}, fmt.Errorf("complete run %s: %w", run, err)
		}
		if tag.RowsAffected() > 0 {
			res.RunsCompleted = append(res.RunsCompleted, run)
		}
	}
	if err := br.Close(); err != nil {
		return Result{}, fmt.Errorf("complete runs: %w", err)
	}
	return res, nil
}

// changeArrays holds a batch of changes column by column: the array
// parameters of the batch statements.
type changeArrays struct {
	runs         []uuid.UUID
	ids          []string
	from, to     []string
	called       []int32
	throttled    []int32
	at           []*time.Time
	answered     []bool
	provAmount   []int64
	provCurrency []string
	provStatus   []string
	diffs        []*string
	httpStatus   []*int32
	reason       []string
	attempt      []int32
	retryAfter   []*int64
	details      []*string
	actor        []string
	// The terminal changes, whose counters are counted down.
	closingRuns []uuid.UUID
	closingIDs  []string
}

func (a *changeArrays) add(c Change) error {
	var prov Provider
	if c.Provider != nil {
		prov = *c.Provider
	}
	var diffs *string
	if len(c.Differences) > 0 {
		b, err := json.Marshal(c.Differences)
		if err != nil {
			return fmt.Errorf("encode differences of %s: %w", c.TransactionID, err)
		}
		diffs = new(string(b))
	}
	details, err := encodeDetails(c)
	if err != nil {
		return err
	}
	a.runs = append(a.runs, c.RunID)
	a.ids = append(a.ids, c.TransactionID)
	a.from = append(a.from, string(c.From))
	a.to = append(a.to, string(c.To))
	a.called = append(a.called, boolInt(c.Called))
	a.throttled = append(a.throttled, boolInt(c.Throttled))
	a.at = append(a.at, nullTime(c.At))
	a.answered = append(a.answered, c.Provider != nil)
	a.provAmount = append(a.provAmount, prov.AmountMinor)
	a.provCurrency = append(a.provCurrency, prov.Currency)
	a.provStatus = append(a.provStatus, prov.Status)
	a.diffs = append(a.diffs, diffs)
	a.httpStatus = append(a.httpStatus, nullInt(c.HTTPStatus))
	a.reason = append(a.reason, c.Reason)
	a.attempt = append(a.attempt, int32(c.Attempt))
	a.retryAfter = append(a.retryAfter, nullDuration(c.RetryAfter))
	a.details = append(a.details, details)
	a.actor = append(a.actor, c.Actor)
	if c.To.Terminal() {
		a.closingRuns = append(a.closingRuns, c.RunID)
		a.closingIDs = append(a.closingIDs, c.TransactionID)
	}
	return nil
}

// queueTransitions queues the insertion of the changes' transition rows.
func (a *changeArrays) queueTransitions(b *pgx.Batch) {
	b.Queue(insertTransitions, a.runs, a.ids, a.from, a.to, a.at, a.attempt, a.httpStatus, a.reason,
		a.retryAfter, a.details, a.actor)
}

// The statements of a batch; each takes the changes as parallel arrays.
const (
	lockAccounts = `
		SELECT 1 FROM account_progress ap
		  JOIN (SELECT DISTINCT i.run_id, i.account_id
		          FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		          JOIN items i USING (run_id, transaction_id)) k USING (run_id, account_id)
		 ORDER BY ap.run_id, ap.account_id
		   FOR UPDATE OF ap`

	lockShards = `
		SELECT 1 FROM run_shards rs
		  JOIN (SELECT DISTINCT i.run_id, i.shard
		          FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		          JOIN items i USING (run_id, transaction_id)) k USING (run_id, shard)
		 ORDER BY rs.run_id, rs.shard
		   FOR UPDATE OF rs`

	// changeItems updates the items still in their From state and, for
	// those it closed, counts their counter rows down and adds their
	// outcome, calls and throttles. It returns one 'item' row per item
	// changed, one 'account' row per account counter it emptied and one
	// 'run' row per run with a shard counter it emptied.
	changeItems = `
		WITH c AS (
		    SELECT u.run_id, u.transaction_id, u.from_state, u.to_state, u.called, u.throttled,
		           coalesce(u.at, now()) AS at, u.answered, u.amount, u.currency, u.status, u.diffs,
		           u.http_status, u.reason
		      FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[],
		                  $7::timestamptz[], $8::bool[], $9::bigint[], $10::text[], $11::text[], $12::text[],
		                  $13::int[], $14::text[])
		           AS u(run_id, transaction_id, from_state, to_state, called, throttled, at, answered,
		                amount, currency, status, diffs, http_status, reason)),
		changed AS (
		    UPDATE items i SET
		        state = c.to_state,
		        attempts = i.attempts + c.called,
		        throttles = i.throttles + c.throttled,
		        first_attempt_at = CASE WHEN c.called > 0 THEN coalesce(i.first_attempt_at, c.at) ELSE i.first_attempt_at END,
		        provider_amount_minor = CASE WHEN c.answered THEN c.amount ELSE i.provider_amount_minor END,
		        provider_currency = CASE WHEN c.answered THEN c.currency ELSE i.provider_currency END,
		        provider_status = CASE WHEN c.answered THEN c.status ELSE i.provider_status END,
		        differences = CASE WHEN c.to_state = 'mismatched' THEN c.diffs::jsonb ELSE i.differences END,
		        last_http_status = CASE WHEN c.called > 0 THEN c.http_status ELSE i.last_http_status END,
		        last_reason = c.reason,
		        updated_at = c.at,
		        terminal_at = CASE WHEN c.to_state IN ` + terminalStates + ` THEN c.at END
		      FROM c
		     WHERE i.run_id = c.run_id AND i.transaction_id = c.transaction_id AND i.state = c.from_state
		    RETURNING i.run_id, i.transaction_id, i.account_id, i.shard, i.state, i.attempts, i.throttles),
		closed AS (SELECT * FROM changed WHERE state IN ` + terminalStates + `),
		accounts AS (
		    UPDATE account_progress p SET ` + addTotals + `
		      FROM (SELECT run_id, account_id, ` + closedTotals + ` FROM closed GROUP BY run_id, account_id) f
		     WHERE p.run_id = f.run_id AND p.account_id = f.account_id
		    RETURNING p.run_id, p.account_id, p.remaining),
		shards AS (
		    UPDATE run_shards p SET ` + addTotals + `
		      FROM (SELECT run_id, shard, ` + closedTotals + ` FROM closed GROUP BY run_id, shard) f
		     WHERE p.run_id = f.run_id AND p.shard = f.shard
		    RETURNING p.run_id, p.remaining)
		SELECT 'item', run_id, transaction_id, account_id FROM changed
		UNION ALL
		SELECT 'account', run_id, '', account_id FROM accounts WHERE remaining = 0
		UNION ALL
		SELECT DISTINCT 'run', run_id, '', '' FROM shards WHERE remaining = 0`

	// The chain trigger numbers and hashes each row, in the order of the
	// changes.
	insertTransitions = `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, at, attempt, http_status, reason,
		                         retry_after_ms, details, actor)
		SELECT run_id, transaction_id, from_state, to_state, coalesce(at, now()), attempt, http_status, reason,
		       retry_after_ms, details::jsonb, actor
		  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::int[], $7::int[],
		              $8::text[], $9::bigint[], $10::text[], $11::text[]) WITH ORDINALITY
		       AS u(run_id, transaction_id, from_state, to_state, at, attempt, http_status, reason,
		            retry_after_ms, details, actor, ord)
		 ORDER BY ord`

	terminalStates = `('matched', 'mismatched', 'missing', 'dead_lettered')`

	// closedTotals sums closed items per group.
	closedTotals = `count(*) AS n,
		       count(*) FILTER (WHERE state = 'matched') AS matched,
		       count(*) FILTER (WHERE state = 'mismatched') AS mismatched,
		       count(*) FILTER (WHERE state = 'missing') AS missing,
		       count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
		       sum(attempts) AS calls, sum(throttles) AS throttles`

	// addTotals counts a counter row down by its closed items and adds
	// their totals.
	addTotals = `
		    remaining = p.remaining - f.n,
		    matched = p.matched + f.matched,
		    mismatched = p.mismatched + f.mismatched,
		    missing = p.missing + f.missing,
		    dead_lettered = p.dead_lettered + f.dead_lettered,
		    provider_calls = p.provider_calls + f.calls,
		    throttles = p.throttles + f.throttles`

	completeAccounts = `
		INSERT INTO account_completions AS c (run_id, account_id, items, matched, mismatched, missing, dead_lettered,
		                                      provider_calls, throttles, completed_at, completed_by)
		SELECT p.run_id, p.account_id, p.item_count, p.matched, p.mismatched, p.missing, p.dead_lettered,
		       p.provider_calls, p.throttles, coalesce(k.at, now()), k.actor
		  FROM unnest($1::uuid[], $2::text[], $3::timestamptz[], $4::text[]) AS k(run_id, account_id, at, actor)
		  JOIN account_progress p USING (run_id, account_id)
		ON CONFLICT (run_id, account_id) DO UPDATE SET ` + completeAgain

	// lockRun is taken only by transactions that emptied a shard of the
	// run, so at most one per shard ever waits on it. FOR NO KEY UPDATE,
	// not FOR UPDATE: account completions hold a KEY SHARE lock on the run
	// row through their foreign key, and FOR UPDATE would deadlock against
	// them.
	lockRun = `SELECT 1 FROM runs WHERE run_id = $1 FOR NO KEY UPDATE`

	// completeRun runs after lockRun, in a fresh READ COMMITTED snapshot:
	// the last shard-emptying transaction to get the lock sees all the
	// others committed, finds no open item and writes the completion.
	completeRun = `
		WITH totals AS (
		    SELECT sum(matched) AS matched, sum(mismatched) AS mismatched, sum(missing) AS missing,
		           sum(dead_lettered) AS dead_lettered, sum(provider_calls) AS provider_calls,
		           sum(throttles) AS throttles
		      FROM run_shards WHERE run_id = $1
		    HAVING sum(remaining) = 0),
		done AS (UPDATE runs SET completed_at = coalesce($2, now()) FROM totals WHERE run_id = $1)
		INSERT INTO run_completions AS c (run_id, items, matched, mismatched, missing, dead_lettered,
		                                  provider_calls, throttles, completed_at, completed_by)
		SELECT $1, matched + mismatched + missing + dead_lettered, matched, mismatched, missing, dead_lettered,
		       provider_calls, throttles, coalesce($2, now()), $3
		  FROM totals
		ON CONFLICT (run_id) DO UPDATE SET ` + completeAgain

	// completeAgain replaces a completion record when requeued items
	// finished an account or a run a second time.
	completeAgain = `
		       round = c.round + 1, items = excluded.items, matched = excluded.matched,
		       mismatched = excluded.mismatched, missing = excluded.missing,
		       dead_lettered = excluded.dead_lettered, provider_calls = excluded.provider_calls,
		       throttles = excluded.throttles, completed_at = excluded.completed_at,
		       completed_by = excluded.completed_by`
)

// Requeue moves dead-lettered items of a run back to queued (a redrive or a
// `--rerun failed`), records a transition for each and reopens the run's
// completion bookkeeping: the items count as open again, and their outcome,
// calls and throttles leave the counters' totals until they finish anew.
// Items not dead-lettered are left alone. It returns the transaction ids it
// requeued.
func Requeue(ctx context.Context, tx DB, runID uuid.UUID, transactionIDs []string, reason, actor string, at time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `
		UPDATE items SET state = 'queued', terminal_at = NULL, first_attempt_at = NULL,
		       last_reason = $3, updated_at = coalesce($4, now())
		 WHERE run_id = $1 AND transaction_id = ANY($2) AND state = 'dead_lettered'
		RETURNING transaction_id, account_id, shard, attempts, throttles`,
		runID, transactionIDs, reason, nullTime(at))
	if err != nil {
		return nil, fmt.Errorf("requeue items of run %s: %w", runID, err)
	}
	type reopened struct {
		ID        string
		Account   string
		Shard     int16
		Attempts  int32
		Throttles int32
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
	for i, r := range items {
		ids[i], accounts[i], shards[i], attempts[i], throttles[i] = r.ID, r.Account, r.Shard, r.Attempts, r.Throttles
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
	b.Queue(`UPDATE account_progress p SET `+reopen+`
	           FROM (SELECT g, count(*) AS n, sum(calls) AS calls, sum(throttles) AS throttles
	                   FROM unnest($2::text[], $3::int[], $4::int[]) AS u(g, calls, throttles) GROUP BY g) r
	          WHERE p.run_id = $1 AND p.account_id = r.g`, runID, accounts, attempts, throttles)
	b.Queue(`UPDATE run_shards p SET `+reopen+`
	           FROM (SELECT g, count(*) AS n, sum(calls) AS calls, sum(throttles) AS throttles
	                   FROM unnest($2::smallint[], $3::int[], $4::int[]) AS u(g, calls, throttles) GROUP BY g) r
	          WHERE p.run_id = $1 AND p.shard = r.g`, runID, shards, attempts, throttles)
	b.Queue(`UPDATE runs SET completed_at = NULL WHERE run_id = $1`, runID)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("record requeue of %d items in run %s: %w", len(ids), runID, err)
	}
	return ids, nil
}

// reopen takes requeued dead letters out of a counter row's totals.
const reopen = `remaining = p.remaining + r.n, dead_lettered = p.dead_lettered - r.n,
	               provider_calls = p.provider_calls - r.calls, throttles = p.throttles - r.throttles`

func encodeDetails(c Change) (*string, error) {
	d := c.Details
	if len(c.Differences) > 0 {
		if d == nil {
			d = map[string]any{}
		}
		d["differences"] = c.Differences
	}
	if len(d) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode transition details: %w", err)
	}
	return new(string(b)), nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullInt(n int) *int32 {
	if n == 0 {
		return nil
	}
	return new(int32(n))
}

func nullDuration(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

func boolInt(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// Shards is the number of completion counter shards per run. More shards
// mean less waiting between concurrent consumers; the run row is locked at
// most once per shard.
const Shards = 16

// InitCounters creates the completion bookkeeping of a run whose items have
// just been inserted: one row per account and per shard.
func InitCounters(ctx context.Context, tx DB, runID uuid.UUID) error {
	// One scan of the run's items counts both groupings.
	_, err := tx.Exec(ctx, `
		WITH g AS (
		    SELECT account_id, shard, count(*) AS n FROM items WHERE run_id = $1
		     GROUP BY GROUPING SETS ((account_id), (shard))),
		accounts AS (
		    INSERT INTO account_progress (run_id, account_id, item_count, remaining)
		    SELECT $1, account_id, n, n FROM g WHERE account_id IS NOT NULL)
		INSERT INTO run_shards (run_id, shard, remaining)
		SELECT $1, s, coalesce(g.n, 0)
		  FROM generate_series(0, $2 - 1) s
		  LEFT JOIN g ON g.shard = s AND g.account_id IS NULL`, runID, Shards)
	if err != nil {
		return fmt.Errorf("initialise completion counters of run %s: %w", runID, err)
	}
	return nil
}

// ShardOf returns the completion shard of a transaction id (FNV-1a).
func ShardOf(transactionID string) int16 {
	h := uint32(2166136261)
	for i := 0; i < len(transactionID); i++ {
		h ^= uint32(transactionID[i])
		h *= 16777619
	}
	return int16(h % Shards)
}

// Item is an item as the consumer needs it: the expected record and where
// the item stands.
type Item struct {
	RunID          uuid.UUID
	TransactionID  string
	AccountID      string
	AmountMinor    int64
	Currency       string
	Status         string
	State          State
	Attempts       int
	Throttles      int
	FirstAttemptAt time.Time // zero before the first call
}

// Key names one item.
type Key struct {
	RunID         uuid.UUID
	TransactionID string
}

// Items loads the given items in one query. Items that do not exist are
// absent from the result.
func Items(ctx context.Context, db DB, keys []Key) (map[Key]Item, error) {
	runs := make([]uuid.UUID, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		runs[i], ids[i] = k.RunID, k.TransactionID
	}
	rows, err := db.Query(ctx, `
		SELECT i.run_id, i.transaction_id, i.account_id, i.amount_minor, i.currency, i.status, i.state,
		       i.attempts, i.throttles, i.first_attempt_at
		  FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		  JOIN items i USING (run_id, transaction_id)`, runs, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d items: %w", len(keys), err)
	}
	defer rows.Close()
	out := make(map[Key]Item, len(keys))
	for rows.Next() {
		var it Item
		var state string
		var first *time.Time
		if err := rows.Scan(&it.RunID, &it.TransactionID, &it.AccountID, &it.AmountMinor, &it.Currency, &it.Status,
			&state, &it.Attempts, &it.Throttles, &first); err != nil {
			return nil, fmt.Errorf("load items: %w", err)
		}
		it.State = State(state)
		if first != nil {
			it.FirstAttemptAt = *first
		}
		out[Key{it.RunID, it.TransactionID}] = it
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load items: %w", err)
	}
	return out, nil
}
