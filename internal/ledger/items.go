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

// RunMessagesQuery selects the queue messages of a run's items for
// queue.PublishNewQuery, in the columns it wants (run_id, reconciliation_id,
// transaction_id, idempotency_key, attempt, provider), for the run $1 named
// $2: an enqueuer that has just inserted a run's items publishes their
// messages without sending them again. It reads the run's range of the
// primary key (run_id, transaction_id), in no particular order: sorting a
// large run costs more than the publish saves.
const RunMessagesQuery = `SELECT run_id, $2::text, transaction_id, idempotency_key, 0, provider FROM items WHERE run_id = $1`

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
// just been inserted: one row per account, per shard and provider
// (run_shards; a shard without items gets one row of the default provider),
// and per shard, provider and currency (run_breakdown).
func InitCounters(ctx context.Context, tx DB, runID uuid.UUID) error {
	// One scan of the run's items counts the three groupings; g.set tells
	// them apart (GROUPING's bit is 1 for a column left out: account_id 8,
	// shard 4, provider 2, currency 1).
	_, err := tx.Exec(ctx, `
		WITH g AS (
		    SELECT GROUPING(account_id, shard, provider, currency) AS set, account_id, shard, provider, currency,
		           count(*) AS n
		      FROM items WHERE run_id = $1
		     GROUP BY GROUPING SETS ((account_id), (shard, provider), (shard, provider, currency))),
		accounts AS (
		    INSERT INTO account_progress (run_id, account_id, item_count, remaining)
		    SELECT $1, account_id, n, n FROM g WHERE set = 7),
		breakdown AS (
		    INSERT INTO run_breakdown (run_id, shard, provider, currency, item_count)
		    SELECT $1, shard, provider, currency, n FROM g WHERE set = 8)
		INSERT INTO run_shards (run_id, shard, provider, remaining)
		SELECT $1, s, coalesce(g.provider, ''), coalesce(g.n, 0)
		  FROM generate_series(0, $2 - 1) s
		  LEFT JOIN g ON g.shard = s AND g.set = 9`, runID, Shards)
	if err != nil {
		return fmt.Errorf("initialise completion counters of run %s: %w", runID, err)
	}
	return nil
}
