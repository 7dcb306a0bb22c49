// Package ledger records the durable state of reconciliation runs: item
// state changes with their append-only history, and the completion join.
//
// Every change is a conditional update from the state the caller last saw, so
// a duplicate delivery can never record a second terminal outcome. Callers
// run the functions inside their own transaction, together with the queue
// operation that settles the item's message.
package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// Result reports what a change completed.
type Result struct {
	// AccountCompleted is true when this change ended the account's last
	// open item in the run and its completion record was written.
	AccountCompleted bool
	// RunCompleted is true when this change ended the run's last open item
	// and the run's completion record was written.
	RunCompleted bool
}

// Record applies c inside the caller's transaction: the conditional item
// update, its transition row, and, for a terminal change, the completion
// bookkeeping and, when it closes an account or the run, their completion
// records. It returns ErrConflict, and changes nothing, if the item is not in
// c.From.
func Record(ctx context.Context, tx DB, c Change) (Result, error) {
	if c.From.Terminal() {
		return Result{}, fmt.Errorf("record %s→%s for %s: a terminal item changes only through Requeue", c.From, c.To, c.TransactionID)
	}
	at := nullTime(c.At)
	var prov Provider
	if c.Provider != nil {
		prov = *c.Provider
	}
	var diffs []byte
	if len(c.Differences) > 0 {
		var err error
		if diffs, err = json.Marshal(c.Differences); err != nil {
			return Result{}, fmt.Errorf("encode differences: %w", err)
		}
	}
	var accountID string
	var shard int16
	err := tx.QueryRow(ctx, `
		UPDATE items SET
		    state = $3,
		    attempts = attempts + $4::int,
		    throttles = throttles + $5::int,
		    first_attempt_at = CASE WHEN $4::int > 0 THEN coalesce(first_attempt_at, coalesce($6, now())) ELSE first_attempt_at END,
		    provider_amount_minor = CASE WHEN $7 THEN $8 ELSE provider_amount_minor END,
		    provider_currency = CASE WHEN $7 THEN $9 ELSE provider_currency END,
		    provider_status = CASE WHEN $7 THEN $10 ELSE provider_status END,
		    differences = CASE WHEN $3 = 'mismatched' THEN $11::jsonb ELSE differences END,
		    last_http_status = CASE WHEN $4::int > 0 THEN $12 ELSE last_http_status END,
		    last_reason = $13,
		    updated_at = coalesce($6, now()),
		    terminal_at = CASE WHEN $14 THEN coalesce($6, now()) END
		WHERE run_id = $1 AND transaction_id = $2 AND state = $15
		RETURNING account_id, shard`,
		c.RunID, c.TransactionID, string(c.To), boolInt(c.Called), boolInt(c.Throttled), at,
		c.Provider != nil, prov.AmountMinor, prov.Currency, prov.Status, diffs,
		nullInt(c.HTTPStatus), c.Reason, c.To.Terminal(), string(c.From),
	).Scan(&accountID, &shard)
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{}, ErrConflict
	}
	if err != nil {
		return Result{}, fmt.Errorf("update item %s of run %s: %w", c.TransactionID, c.RunID, err)
	}

	details, err := encodeDetails(c)
	if err != nil {
		return Result{}, err
	}
	b := &pgx.Batch{}
	b.Queue(insertTransition, c.RunID, c.TransactionID, string(c.From), string(c.To), at, c.Attempt,
		nullInt(c.HTTPStatus), c.Reason, nullDuration(c.RetryAfter), details, c.Actor)
	closes := c.To.Terminal()
	if closes {
		b.Queue(`UPDATE account_progress SET remaining = remaining - 1 WHERE run_id = $1 AND account_id = $2 RETURNING remaining`, c.RunID, accountID)
		b.Queue(`UPDATE run_shards SET remaining = remaining - 1 WHERE run_id = $1 AND shard = $2 RETURNING remaining`, c.RunID, shard)
	}
	var accountLeft, shardLeft int
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return Result{}, fmt.Errorf("insert transition of %s in run %s: %w", c.TransactionID, c.RunID, err)
	}
	if closes {
		if err := br.QueryRow().Scan(&accountLeft); err != nil {
			br.Close()
			return Result{}, fmt.Errorf("count down account %s of run %s: %w", accountID, c.RunID, err)
		}
		if err := br.QueryRow().Scan(&shardLeft); err != nil {
			br.Close()
			return Result{}, fmt.Errorf("count down shard %d of run %s: %w", shard, c.RunID, err)
		}
	}
	if err := br.Close(); err != nil {
		return Result{}, fmt.Errorf("record change of %s in run %s: %w", c.TransactionID, c.RunID, err)
	}
	if !closes {
		return Result{}, nil
	}

	var res Result
	if accountLeft == 0 {
		if err := completeAccount(ctx, tx, c.RunID, accountID, at, c.Actor); err != nil {
			return res, err
		}
		res.AccountCompleted = true
	}
	if shardLeft == 0 {
		done, err := completeRunIfDone(ctx, tx, c.RunID, at, c.Actor)
		if err != nil {
			return res, err
		}
		res.RunCompleted = done
	}
	return res, nil
}

