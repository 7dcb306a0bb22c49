package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

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
// Concurrent batches lock the counter rows they change in one shared order
// (accounts, then shards, each sorted), so they cannot deadlock on them. An
// account's row changes when one of its items closes; a shard's also when
// one of its items is called, throttled, or enters or leaves
// retry_scheduled (see counts).
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
	closing, counted := len(a.closingRuns) > 0, len(a.countedRuns) > 0

	b := &pgx.Batch{}
	if closing {
		b.Queue(lockAccounts, a.closingRuns, a.closingIDs)
	}
	if counted {
		b.Queue(lockShards, a.countedRuns, a.countedIDs)
	}
	if a.unmatched {
		b.Queue(changeItemsUnmatched, a.changeArgs())
	} else {
		b.Queue(changeItems, a.changeArgs())
	}
	a.queueTransitions(b)
	var changed []changedRow
	err := func() error {
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		if closing {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("lock account counters: %w", err)
			}
		}
		if counted {
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
	// The terminal changes, whose account counters are counted down.
	closingRuns []uuid.UUID
	closingIDs  []string
	// The changes that change their shard counter (see counts).
	countedRuns []uuid.UUID
	countedIDs  []string
	// unmatched is true when a change closes an item otherwise than
	// matched: the batch updates run_breakdown too.
	unmatched bool
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
		a.unmatched = a.unmatched || c.To != Matched
		a.closingRuns = append(a.closingRuns, c.RunID)
		a.closingIDs = append(a.closingIDs, c.TransactionID)
	}
	if counts(c) {
		a.countedRuns = append(a.countedRuns, c.RunID)
		a.countedIDs = append(a.countedIDs, c.TransactionID)
	}
	return nil
}

// counts reports whether c changes its shard's counter row: it closes the
// item, records a call or a throttle, or moves the item into or out of
// retry_scheduled. changeItemsSQL updates the rows of exactly these
// changes, whose rows RecordBatch locks first.
func counts(c Change) bool {
	return c.To.Terminal() || c.Called || c.Throttled || (c.From == RetryScheduled) != (c.To == RetryScheduled)
}

// changeArgs returns the parameters of changeItems.
func (a *changeArrays) changeArgs() pgx.StrictNamedArgs {
	return pgx.StrictNamedArgs{
		"run_ids":         a.runs,
		"transaction_ids": a.ids,
		"from_states":     a.from,
		"to_states":       a.to,
		"called":          a.called,
		"throttled":       a.throttled,
		"at":              a.at,
		"answered":        a.answered,
		"amounts_minor":   a.provAmount,
		"currencies":      a.provCurrency,
		"statuses":        a.provStatus,
		"differences":     a.diffs,
		"http_statuses":   a.httpStatus,
		"reasons":         a.reason,
	}
}

