package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Item is one payment of a run as the ledger holds it: the expected record
// from the source, where the item stands and what the provider answered. It
// is the one item type of the project: the consumer decides on it, reports
// and the console show it.
type Item struct {
	RunID          uuid.UUID
	TransactionID  string
	AccountID      string
	IdempotencyKey string
	// Provider names the provider that answers for the item; empty: the
	// default provider.
	Provider string
	// AmountMinor, Currency, Status and OccurredAt are the expected record.
	AmountMinor int64
	Currency    string
	Status      string
	OccurredAt  time.Time
	// Kind is what the row is as its source states it (payment, refund,
	// dispute); empty: not stated.
	Kind  string
	State State
	// Attempts counts the provider calls made, Throttles those answered
	// 429.
	Attempts  int
	Throttles int
	// Reported is the provider's record; nil until it answered one.
	Reported *Provider
	// Differences lists the differing fields of a mismatch; nil otherwise.
	Differences []Difference
	// LastHTTPStatus is the status of the latest call; 0 for none or a
	// network error.
	LastHTTPStatus int
	// LastReason is the reason of the latest transition; empty before one.
	LastReason string
	// FirstAttemptAt is when the first call was made; zero before it.
	FirstAttemptAt time.Time
	// UpdatedAt is when the item last changed.
	UpdatedAt time.Time
	// TerminalAt is when the item reached its terminal state; zero while
	// open.
	TerminalAt time.Time
	// RunItems is the number of items of the item's run that its provider
	// answers for (run_breakdown; the run's item count for a run without
	// one). Only Items reads it; zero elsewhere.
	RunItems int
}

// Key names one item.
type Key struct {
	RunID         uuid.UUID
	TransactionID string
}

// itemColumns are the columns of items i that scanItem reads.
const itemColumns = `i.run_id, i.transaction_id, i.account_id, i.idempotency_key, i.provider, i.amount_minor, i.currency,
	i.status, i.occurred_at, i.kind, i.state, i.attempts, i.throttles, i.provider_amount_minor, i.provider_currency,
	i.provider_status, i.differences::text, i.last_http_status, i.last_reason, i.first_attempt_at, i.updated_at,
	i.terminal_at`

// itemScan scans itemColumns, followed by extra columns: the NOT NULL ones
// straight into an Item, the others into pointers that item applies.
type itemScan struct {
	it                                      Item
	state                                   string
	provAmount                              *int64
	provCurrency, provStatus, diffs, reason *string
	httpStatus                              *int
	first, terminal                         *time.Time
	extra                                   []any
}

func (s *itemScan) dest() []any {
	it := &s.it
	return append([]any{&it.RunID, &it.TransactionID, &it.AccountID, &it.IdempotencyKey, &it.Provider,
		&it.AmountMinor, &it.Currency, &it.Status, &it.OccurredAt, &it.Kind, &s.state, &it.Attempts, &it.Throttles,
		&s.provAmount, &s.provCurrency, &s.provStatus, &s.diffs, &s.httpStatus, &s.reason, &s.first,
		&it.UpdatedAt, &s.terminal}, s.extra...)
}

// item returns the scanned item.
func (s *itemScan) item() Item {
	it := s.it
	it.State = State(s.state)
	it.Reported, it.Differences, it.LastHTTPStatus, it.LastReason = nil, nil, 0, ""
	it.FirstAttemptAt, it.TerminalAt = time.Time{}, time.Time{}
	if s.provAmount != nil && s.provCurrency != nil && s.provStatus != nil {
		it.Reported = &Provider{AmountMinor: *s.provAmount, Currency: *s.provCurrency, Status: *s.provStatus}
	}
	if s.diffs != nil {
		// Anything but an array of differences is ignored, as the
		// discrepancies view ignores it.
		if err := json.Unmarshal([]byte(*s.diffs), &it.Differences); err != nil {
			it.Differences = nil
		}
	}
	if s.httpStatus != nil {
		it.LastHTTPStatus = *s.httpStatus
	}
	if s.reason != nil {
		it.LastReason = *s.reason
	}
	if s.first != nil {
		it.FirstAttemptAt = *s.first
	}
	if s.terminal != nil {
		it.TerminalAt = *s.terminal
	}
	return it
}

// collectItems reads rows of itemColumns into items.
func collectItems(rows pgx.Rows) ([]Item, error) {
	var s itemScan
	var out []Item
	_, err := pgx.ForEachRow(rows, s.dest(), func() error {
		out = append(out, s.item())
		return nil
	})
	return out, err
}

