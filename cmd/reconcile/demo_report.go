package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/providersim"
)

// demoReport prints the outcome counts against the ground truth, the
// provider's figures and examples, and returns what it found.
func demoReport(ctx context.Context, w io.Writer, pool *pgxpool.Pool, sim *providersim.Server, runID uuid.UUID, c *consume.Consumer,
	day demoDay, mode consume.Mode) (demoResult, error) {
	res := demoResult{ledger: map[ledger.State]int{}, truth: map[ledger.State]int{}}
	items, err := ledger.ItemsOf(ctx, pool, runID)
	if err != nil {
		return res, fmt.Errorf("demo: read outcomes: %w", err)
	}
	for _, it := range items {
		res.items++
		res.ledger[it.State]++
		t := demoTruth(sim, it.TransactionID, day, mode)
		res.truth[t.Outcome]++
		fields := make([]string, len(it.Differences))
		for i, d := range it.Differences {
			fields[i] = d.Field
		}
		slices.Sort(fields)
		want, got := describeOutcome(t.Outcome, t.Fields, t.Reason), describeOutcome(it.State, fields, it.LastReason)
		if got != want {
			res.mismatches = append(res.mismatches, fmt.Sprintf("%q: ledger %s, ground truth %s", it.TransactionID, got, want))
		}
	}
	res.example = exampleRetried(items)

	// Every record the file lacks that the provider lists must be an item.
	listed := 0
	for id := range day.unexpected {
		if sim.Truth(id).Fault != providersim.FaultMissing {
			listed++
		}
	}
	if res.ledger[ledger.Unexpected] != listed {
		res.mismatches = append(res.mismatches, fmt.Sprintf("%d unexpected items recorded, but the provider lists %d records the file lacks",
			res.ledger[ledger.Unexpected], listed))
	}

	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "outcome\tledger\tground truth\t")
	for _, o := range ledger.TerminalStates() {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", o, res.ledger[o], res.truth[o])
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\n", res.items, res.items)
	if err := tw.Flush(); err != nil {
		return res, err
	}
	if len(res.mismatches) == 0 {
		fmt.Fprintf(w, "all %d outcomes match the ground truth\n", res.items)
	} else {
		fmt.Fprintf(w, "%d of %d outcomes DIFFER from the ground truth:\n", len(res.mismatches), res.items)
		for i, m := range res.mismatches {
			if i == 20 {
				fmt.Fprintf(w, "  ... and %d more\n", len(res.mismatches)-i)
				break
			}
			fmt.Fprintln(w, "  "+m)
		}
	}

	st := sim.Stats()
	statuses := make([]int, 0, len(st.ByStatus))
	for s := range st.ByStatus {
		statuses = append(statuses, s)
	}
	slices.Sort(statuses)
	parts := make([]string, len(statuses))
	for i, s := range statuses {
		parts[i] = fmt.Sprintf("%d×%d", st.ByStatus[s], s)
	}
	fmt.Fprintf(w, "\nprovider calls: %d, %.3f per item (%s); %d throttled (429); at most %d calls for one item\n",
		st.Calls, float64(st.Calls)/float64(max(res.items, 1)), strings.Join(parts, ", "), st.Throttled, st.MaxCallsPerKey)
	fmt.Fprintf(w, "provider calls per second by limit phase: %s\n", describePhases(st.Series))
	if c != nil {
		s := c.Snapshot()
		fmt.Fprintf(w, "consumer: %d calls, %d retries scheduled, %d dead-lettered\n", s.Calls, s.Retried, s.DeadLettered)
		if mode == consume.ModeList {
			fmt.Fprintf(w, "list mode: %d list pages, %d items judged from the list, %d looked up by id\n", s.ListCalls, s.FromList, s.Calls)
		}
	}
	if err := printExamples(ctx, w, pool, runID, items); err != nil {
		return res, err
	}
	return res, nil
}

// demoTruth is the correct outcome of id: the simulator's, but for the
// records the file lacks (unexpected), and in list mode for the faults
// only a lookup meets (the list serves those records as they are).
func demoTruth(sim *providersim.Server, id string, day demoDay, mode consume.Mode) providersim.Expected {
	t := sim.Truth(id)
	if day.unexpected[id] {
		return providersim.Expected{Outcome: ledger.Unexpected, Provider: t.Provider}
	}
	if mode == consume.ModeList {
		switch t.Fault {
		case providersim.FaultBadRequest, providersim.FaultBadBody, providersim.FaultTransient:
			return providersim.Expected{Outcome: ledger.Matched, Provider: t.Provider}
		}
	}
	return t
}

