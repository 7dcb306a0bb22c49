package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/providersim"
)

// expectFunc gives the correct final outcome of a transaction.
type expectFunc func(transactionID string) providersim.Expected

// figures are what a scenario reports.
type figures struct {
	Items        int
	Calls        int // provider calls seen by the key check
	Attempts     int // provider calls recorded in the ledger
	Throttles    int
	DeadLettered int
}

func (f figures) String() string {
	return fmt.Sprintf("%d items, %d provider calls (%.3f per item; %d recorded in the ledger), %d throttled, %d dead-lettered",
		f.Items, f.Calls, float64(f.Calls)/float64(max(f.Items, 1)), f.Attempts, f.Throttles, f.DeadLettered)
}

// problems collects invariant violations, a few examples per kind.
type problems struct {
	t     testing.TB
	count map[string]int
}

func (p *problems) add(kind, format string, args ...any) {
	p.count[kind]++
	if p.count[kind] <= 5 {
		p.t.Errorf("%s: "+format, append([]any{kind}, args...)...)
	}
}

func (p *problems) report() {
	kinds := make([]string, 0, len(p.count))
	for k := range p.count {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		if p.count[k] > 5 {
			p.t.Errorf("%s: %d violations in all", k, p.count[k])
		}
	}
}

// itemRow is an item as the invariants read it.
type itemRow struct {
	runID       uuid.UUID
	id          string
	account     string
	key         string
	state       ledger.State
	attempts    int
	throttles   int
	lastReason  *string
	provAmount  *int64
	provCurr    *string
	provStatus  *string
	differences []byte
}