// Items loads the given items in one query (the primary key, once per
// key), with RunItems: the run_breakdown rows of each (run, provider) they
// belong to (its primary key's run prefix), summed once per pair. Items that
// do not exist are absent from the result.
func Items(ctx context.Context, db Querier, keys []Key) (map[Key]Item, error) {
	runs := make([]uuid.UUID, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		runs[i], ids[i] = k.RunID, k.TransactionID
	}
	var runItems int
	s := itemScan{extra: []any{&runItems}}
	rows, err := db.Query(ctx, `
		WITH i AS (
		    SELECT i.* FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		      JOIN items i USING (run_id, transaction_id)),
		n AS (
		    SELECT b.run_id, b.provider, sum(b.item_count)::integer AS n
		      FROM run_breakdown b
		     WHERE (b.run_id, b.provider) IN (SELECT DISTINCT run_id, provider FROM i)
		     GROUP BY b.run_id, b.provider)
		SELECT `+itemColumns+`, coalesce(n.n, r.item_count)
		  FROM i JOIN runs r USING (run_id)
		  LEFT JOIN n USING (run_id, provider)`, runs, ids)
	if err != nil {
		return nil, fmt.Errorf("load %d items: %w", len(keys), err)
	}
	out := make(map[Key]Item, len(keys))
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		it := s.item()
		it.RunItems = runItems
		out[Key{it.RunID, it.TransactionID}] = it
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load %d items: %w", len(keys), err)
	}
	return out, nil
}

// FindItem returns one item of a run (the primary key), or ErrNotFound.
func FindItem(ctx context.Context, db Querier, runID uuid.UUID, transactionID string) (Item, error) {
	rows, err := db.Query(ctx, `SELECT `+itemColumns+` FROM items i WHERE i.run_id = $1 AND i.transaction_id = $2`,
		runID, transactionID)
	if err != nil {
		return Item{}, fmt.Errorf("read item %q of run %s: %w", transactionID, runID, err)
	}
	items, err := collectItems(rows)
	if err != nil {
		return Item{}, fmt.Errorf("read item %q of run %s: %w", transactionID, runID, err)
	}
	if len(items) == 0 {
		return Item{}, fmt.Errorf("read item %q of run %s: %w", transactionID, runID, ErrNotFound)
	}
	return items[0], nil
}

// ItemsOf returns the items of a run in the given states (every item when
// none is given), in transaction id order, as EachItemOf reads them: a
// read of the whole run, for reports, not for pages.
func ItemsOf(ctx context.Context, db Querier, runID uuid.UUID, states ...State) ([]Item, error) {
	var out []Item
	err := EachItemOf(ctx, db, runID, func(it Item) error {
		out = append(out, it)
		return nil
	}, states...)
	return out, err
}

// EachItemOf calls fn with each item of a run in the given states (every
// item when none is given), in transaction id order, one at a time, so a
// run of any size is read in bounded memory; an error from fn stops the
// read and is returned. It reads the run's range of the primary key
// (run_id, transaction_id), filtering on the state, so it costs a read of
// the whole run.
func EachItemOf(ctx context.Context, db Querier, runID uuid.UUID, fn func(Item) error, states ...State) error {
	rows, err := db.Query(ctx, `
		SELECT `+itemColumns+` FROM items i
		 WHERE i.run_id = $1 AND (cardinality($2::text[]) = 0 OR i.state = ANY ($2))
		 ORDER BY i.transaction_id`, runID, stateNames(states))
	if err != nil {
		return fmt.Errorf("read items of run %s: %w", runID, err)
	}
	var s itemScan
	if _, err := pgx.ForEachRow(rows, s.dest(), func() error { return fn(s.item()) }); err != nil {
		return fmt.Errorf("read items of run %s: %w", runID, err)
	}
	return nil
}

func stateNames(states []State) []string {
	out := make([]string, len(states))
	for i, s := range states {
		out[i] = string(s)
	}
	return out
}

// ItemWindow selects items of one run for a page that reads a bounded
// number of them: of the Window items after After, in transaction id order,
// those that match every filter, at most Limit. A filter left at its zero
// value matches every item.
type ItemWindow struct {
	RunID uuid.UUID
	// After is the transaction id the window starts after; empty: the
	// run's first item.
	After string
	// Window is how many items are read at most. Defaults to 0: every item
	// after After.
	Window int
	// Limit caps the items returned. Defaults to 0: every match.
	Limit int
	// States are the states an item may be in; empty: any.
	States []State
	// Account is the account an item must belong to.
	Account string
	// MinAmount and MaxAmount bound the expected amount, minor units.
	MinAmount, MaxAmount *int64
	// Field is a field a mismatched item must differ on: amount_minor,
	// currency or status.
	Field string
	// Provider is the provider an item must belong to ("" for the default
	// provider); nil: any.
	Provider *string
}