// queueTransitions queues the insertion of the changes' transition rows.
func (a *changeArrays) queueTransitions(b *pgx.Batch) {
	b.Queue(insertTransitions, pgx.StrictNamedArgs{
		"run_ids":         a.runs,
		"transaction_ids": a.ids,
		"from_states":     a.from,
		"to_states":       a.to,
		"at":              a.at,
		"attempts":        a.attempt,
		"http_statuses":   a.httpStatus,
		"reasons":         a.reason,
		"retry_after_ms":  a.retryAfter,
		"details":         a.details,
		"actors":          a.actor,
	})
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
		  JOIN (SELECT DISTINCT i.run_id, i.shard, i.provider
		          FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		          JOIN items i USING (run_id, transaction_id)) k USING (run_id, shard, provider)
		 ORDER BY rs.run_id, rs.shard, rs.provider
		   FOR UPDATE OF rs`

	// insertTransitions inserts one transition row per change. The chain
	// trigger numbers and hashes each row, in the order of the changes.
	insertTransitions = `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, at, attempt, http_status, reason,
		                         retry_after_ms, details, actor)
		SELECT run_id, transaction_id, from_state, to_state, coalesce(at, now()), attempt, http_status, reason,
		       retry_after_ms, details::jsonb, actor
		  FROM unnest(@run_ids::uuid[], @transaction_ids::text[], @from_states::text[], @to_states::text[],
		              @at::timestamptz[], @attempts::int[], @http_statuses::int[], @reasons::text[],
		              @retry_after_ms::bigint[], @details::text[], @actors::text[]) WITH ORDINALITY
		       AS u(run_id, transaction_id, from_state, to_state, at, attempt, http_status, reason,
		            retry_after_ms, details, actor, ord)
		 ORDER BY ord`
)

// changeItems updates the items still in their From state. For those it
// closed it counts their account rows down and adds their outcome, calls and
// throttles; on their shard rows it counts the closed ones down with their
// outcome, adds every change's call and throttle, open or closing, and
// keeps the count of items in retry_scheduled, so that an open run's
// figures are read from its counters as a complete run's are. It returns one 'item' row per item changed, one 'account' row
// per account counter it emptied and one 'run' row per run with a shard
// counter it emptied. Its state lists are built from [TerminalStates] once.
// changeItemsUnmatched does the same and also adds the items that did not
// match, with their amounts, to the row of their shard, provider and
// currency in run_breakdown; a batch uses it only when one of its changes
// closes an item otherwise than matched, so that a batch of matches (most
// of them) pays nothing for the breakdown.
var (
	changeItems          = changeItemsSQL(false)
	changeItemsUnmatched = changeItemsSQL(true)
)

func changeItemsSQL(unmatchedRows bool) string {
	breakdown, returning := "", ""
	if unmatchedRows {
		returning = ", i.currency, i.amount_minor"
		breakdown = `,
		breakdown AS (
		    UPDATE run_breakdown p SET
		        ` + perState(unmatched(), `%s = p.%s + f.%s`, `, `) + `,
		        ` + perState(atStake(), `%s_minor = p.%s_minor + f.%s_minor`, `,
		        `) + `
		      FROM (SELECT run_id, shard, provider, currency,
		                   ` + perState(unmatched(), `count(*) FILTER (WHERE state = '%s') AS %s`, `, `) + `,
		                   ` + perState(atStake(), `coalesce(sum(amount_minor) FILTER (WHERE state = '%s'), 0) AS %s_minor`, `,
		                   `) + `
		              FROM closed WHERE state <> ` + Matched.literal() + `
		             GROUP BY run_id, shard, provider, currency) f
		     WHERE p.run_id = f.run_id AND p.shard = f.shard AND p.provider = f.provider AND p.currency = f.currency)`
	}
	return `
		WITH c AS (
		    SELECT u.run_id, u.transaction_id, u.from_state, u.to_state, u.called, u.throttled,
		           coalesce(u.at, now()) AS at, u.answered, u.amount, u.currency, u.status, u.diffs,
		           u.http_status, u.reason
		      FROM unnest(@run_ids::uuid[], @transaction_ids::text[], @from_states::text[], @to_states::text[],
		                  @called::int[], @throttled::int[], @at::timestamptz[], @answered::bool[],
		                  @amounts_minor::bigint[], @currencies::text[], @statuses::text[], @differences::text[],
		                  @http_statuses::int[], @reasons::text[])
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
		        differences = CASE WHEN c.to_state = ` + Mismatched.literal() + ` THEN c.diffs::jsonb ELSE i.differences END,
		        last_http_status = CASE WHEN c.called > 0 THEN c.http_status ELSE i.last_http_status END,
		        last_reason = c.reason,
		        updated_at = c.at,
		        terminal_at = CASE WHEN c.to_state IN ` + sqlList(TerminalStates()) + ` THEN c.at END
		      FROM c
		     WHERE i.run_id = c.run_id AND i.transaction_id = c.transaction_id AND i.state = c.from_state
		    RETURNING i.run_id, i.transaction_id, i.account_id, i.shard, i.provider, i.state, i.attempts, i.throttles,
		              c.from_state, c.called, c.throttled` + returning + `),
		closed AS (SELECT * FROM changed WHERE state IN ` + sqlList(TerminalStates()) + `),
		accounts AS (
		    UPDATE account_progress p SET ` + addTotals() + `
		      FROM (SELECT run_id, account_id, ` + closedTotals() + ` FROM closed GROUP BY run_id, account_id) f
		     WHERE p.run_id = f.run_id AND p.account_id = f.account_id
		    RETURNING p.run_id, p.account_id, p.remaining),
		shards AS (
		    UPDATE run_shards p SET ` + addTotals() + `,
		        retry_scheduled = p.retry_scheduled + f.retries
		      FROM (SELECT run_id, shard, provider,
		                   count(*) FILTER (WHERE state IN ` + sqlList(TerminalStates()) + `) AS n,
		                   ` + perTerminal(`count(*) FILTER (WHERE state = '%s') AS %s`, `,
		                   `) + `,
		                   sum(called) AS calls, sum(throttled) AS throttles,
		                   count(*) FILTER (WHERE state = ` + RetryScheduled.literal() + `)
		                   - count(*) FILTER (WHERE from_state = ` + RetryScheduled.literal() + `) AS retries
		              FROM changed
		             GROUP BY run_id, shard, provider
		            HAVING bool_or(state IN ` + sqlList(TerminalStates()) + ` OR called > 0 OR throttled > 0
		                           OR (state = ` + RetryScheduled.literal() + `) <> (from_state = ` + RetryScheduled.literal() + `))) f
		     WHERE p.run_id = f.run_id AND p.shard = f.shard AND p.provider = f.provider
		    RETURNING p.run_id, p.remaining)` + breakdown + `
		SELECT 'item', run_id, transaction_id, account_id FROM changed
		UNION ALL
		SELECT 'account', run_id, '', account_id FROM accounts WHERE remaining = 0
		UNION ALL
		SELECT DISTINCT 'run', run_id, '', '' FROM shards WHERE remaining = 0`
}

// closedTotals sums closed items per group: n, one count per terminal
// state, calls and throttles.
func closedTotals() string {
	return `count(*) AS n,
		       ` + perTerminal(`count(*) FILTER (WHERE state = '%s') AS %s`, `,
		       `) + `,
		       sum(attempts) AS calls, sum(throttles) AS throttles`
}

// addTotals counts a counter row down by its closed items and adds their
// totals.
func addTotals() string {
	return `
		    remaining = p.remaining - f.n,
		    ` + perTerminal(`%s = p.%s + f.%s`, `,
		    `) + `,
		    provider_calls = p.provider_calls + f.calls,
		    throttles = p.throttles + f.throttles`
}

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
