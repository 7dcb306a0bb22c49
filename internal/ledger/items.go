package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Shards is the number of completion counter shards per run. More shards
// mean less waiting between concurrent consumers; the run row is locked at
// most once per shard.
const Shards = 16

// ShardOf returns the completion shard of a transaction id (FNV-1a).
func ShardOf(transactionID string) int16 {
	h := uint32(2166136261)
	for i := 0; i < len(transactionID); i++ {
		h ^= uint32(transactionID[i])
		h *= 16777619
	}
	return int16(h % Shards)
}

// NewItem is an item of a run being created: the payment as the source
// recorded it. It starts queued.
type NewItem struct {
	TransactionID  string
	AccountID      string
	IdempotencyKey string
	AmountMinor    int64
	Currency       string
	Status         string
	OccurredAt     time.Time
	// Provider names the provider that answers for the item; empty: the
	// default provider.
	Provider string
	// Kind is what the row is (payment, refund, dispute) as the source
	// states it; empty: not stated.
	Kind string
}

// InsertItems streams the items of a new run into the ledger with COPY,
// inside the caller's transaction, so memory does not grow with their
// count. next returns the next item, io.EOF after the last one, or another
// error, which aborts the copy and is returned as it is. It returns the
// number of items written, or ErrDuplicateItem (with the duplicate key) when
// a transaction id occurs twice. Call InitCounters and FinishRun after it.
func InsertItems(ctx context.Context, tx DB, runID uuid.UUID, next func() (NewItem, error)) (int, error) {
	src := &itemSource{run: runID, next: next}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"items"},
		[]string{"run_id", "transaction_id", "account_id", "idempotency_key", "amount_minor", "currency",
			"status", "occurred_at", "shard", "provider", "kind"}, src)
	if src.err != nil {
		return 0, src.err
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return 0, fmt.Errorf("%w (%s)", ErrDuplicateItem, pgErr.Detail)
		}
		return 0, fmt.Errorf("copy items of run %s: %w", runID, err)
	}
	return int(n), nil
}

// itemSource adapts next to pgx.CopyFromSource, one row at a time.
type itemSource struct {
	run  uuid.UUID
	next func() (NewItem, error)
	cur  NewItem
	row  [11]any
	err  error
}

func (s *itemSource) Next() bool {
	it, err := s.next()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.err = err
		}
		return false
	}
	s.cur = it
	return true
}

func (s *itemSource) Values() ([]any, error) {
	it := s.cur
	s.row = [11]any{s.run, it.TransactionID, it.AccountID, it.IdempotencyKey,
		it.AmountMinor, it.Currency, it.Status, it.OccurredAt, ShardOf(it.TransactionID), it.Provider, it.Kind}
	return s.row[:], nil
}

func (s *itemSource) Err() error { return s.err }

// InitCounters creates the completion bookkeeping of a run whose items have
// just been inserted: one row per account, per shard, and per shard,
// provider and currency (run_breakdown).
func InitCounters(ctx context.Context, tx DB, runID uuid.UUID) error {
	// One scan of the run's items counts the three groupings; g.set tells
	// them apart (GROUPING's bit is 1 for a column left out).
	_, err := tx.Exec(ctx, `
		WITH g AS (
		    SELECT GROUPING(account_id, shard, provider, currency) AS set, account_id, shard, provider, currency,
		           count(*) AS n
		      FROM items WHERE run_id = $1
		     GROUP BY GROUPING SETS ((account_id), (shard), (shard, provider, currency))),
		accounts AS (
		    INSERT INTO account_progress (run_id, account_id, item_count, remaining)
		    SELECT $1, account_id, n, n FROM g WHERE set = 7),
		breakdown AS (
		    INSERT INTO run_breakdown (run_id, shard, provider, currency, item_count)
		    SELECT $1, shard, provider, currency, n FROM g WHERE set = 8)
		INSERT INTO run_shards (run_id, shard, remaining)
		SELECT $1, s, coalesce(g.n, 0)
		  FROM generate_series(0, $2 - 1) s
		  LEFT JOIN g ON g.shard = s AND g.set = 11`, runID, Shards)
	if err != nil {
		return fmt.Errorf("initialise completion counters of run %s: %w", runID, err)
	}
	return nil
}

// Item is an item as the consumer needs it: the expected record and where
// the item stands.
type Item struct {
	RunID         uuid.UUID
	TransactionID string
	AccountID     string
	AmountMinor   int64
	Currency      string
	Status        string
	// Kind is what the row is as its source states it (payment, refund,
	// dispute); empty: not stated.
	Kind           string
	State          State
	Attempts       int
	Throttles      int
	FirstAttemptAt time.Time // zero before the first call
	// RunItems is the number of items of the item's run that its
	// provider answers for (run_breakdown; the run's item count for a run
	// without one).
	RunItems int
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
		WITH i AS (
		    SELECT i.run_id, i.transaction_id, i.account_id, i.amount_minor, i.currency, i.status, i.kind, i.state,
		           i.attempts, i.throttles, i.first_attempt_at, i.provider
		      FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		      JOIN items i USING (run_id, transaction_id)),
		n AS (
		    SELECT b.run_id, b.provider, sum(b.item_count)::integer AS n
		      FROM run_breakdown b
		     WHERE (b.run_id, b.provider) IN (SELECT DISTINCT run_id, provider FROM i)
		     GROUP BY b.run_id, b.provider)
		SELECT i.run_id, i.transaction_id, i.account_id, i.amount_minor, i.currency, i.status, i.kind, i.state,
		       i.attempts, i.throttles, i.first_attempt_at, coalesce(n.n, r.item_count)
		  FROM i
		  JOIN runs r USING (run_id)
		  LEFT JOIN n USING (run_id, provider)`, runs, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d items: %w", len(keys), err)
	}
	defer rows.Close()
	out := make(map[Key]Item, len(keys))
	for rows.Next() {
		var it Item
		var state string
		var first *time.Time
		if err := rows.Scan(&it.RunID, &it.TransactionID, &it.AccountID, &it.AmountMinor, &it.Currency, &it.Status, &it.Kind,
			&state, &it.Attempts, &it.Throttles, &first, &it.RunItems); err != nil {
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