// WindowPage is what Window found.
type WindowPage struct {
	// Items are the matches, in transaction id order.
	Items []Item
	// Scanned is how many items the window read, and Last the transaction
	// id of the last of them: the next page starts after it. A window that
	// read Window items may have more after Last.
	Scanned int64
	Last    string
}

// Window reads a window of a run's items and returns those that match w's
// filters. The window is one range of the primary key (run_id,
// transaction_id) of at most w.Window rows, whatever the filters, so a page
// costs the same on a run of millions; it holds only the columns the
// filters test, and the matches and the window's last item are then read
// whole by key.
func Window(ctx context.Context, db Querier, w ItemWindow) (WindowPage, error) {
	// Only the filters w sets are written, and the sizes as literals, so
	// that the statement is planned for what it selects.
	args := pgx.StrictNamedArgs{"run_id": w.RunID, "after": w.After}
	var filters []string
	filter := func(cond, name string, v any) {
		filters = append(filters, cond)
		args[name] = v
	}
	if len(w.States) > 0 {
		filter(`state = ANY (@states)`, "states", stateNames(w.States))
	}
	if w.Account != "" {
		filter(`account_id = @account`, "account", w.Account)
	}
	if w.MinAmount != nil {
		filter(`amount_minor >= @min`, "min", *w.MinAmount)
	}
	if w.MaxAmount != nil {
		filter(`amount_minor <= @max`, "max", *w.MaxAmount)
	}
	if w.Field != "" {
		filter(`differences @> jsonb_build_array(jsonb_build_object('field', @field::text))`, "field", w.Field)
	}
	if w.Provider != nil {
		filter(`provider = @provider`, "provider", *w.Provider)
	}
	where := ""
	if len(filters) > 0 {
		where = "WHERE " + strings.Join(filters, " AND ")
	}
	window, limit := "", ""
	if w.Window > 0 {
		window = "LIMIT " + strconv.Itoa(w.Window)
	}
	if w.Limit > 0 {
		limit = "LIMIT " + strconv.Itoa(w.Limit)
	}
	var edge bool
	var n int64
	s := itemScan{extra: []any{&edge, &n}}
	// The matches in order (the last column their place), then one row
	// more (edge) with the window's last item and its size; none for an
	// empty window.
	rows, err := db.Query(ctx, `
		WITH w AS MATERIALIZED (
		    SELECT transaction_id, account_id, provider, amount_minor, state, differences FROM items
		     WHERE run_id = @run_id AND transaction_id > @after
		     ORDER BY transaction_id `+window+`),
		edge AS (SELECT max(transaction_id) AS last, count(*) AS n FROM w),
		hits AS (
		    SELECT transaction_id, row_number() OVER (ORDER BY transaction_id) AS ord FROM w
		     `+where+`
		     ORDER BY transaction_id `+limit+`)
		SELECT `+itemColumns+`, false, hits.ord
		  FROM hits JOIN items i ON i.run_id = @run_id AND i.transaction_id = hits.transaction_id
		UNION ALL
		SELECT `+itemColumns+`, true, edge.n
		  FROM edge JOIN items i ON i.run_id = @run_id AND i.transaction_id = edge.last
		 ORDER BY 23, 24`, args)
	if err != nil {
		return WindowPage{}, fmt.Errorf("read a window of run %s: %w", w.RunID, err)
	}
	var page WindowPage
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		if edge {
			page.Scanned, page.Last = n, s.it.TransactionID
			return nil
		}
		page.Items = append(page.Items, s.item())
		return nil
	})
	if err != nil {
		return WindowPage{}, fmt.Errorf("read a window of run %s: %w", w.RunID, err)
	}
	return page, nil
}

// DeadLetter is an item with the transition that ended it: for a
// dead-lettered item, the dead-lettering one.
type DeadLetter struct {
	Item
	// Reason, HTTPStatus and At are the ending transition's (HTTPStatus 0
	// for none); Detail is its recorded error text or body excerpt, empty
	// when it has none.
	Reason     string
	HTTPStatus int
	Detail     string
	At         time.Time
}

// DeadLetterFilter selects the items DeadLetters reads.
type DeadLetterFilter struct {
	// RunID is the run. Required.
	RunID uuid.UUID
	// TransactionIDs, when set, are the items to read, whatever their state
	// (the queue's dead letters of a cancelled run are cancelled items), in
	// this order; nil reads every dead-lettered item of the run, in
	// transaction id order.
	TransactionIDs []string
	// Account, MinAmount and MaxAmount filter as in ItemWindow.
	Account              string
	MinAmount, MaxAmount *int64
}