// describeOutcome names an outcome for comparison, with the differing
// fields of a mismatch or the reason of a dead letter.
func describeOutcome(s ledger.State, fields []string, reason string) string {
	switch s {
	case ledger.Mismatched:
		return string(s) + "(" + strings.Join(fields, ",") + ")"
	case ledger.DeadLettered:
		return string(s) + "(" + reason + ")"
	}
	return string(s)
}

// printExamples prints a few discrepancies and dead letters of the run, as
// the auditor's views discrepancies and dead_lettered_items show them.
func printExamples(ctx context.Context, w io.Writer, pool *pgxpool.Pool, runID uuid.UUID, items []ledger.Item) error {
	fmt.Fprintln(w, "\nexample discrepancies (view discrepancies):")
	shown := 0
	for _, it := range items {
		if it.State != ledger.Mismatched {
			continue
		}
		for _, d := range it.Differences {
			if shown == 3 {
				break
			}
			fmt.Fprintf(w, "  %-28q %s  %s: expected %s, provider %s\n", it.TransactionID, it.AccountID, d.Field, d.Expected, d.Provider)
			shown++
		}
	}
	dead, err := ledger.DeadLetters(ctx, pool, ledger.DeadLetterFilter{RunID: runID})
	if err != nil {
		return fmt.Errorf("demo: read dead letters: %w", err)
	}
	fmt.Fprintln(w, "example dead letters (view dead_lettered_items):")
	for _, d := range dead[:min(3, len(dead))] {
		fmt.Fprintf(w, "  %-28q %s after %s (last HTTP status %d)\n", d.TransactionID, d.Reason,
			countOf(d.Attempts, "attempt", "attempts"), d.HTTPStatus)
	}
	return nil
}

// exampleRetried returns a transaction of the run that needed a retry and
// then matched (the one with the most attempts, the first by transaction id
// among equals), for the transaction_history example query; else the first
// transaction. Ids with a quote or a backslash are passed over, so the
// printed query can be pasted as it is.
func exampleRetried(items []ledger.Item) string {
	best := -1
	for i, it := range items {
		if it.State != ledger.Matched || it.Attempts <= 1 || strings.ContainsAny(it.TransactionID, `'\`) {
			continue
		}
		if best < 0 || it.Attempts > items[best].Attempts {
			best = i
		}
	}
	switch {
	case best >= 0:
		return items[best].TransactionID
	case len(items) > 0:
		return items[0].TransactionID
	}
	return ""
}

func printQueries(w io.Writer, psql, example string) {
	fmt.Fprintf(w, "\nThe database is still running. Connect with:\n  %s\n\nand try:\n", psql)
	for _, q := range ledger.ExampleQueries(example) {
		fmt.Fprintln(w, "  "+q)
	}
}

// describePhases sums the simulator's per-second series by limit phase:
// calls per second while each limit was in force, up to the second of the
// last transaction's first call. The seconds after it are the retries of the
// last few transactions waiting out their backoff, which no limit governs:
// they are counted apart.
func describePhases(series []providersim.Second) string {
	type phase struct {
		limit   float64
		calls   int64
		seconds int
	}
	busy := len(series) - 1 // a series without first calls: all of it
	for i := len(series) - 1; i >= 0; i-- {
		if series[i].FirstCalls > 0 {
			busy = i
			break
		}
	}
	var phases []phase
	var tailCalls int64
	tailSeconds := 0
	for i, s := range series {
		if s.Limit == 0 {
			continue // before the demo's limit was set
		}
		if i > busy {
			tailCalls += s.Calls
			tailSeconds++
			continue
		}
		if len(phases) == 0 || phases[len(phases)-1].limit != s.Limit {
			phases = append(phases, phase{limit: s.Limit})
		}
		p := &phases[len(phases)-1]
		p.calls += s.Calls
		p.seconds++
	}
	parts := make([]string, len(phases))
	for i, p := range phases {
		parts[i] = fmt.Sprintf("%.0f/s while the limit was %g/s (%ds)", float64(p.calls)/float64(p.seconds), p.limit, p.seconds)
	}
	out := strings.Join(parts, ", ")
	if tailCalls > 0 {
		out += fmt.Sprintf("; then %s in %ds as the last retries waited out their backoff", countOf(int(tailCalls), "call", "calls"), tailSeconds)
	}
	return out
}

func describeSchedule(s providersim.Schedule) string {
	parts := make([]string, len(s))
	for i, st := range s {
		parts[i] = fmt.Sprintf("%g/s", st.Rate)
		if st.At > 0 {
			parts[i] += " after " + st.At.String()
		}
	}
	return strings.Join(parts, ", ")
}

// countOf writes n with the singular or plural noun: "1 attempt", "2 attempts".
func countOf(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