const insertTransition = `
	INSERT INTO transitions (run_id, transaction_id, from_state, to_state, at, attempt, http_status, reason, retry_after_ms, details, actor)
	VALUES ($1, $2, $3, $4, coalesce($5, now()), $6, $7, $8, $9, $10, $11)`

// completeAccount writes the account's completion record. The account row
// lock taken by the count-down makes this the only writer for the account.
func completeAccount(ctx context.Context, tx DB, runID uuid.UUID, accountID string, at *time.Time, actor string) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO account_completions AS c (run_id, account_id, items, matched, mismatched, missing, dead_lettered,
		                                      provider_calls, throttles, completed_at, completed_by)
		SELECT $1, $2, count(*),
		       count(*) FILTER (WHERE state = 'matched'),
		       count(*) FILTER (WHERE state = 'mismatched'),
		       count(*) FILTER (WHERE state = 'missing'),
		       count(*) FILTER (WHERE state = 'dead_lettered'),
		       coalesce(sum(attempts), 0), coalesce(sum(throttles), 0), coalesce($3, now()), $4
		  FROM items WHERE run_id = $1 AND account_id = $2
		ON CONFLICT (run_id, account_id) DO UPDATE SET
		       round = c.round + 1, items = excluded.items, matched = excluded.matched,
		       mismatched = excluded.mismatched, missing = excluded.missing,
		       dead_lettered = excluded.dead_lettered, provider_calls = excluded.provider_calls,
		       throttles = excluded.throttles, completed_at = excluded.completed_at,
		       completed_by = excluded.completed_by`,
		runID, accountID, at, actor)
	if err != nil {
		return fmt.Errorf("complete account %s of run %s: %w", accountID, runID, err)
	}
	return nil
}

// completeRunIfDone is called by a transaction that emptied one shard of the
// run. It locks the run row, so only shard-emptying transactions (at most one
// per shard) ever wait on it, and then, in a fresh READ COMMITTED snapshot,
// checks every shard: the last of those transactions to get the lock sees all
// the others committed, and is the one that writes the completion. The lock
// is FOR NO KEY UPDATE, not FOR UPDATE: account completions hold a KEY SHARE
// lock on the run row through their foreign key, and FOR UPDATE would
// deadlock against them.
func completeRunIfDone(ctx context.Context, tx DB, runID uuid.UUID, at *time.Time, actor string) (bool, error) {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE run_id = $1 FOR NO KEY UPDATE`, runID); err != nil {
		return false, fmt.Errorf("lock run %s: %w", runID, err)
	}
	var open int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(sum(remaining), 0) FROM run_shards WHERE run_id = $1`, runID).Scan(&open); err != nil {
		return false, fmt.Errorf("count open items of run %s: %w", runID, err)
	}
	if open > 0 {
		return false, nil
	}
	_, err := tx.Exec(ctx, `
		WITH totals AS (
		    SELECT count(*) AS items,
		           count(*) FILTER (WHERE state = 'matched') AS matched,
		           count(*) FILTER (WHERE state = 'mismatched') AS mismatched,
		           count(*) FILTER (WHERE state = 'missing') AS missing,
		           count(*) FILTER (WHERE state = 'dead_lettered') AS dead_lettered,
		           coalesce(sum(attempts), 0) AS provider_calls,
		           coalesce(sum(throttles), 0) AS throttles
		      FROM items WHERE run_id = $1),
		done AS (UPDATE runs SET completed_at = coalesce($2, now()) WHERE run_id = $1)
		INSERT INTO run_completions AS c (run_id, items, matched, mismatched, missing, dead_lettered,
		                                  provider_calls, throttles, completed_at, completed_by)
		SELECT $1, items, matched, mismatched, missing, dead_lettered, provider_calls, throttles, coalesce($2, now()), $3
		  FROM totals
		ON CONFLICT (run_id) DO UPDATE SET
		       round = c.round + 1, items = excluded.items, matched = excluded.matched,
		       mismatched = excluded.mismatched, missing = excluded.missing,
		       dead_lettered = excluded.dead_lettered, provider_calls = excluded.provider_calls,
		       throttles = excluded.throttles, completed_at = excluded.completed_at,
		       completed_by = excluded.completed_by`,
		runID, at, actor)
	if err != nil {
		return false, fmt.Errorf("complete run %s: %w", runID, err)
	}
	return true, nil
}

// Requeue moves dead-lettered items of a run back to queued (a redrive or a
// `--rerun failed`), records a transition for each and reopens the run's
// completion bookkeeping. Items not dead-lettered are left alone. It returns
// the transaction ids it requeued.
func Requeue(ctx context.Context, tx DB, runID uuid.UUID, transactionIDs []string, reason, actor string, at time.Time) ([]string, error) {
	rows, err := tx.Query(ctx, `
		UPDATE items SET state = 'queued', terminal_at = NULL, first_attempt_at = NULL,
		       last_reason = $3, updated_at = coalesce($4, now())
		 WHERE run_id = $1 AND transaction_id = ANY($2) AND state = 'dead_lettered'
		RETURNING transaction_id, account_id, shard`,
		runID, transactionIDs, reason, nullTime(at))
	if err != nil {
		return nil, fmt.Errorf("requeue items of run %s: %w", runID, err)
	}
	type reopened struct {
		tx, account string
		shard       int16
	}
	var items []reopened
	for rows.Next() {
		var r reopened
		if err := rows.Scan(&r.tx, &r.account, &r.shard); err != nil {
			rows.Close()
			return nil, fmt.Errorf("requeue items of run %s: %w", runID, err)
		}
		items = append(items, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("requeue items of run %s: %w", runID, err)
	}
	if len(items) == 0 {
		return nil, nil
	}
	ids := make([]string, len(items))
	accounts := make([]string, len(items))
	shards := make([]int16, len(items))
	for i, r := range items {
		ids[i], accounts[i], shards[i] = r.tx, r.account, r.shard
	}
	b := &pgx.Batch{}
	for _, id := range ids {
		b.Queue(insertTransition, runID, id, string(DeadLettered), string(Queued), nullTime(at), 0, nil, reason, nil, nil, actor)
	}
	b.Queue(`UPDATE account_progress ap SET remaining = remaining + n
	           FROM (SELECT a, count(*) AS n FROM unnest($2::text[]) a GROUP BY a) r
	          WHERE ap.run_id = $1 AND ap.account_id = r.a`, runID, accounts)
	b.Queue(`UPDATE run_shards rs SET remaining = remaining + n
	           FROM (SELECT s, count(*) AS n FROM unnest($2::smallint[]) s GROUP BY s) r
	          WHERE rs.run_id = $1 AND rs.shard = r.s`, runID, shards)
	b.Queue(`UPDATE runs SET completed_at = NULL WHERE run_id = $1`, runID)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("record requeue of %d items in run %s: %w", len(ids), runID, err)
	}
	return ids, nil
}

func encodeDetails(c Change) ([]byte, error) {
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
	return b, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func nullInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func nullDuration(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	ms := d.Milliseconds()
	return &ms
}

func boolInt(b bool) int {
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
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO account_progress (run_id, account_id, item_count, remaining)
	         SELECT run_id, account_id, count(*), count(*) FROM items WHERE run_id = $1 GROUP BY run_id, account_id`, runID)
	b.Queue(`INSERT INTO run_shards (run_id, shard, remaining)
	         SELECT $1, s, coalesce(c.n, 0)
	           FROM generate_series(0, $2 - 1) s
	           LEFT JOIN (SELECT shard, count(*) AS n FROM items WHERE run_id = $1 GROUP BY shard) c ON c.shard = s`, runID, Shards)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
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