// DeadLetters reads items with their last transition, as EachDeadLetter
// does; with f.TransactionIDs, in their order.
func DeadLetters(ctx context.Context, db Querier, f DeadLetterFilter) ([]DeadLetter, error) {
	var out []DeadLetter
	err := EachDeadLetter(ctx, db, f, func(dl DeadLetter) error {
		out = append(out, dl)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if f.TransactionIDs != nil {
		place := make(map[string]int, len(f.TransactionIDs))
		for i, id := range f.TransactionIDs {
			place[id] = i
		}
		slices.SortFunc(out, func(a, b DeadLetter) int { return cmp.Compare(place[a.TransactionID], place[b.TransactionID]) })
	}
	return out, nil
}

// EachDeadLetter calls fn with each item f selects and its last transition
// (the one at seq = history_len, looked up by transitions_item
// (transaction_id, run_id, seq)), in transaction id order, one at a time;
// an error from fn stops the read and is returned. Without f.TransactionIDs
// it reads the run's range of the primary key (run_id, transaction_id),
// filtered on the state; with them, one key each (= ANY of the primary
// key).
func EachDeadLetter(ctx context.Context, db Querier, f DeadLetterFilter, fn func(DeadLetter) error) error {
	var reason, detail *string
	var status *int
	var at *time.Time
	s := itemScan{extra: []any{&reason, &status, &detail, &at}}
	// Only the conditions f sets are written, so that the statement is
	// planned for what it selects.
	where := []string{`i.run_id = @run_id`, `i.state = ` + DeadLettered.literal()}
	args := pgx.StrictNamedArgs{"run_id": f.RunID}
	if f.TransactionIDs != nil {
		where[1] = `i.transaction_id = ANY (@ids)`
		args["ids"] = f.TransactionIDs
	}
	if f.Account != "" {
		where = append(where, `i.account_id = @account`)
		args["account"] = f.Account
	}
	if f.MinAmount != nil {
		where = append(where, `i.amount_minor >= @min`)
		args["min"] = *f.MinAmount
	}
	if f.MaxAmount != nil {
		where = append(where, `i.amount_minor <= @max`)
		args["max"] = *f.MaxAmount
	}
	rows, err := db.Query(ctx, `
		SELECT `+itemColumns+`, t.reason, t.http_status, coalesce(t.details ->> 'detail', t.details ->> 'error'), t.at
		  FROM items i
		  LEFT JOIN transitions t ON t.run_id = i.run_id AND t.transaction_id = i.transaction_id AND t.seq = i.history_len
		 WHERE `+strings.Join(where, " AND ")+`
		 ORDER BY i.transaction_id`, args)
	if err != nil {
		return fmt.Errorf("read dead letters of run %s: %w", f.RunID, err)
	}
	_, err = pgx.ForEachRow(rows, s.dest(), func() error {
		dl := DeadLetter{Item: s.item()}
		if reason != nil {
			dl.Reason = *reason
		}
		if status != nil {
			dl.HTTPStatus = *status
		}
		if detail != nil {
			dl.Detail = *detail
		}
		if at != nil {
			dl.At = *at
		}
		return fn(dl)
	})
	if err != nil {
		return fmt.Errorf("read dead letters of run %s: %w", f.RunID, err)
	}
	return nil
}

// TransactionRun is a run that holds a transaction id, with the state of
// its item.
type TransactionRun struct {
	RunID            uuid.UUID
	ReconciliationID string
	State            State
}

// RunsOfTransaction returns the runs holding transactionID but except,
// newest business date and generation first, at most limit. It walks
// items_transaction (transaction_id) and each run's primary key.
func RunsOfTransaction(ctx context.Context, db Querier, transactionID string, except uuid.UUID, limit int) ([]TransactionRun, error) {
	rows, err := db.Query(ctx, `
		SELECT r.run_id, r.reconciliation_id, i.state FROM items i JOIN runs r USING (run_id)
		 WHERE i.transaction_id = $1 AND i.run_id <> $2
		 ORDER BY r.business_date DESC, r.generation DESC LIMIT $3`, transactionID, except, limit)
	if err != nil {
		return nil, fmt.Errorf("find the runs of transaction %q: %w", transactionID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TransactionRun])
	if err != nil {
		return nil, fmt.Errorf("find the runs of transaction %q: %w", transactionID, err)
	}
	return out, nil
}
