package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The ledger as verification reads it. These are the package's only reads
// of the ledger's tables, and they read the rows themselves (runs, items,
// transitions), not the ledger package's summaries or views: a check must
// not trust the code it checks. Each names the index it reads through.

// Querier runs queries: a pgx.Tx, *pgx.Conn or *pgxpool.Pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// storedRun is a run as verification reads it: its row, and the number of
// items it really has.
type storedRun struct {
	Run
	// storedItems is runs.item_count.
	storedItems int64
}

// filterArgs returns f's parameters: the date and the run, NULL when
// unset.
func filterArgs(f Filter) (date, run any) {
	if f.BusinessDate != nil {
		date = f.BusinessDate.Format(time.DateOnly)
	}
	if f.RunID != nil {
		run = *f.RunID
	}
	return date, run
}

// readRuns returns the runs f selects, in run id order, each with
// runs.item_count and the count of its items (the range of items' primary
// key (run_id, transaction_id)). The runs come by the (business_date,
// generation) key or the primary key, or whole (a row a day).
func readRuns(ctx context.Context, db Querier, f Filter) ([]storedRun, error) {
	date, run := filterArgs(f)
	rows, err := db.Query(ctx, `
		SELECT r.run_id, r.reconciliation_id, r.business_date::text, r.generation, r.item_count,
		       (SELECT count(*) FROM items i WHERE i.run_id = r.run_id)
		  FROM runs r
		 WHERE ($1::date IS NULL OR r.business_date = $1::date)
		   AND ($2::uuid IS NULL OR r.run_id = $2::uuid)
		 ORDER BY r.run_id`, date, run)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (storedRun, error) {
		var r storedRun
		err := row.Scan(&r.RunID, &r.ReconciliationID, &r.BusinessDate, &r.Generation, &r.storedItems, &r.Items)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	return out, nil
}

// itemRow is an item's columns that its chain is checked against.
type itemRow struct {
	runID         uuid.UUID
	transactionID string
	state         string
	historyLen    int
	historyHead   []byte
}

// transitionRow holds one transitions row in the text forms the canonical
// encoding uses. Pointers are NULL-able columns (all NULL for an item without
// transitions).
type transitionRow struct {
	seq          *int
	fromState    *string
	toState      *string
	atMicros     *int64
	attempt      *int
	httpStatus   *int
	reason       *string
	retryAfterMS *int64
	details      *string
	actor        *string
	prevHash     []byte
	hash         []byte
}

// transitionColumns are the columns of transitions t a transitionRow holds.
const transitionColumns = `t.seq, t.from_state, t.to_state, (extract(epoch FROM t.at) * 1000000)::bigint,
	t.attempt, t.http_status, t.reason, t.retry_after_ms, t.details::text, t.actor, t.prev_hash, t.hash`

func (t *transitionRow) dest() []any {
	return []any{&t.seq, &t.fromState, &t.toState, &t.atMicros, &t.attempt, &t.httpStatus, &t.reason,
		&t.retryAfterMS, &t.details, &t.actor, &t.prevHash, &t.hash}
}

// readChains calls fn with every item of the runs f selects and each of its
// transitions, in run id, transaction id (byte order) and seq order; an
// item without transitions comes once, with NULL transition columns. It
// streams the rows, so memory does not grow with the runs: for each run the
// range of items' primary key (run_id, transaction_id), and for each item
// its range of transitions_item (transaction_id, run_id, seq). fn's error
// stops the walk and is returned.
func readChains(ctx context.Context, db Querier, f Filter, fn func(itemRow, *transitionRow) error) error {
	date, run := filterArgs(f)
	rows, err := db.Query(ctx, `
		SELECT i.run_id, i.transaction_id, i.state, i.history_len, i.history_head, `+transitionColumns+`
		  FROM items i
		  JOIN runs r ON r.run_id = i.run_id
		  LEFT JOIN transitions t ON t.run_id = i.run_id AND t.transaction_id = i.transaction_id
		 WHERE ($1::date IS NULL OR r.business_date = $1::date)
		   AND ($2::uuid IS NULL OR r.run_id = $2::uuid)
		 ORDER BY i.run_id, i.transaction_id COLLATE "C", t.seq`, date, run)
	if err != nil {
		return fmt.Errorf("read transitions: %w", err)
	}
	var item itemRow
	var t transitionRow
	dest := append([]any{&item.runID, &item.transactionID, &item.state, &item.historyLen, &item.historyHead}, t.dest()...)
	if _, err := pgx.ForEachRow(rows, dest, func() error { return fn(item, &t) }); err != nil {
		return fmt.Errorf("read transitions: %w", err)
	}
	return nil
}

// readItem returns one item's row (items' primary key), or ErrNoItem.
func readItem(ctx context.Context, db Querier, runID uuid.UUID, transactionID string) (itemRow, error) {
	var item itemRow
	err := db.QueryRow(ctx, `SELECT run_id, transaction_id, state, history_len, history_head
		  FROM items WHERE run_id = $1 AND transaction_id = $2`, runID, transactionID).
		Scan(&item.runID, &item.transactionID, &item.state, &item.historyLen, &item.historyHead)
	if errors.Is(err, pgx.ErrNoRows) {
		return item, fmt.Errorf("verify item %s of run %s: %w", transactionID, runID, ErrNoItem)
	}
	if err != nil {
		return item, fmt.Errorf("verify item %s of run %s: %w", transactionID, runID, err)
	}
	return item, nil
}

// readTransitions calls fn with each transition of one item in seq order,
// along transitions_item (transaction_id, run_id, seq). fn's error stops the
// walk and is returned.
func readTransitions(ctx context.Context, db Querier, runID uuid.UUID, transactionID string, fn func(*transitionRow) error) error {
	rows, err := db.Query(ctx, `SELECT `+transitionColumns+` FROM transitions t
		 WHERE t.run_id = $1 AND t.transaction_id = $2 ORDER BY t.seq`, runID, transactionID)
	if err != nil {
		return fmt.Errorf("read transitions of %s: %w", transactionID, err)
	}
	var t transitionRow
	if _, err := pgx.ForEachRow(rows, t.dest(), func() error { return fn(&t) }); err != nil {
		return fmt.Errorf("read transitions of %s: %w", transactionID, err)
	}
	return nil
}