// checkInvariants checks, from the database, every promise of the ledger for
// the runs of dy's date: one item per payment with the correct terminal
// outcome, valid transition histories, exact completion records, every call
// under the item's idempotency key, a queue empty but for the dead letters,
// and `reconcile audit verify`.
func checkInvariants(t testing.TB, w *world, dy *day, expect expectFunc) figures {
	t.Helper()
	ctx := context.Background()
	p := &problems{t: t, count: map[string]int{}}
	defer p.report()
	var fig figures

	// One generation-1 run of the date, complete.
	var runs []uuid.UUID
	rows, err := w.pool.Query(ctx, `SELECT run_id FROM runs WHERE business_date = $1 ORDER BY generation`, dy.date)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 {
		t.Fatalf("want exactly one run of %s, have %d", dy.date, len(runs))
	}
	run := runs[0]

	// Every payment has exactly one item (the primary key makes "at most
	// one"), and every item is a payment.
	items := map[string]*itemRow{}
	rows, err = w.pool.Query(ctx, `
		SELECT run_id, transaction_id, account_id, idempotency_key, state, attempts, throttles, last_reason,
		       provider_amount_minor, provider_currency, provider_status, differences
		  FROM items WHERE run_id = $1`, run)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var it itemRow
		if err := rows.Scan(&it.runID, &it.id, &it.account, &it.key, &it.state, &it.attempts, &it.throttles, &it.lastReason,
			&it.provAmount, &it.provCurr, &it.provStatus, &it.differences); err != nil {
			t.Fatal(err)
		}
		items[it.id] = &it
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	fig.Items = len(items)
	for _, pay := range dy.payments {
		if _, ok := items[pay.TransactionID]; !ok {
			p.add("lost payment", "%q has no item", pay.TransactionID)
		}
	}
	for id, it := range items {
		pay, ok := dy.ids[id]
		if !ok {
			p.add("stray item", "%q is not a payment of the day", id)
			continue
		}
		if it.account != pay.AccountID {
			p.add("wrong account", "%q: item account %q, payment %q", id, it.account, pay.AccountID)
		}
		fig.Attempts += it.attempts
		fig.Throttles += it.throttles
		if it.state == "dead_lettered" {
			fig.DeadLettered++
		}

		// Exactly one terminal outcome, the correct one.
		want := expect(id)
		if it.state != want.Outcome {
			p.add("wrong outcome", "%q (fault %s): state %s, want %s (last reason %s)", id, want.Fault, it.state, want.Outcome, deref(it.lastReason))
			continue
		}
		switch want.Outcome {
		case ledger.DeadLettered:
			if want.Reason != "" && deref(it.lastReason) != want.Reason {
				p.add("wrong dead-letter reason", "%q: %s, want %s", id, deref(it.lastReason), want.Reason)
			}
		case ledger.Matched, ledger.Mismatched:
			if it.provAmount == nil || *it.provAmount != want.Provider.AmountMinor || deref(it.provCurr) != want.Provider.Currency ||
				deref(it.provStatus) != want.Provider.Status {
				p.add("wrong provider values", "%q: %v %s %s, want %+v", id, it.provAmount, deref(it.provCurr), deref(it.provStatus), want.Provider)
			}
			if want.Outcome == ledger.Mismatched {
				var diffs []struct {
					Field string `json:"field"`
				}
				_ = json.Unmarshal(it.differences, &diffs)
				var fields []string
				for _, d := range diffs {
					fields = append(fields, d.Field)
				}
				if !slices.Equal(fields, want.Fields) {
					p.add("wrong differences", "%q: fields %v, want %v", id, fields, want.Fields)
				}
			}
		}
	}

	checkHistories(t, w, run, items, p)
	checkCompletions(t, w, run, p)
	fig.Calls = checkCalls(w, items, p)
	checkQueue(t, w, run, items, p)

	res := w.run(t, nil, "audit", "verify", "--date", dy.date)
	if res.code != 0 {
		p.add("audit verify", "failed:\n%s", res)
	}
	return fig
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// checkHistories checks that every item's transitions are a path of the
// state machine: queued → retry_scheduled* → terminal, then only
// dead_lettered → queued by a redrive or re-run, and that the path ends in
// the item's state.
func checkHistories(t testing.TB, w *world, run uuid.UUID, items map[string]*itemRow, p *problems) {
	t.Helper()
	rows, err := w.pool.Query(context.Background(), `
		SELECT transaction_id, seq, from_state, to_state, reason
		  FROM transitions WHERE run_id = $1 ORDER BY transaction_id, seq`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type pos struct {
		state ledger.State
		seq   int
	}
	at := map[string]*pos{}
	for rows.Next() {
		var id, reason string
		var from, to ledger.State
		var seq int
		if err := rows.Scan(&id, &seq, &from, &to, &reason); err != nil {
			t.Fatal(err)
		}
		cur := at[id]
		if cur == nil {
			cur = &pos{state: "queued"}
			at[id] = cur
		}
		if seq != cur.seq+1 {
			p.add("history gap", "%q: seq %d after %d", id, seq, cur.seq)
		}
		cur.seq = seq
		if from != cur.state {
			p.add("history break", "%q seq %d: from %s, but the item was %s", id, seq, from, cur.state)
		}
		switch {
		case from == "queued" || from == "retry_scheduled":
			if to != ledger.RetryScheduled && !to.Terminal() {
				p.add("invalid transition", "%q seq %d: %s → %s", id, seq, from, to)
			}
		case from == "dead_lettered" && to == "queued":
			if reason != "redrive" && reason != "rerun_failed" {
				p.add("invalid requeue", "%q seq %d: dead_lettered → queued with reason %s", id, seq, reason)
			}
		default:
			// A terminal state left other than by a requeue: a second
			// terminal outcome.
			p.add("second terminal transition", "%q seq %d: %s → %s (%s)", id, seq, from, to, reason)
		}
		cur.state = to
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, it := range items {
		cur := at[id]
		switch {
		case cur == nil:
			p.add("no history", "%q in state %s has no transition", id, it.state)
		case cur.state != it.state:
			p.add("history disagrees", "%q: history ends in %s, item is %s", id, cur.state, it.state)
		}
	}
}

// checkCompletions checks that the run and each of its accounts have
// exactly one completion record and that the latest completion (that
// record, or its latest later round in completion_rounds after a redrive)
// has totals equal to a direct count.
func checkCompletions(t testing.TB, w *world, run uuid.UUID, p *problems) {
	t.Helper()
	ctx := context.Background()
	const counts = `count(*), count(*) FILTER (WHERE state = 'matched'), count(*) FILTER (WHERE state = 'mismatched'),
		count(*) FILTER (WHERE state = 'missing'), count(*) FILTER (WHERE state = 'dead_lettered'),
		count(*) FILTER (WHERE state = 'cancelled'), coalesce(sum(attempts), 0), coalesce(sum(throttles), 0)`
	const totals = `row(items, matched, mismatched, missing, dead_lettered, cancelled, provider_calls, throttles)::text`
	var completed bool
	if err := w.pool.QueryRow(ctx, `SELECT completed_at IS NOT NULL FROM runs WHERE run_id = $1`, run).Scan(&completed); err != nil {
		t.Fatal(err)
	}
	if !completed {
		p.add("run not complete", "run %s has no completed_at", run)
	}
	var n int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM run_completions WHERE run_id = $1`, run).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		p.add("run completion", "run %s has %d completion records", run, n)
	}
	var direct, recorded string
	err := w.pool.QueryRow(ctx, `
		SELECT (SELECT row(`+counts+`)::text FROM items WHERE run_id = $1),
		       coalesce((SELECT `+totals+` FROM completion_rounds WHERE run_id = $1 AND account_id IS NULL
		                  ORDER BY round DESC LIMIT 1),
		                (SELECT `+totals+` FROM run_completions WHERE run_id = $1))`, run).Scan(&direct, &recorded)
	if err != nil && n == 1 {
		t.Fatal(err)
	}
	if n == 1 && direct != recorded {
		p.add("run totals", "run %s: completion %s, direct count %s (items, matched, mismatched, missing, dead, cancelled, calls, throttles)", run, recorded, direct)
	}

	rows, err := w.pool.Query(ctx, `
		WITH direct AS (SELECT account_id, row(`+counts+`)::text AS totals FROM items WHERE run_id = $1 GROUP BY account_id),
		     recorded AS (SELECT a.account_id, count(*) OVER (PARTITION BY a.account_id) AS n,
		                         coalesce((SELECT `+totals+` FROM completion_rounds c
		                                    WHERE c.run_id = a.run_id AND c.account_id = a.account_id
		                                    ORDER BY round DESC LIMIT 1), `+totals+`) AS totals
		                    FROM account_completions a WHERE a.run_id = $1)
		SELECT coalesce(d.account_id, r.account_id), coalesce(r.n, 0), d.totals, r.totals
		  FROM direct d FULL JOIN recorded r USING (account_id)
		 WHERE d.totals IS DISTINCT FROM r.totals OR r.n IS DISTINCT FROM 1`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var account string
		var n int
		var d, r *string
		if err := rows.Scan(&account, &n, &d, &r); err != nil {
			t.Fatal(err)
		}
		p.add("account completion", "account %q: %d record(s), recorded %s, direct %s", account, n, deref(r), deref(d))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// checkCalls checks that every provider call carried the idempotency key of
// an item of the run, matching the transaction id in its path, and that
// every item was called under its key at least as often as the ledger
// recorded. It returns the number of calls.
func checkCalls(w *world, items map[string]*itemRow, p *problems) int {
	calls, bad := w.prov.keyCalls()
	for _, b := range bad {
		p.add("call with a foreign key", "%s", b)
	}
	keys := make(map[string]*itemRow, len(items))
	for _, it := range items {
		keys[it.key] = it
	}
	total := 0
	for k, n := range calls {
		total += n
		if _, ok := keys[k]; !ok {
			p.add("call outside the run", "%d call(s) with key %q, which is no item's", n, k)
		}
	}
	for k, it := range keys {
		if calls[k] == 0 {
			p.add("item never called", "%q (key %q) in state %s", it.id, k, it.state)
		} else if calls[k] < it.attempts {
			p.add("more attempts than calls", "%q: %d recorded, %d made", it.id, it.attempts, calls[k])
		}
	}
	return total
}

// checkQueue checks that the run has one message per item, none left ready,
// and that the dead letters are exactly the dead-lettered items.
func checkQueue(t testing.TB, w *world, run uuid.UUID, items map[string]*itemRow, p *problems) {
	t.Helper()
	rows, err := w.pool.Query(context.Background(), `
		SELECT transaction_id, idempotency_key, state, count(*) OVER (PARTITION BY transaction_id)
		  FROM queue_messages WHERE run_id = $1`, run)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var id, key, state string
		var n int
		if err := rows.Scan(&id, &key, &state, &n); err != nil {
			t.Fatal(err)
		}
		seen[id] = true
		it, ok := items[id]
		switch {
		case !ok:
			p.add("stray message", "message for %q, which has no item", id)
			continue
		case n != 1:
			p.add("duplicate messages", "%q has %d messages", id, n)
		case key != it.key:
			p.add("message key", "%q: message key %q, item key %q", id, key, it.key)
		}
		switch state {
		case "ready":
			p.add("queue not empty", "%q still ready (item %s)", id, it.state)
		case "dead":
			if it.state != "dead_lettered" {
				p.add("dead letter without a dead item", "%q is dead-lettered in the queue, %s in the ledger", id, it.state)
			}
		case "acked":
			if it.state == "dead_lettered" {
				p.add("dead item without a dead letter", "%q is dead_lettered in the ledger, acked in the queue", id)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id := range items {
		if !seen[id] {
			p.add("item without message", "%q", id)
		}
	}
}

// truth is the simulator's own answer key.
func truth(sim *providersim.Server) expectFunc { return sim.Truth }
