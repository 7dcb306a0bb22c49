package ledger_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestStatesPartitionIntoOpenAndTerminal(t *testing.T) {
	t.Parallel()
	all := ledger.States()
	if want := append(ledger.OpenStates(), ledger.TerminalStates()...); !slices.Equal(all, want) {
		t.Errorf("States() = %v, want the open states then the terminal ones: %v", all, want)
	}
	seen := map[ledger.State]bool{}
	for _, s := range all {
		if seen[s] {
			t.Errorf("state %s listed twice", s)
		}
		seen[s] = true
		if s.Terminal() != slices.Contains(ledger.TerminalStates(), s) {
			t.Errorf("%s.Terminal() = %v, disagrees with TerminalStates()", s, s.Terminal())
		}
	}
	if ledger.State("unknown").Terminal() {
		t.Error("an unknown state is terminal")
	}
}

// TestStatesMatchTheSchema compares the exported states with the CHECK
// constraint on items.state, and the terminal states with the per-outcome
// columns of the completion counters and records, so that a state added in
// one place but not the other fails here.
func TestStatesMatchTheSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)

	var defs []string
	rows, err := pool.Query(ctx, `
		SELECT pg_get_constraintdef(c.oid)
		  FROM pg_constraint c
		  JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
		 WHERE c.conrelid = 'items'::regclass AND c.contype = 'c' AND a.attname = 'state'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var def string
		if err := rows.Scan(&def); err != nil {
			t.Fatal(err)
		}
		defs = append(defs, def)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 {
		t.Fatalf("CHECK constraints on items.state: %q, want one", defs)
	}
	var inSchema []ledger.State
	for _, m := range regexp.MustCompile(`'([^']*)'::text`).FindAllStringSubmatch(defs[0], -1) {
		inSchema = append(inSchema, ledger.State(m[1]))
	}
	want := ledger.States()
	slices.Sort(inSchema)
	slices.Sort(want)
	if !slices.Equal(inSchema, want) {
		t.Errorf("items.state CHECK allows %v (%s); ledger.States() = %v", inSchema, defs[0], want)
	}

	// Each counter and completion table has one column per terminal state,
	// and the run summary one per state.
	tables := map[string][]ledger.State{
		"account_progress": ledger.TerminalStates(), "run_shards": ledger.TerminalStates(),
		"account_completions": ledger.TerminalStates(), "run_completions": ledger.TerminalStates(),
		"completion_rounds": ledger.TerminalStates(),
		"run_summary":       ledger.States(),
	}
	for table, states := range tables {
		for _, s := range states {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns
				WHERE table_schema = current_schema() AND table_name = $1 AND column_name = $2`, table, string(s)).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("%s has no column %s", table, s)
			}
		}
	}
}
