package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/providersim"
)

// groundTruth tallies the simulator's correct outcomes for the demo day of
// date, n and seed, independently of the demo's own comparison.
func groundTruth(t *testing.T, date string, n int, seed uint64) map[ledger.State]int {
	t.Helper()
	d, err := payments.ParseDate(date)
	if err != nil {
		t.Fatal(err)
	}
	day, err := generateDemoDay(d, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	sim, err := demoSim(day, seed, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	truth := map[ledger.State]int{}
	for _, r := range day.records {
		truth[sim.Truth(r.ID).Outcome]++
	}
	return truth
}

var outcomeRow = regexp.MustCompile(`(?m)^\s*(matched|mismatched|missing|dead_lettered|unexpected)\s+(\d+)\s+(\d+)\s*$`)

// printedCounts parses the outcome table of the demo's report: outcome →
// the ledger's count.
func printedCounts(t *testing.T, out string) map[ledger.State]int {
	t.Helper()
	got := map[ledger.State]int{}
	for _, m := range outcomeRow.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		got[ledger.State(m[1])] = n
	}
	if len(got) != 5 {
		t.Fatalf("outcome table not found in the report:\n%s", out)
	}
	return got
}

func runDemoCommand(t *testing.T, getenv func(string) string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := &env{getenv: getenv, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	err := cmdDemo(ctx, e, append([]string{"--log-format", "json", "--progress", "log"}, args...))
	return stdout.String(), stderr.String(), err
}

// TestDemoListMode runs the demo in list mode: the provider lists the day
// with 1% of records the file lacks, and the demo's report, checked against
// the ground truth by the demo itself, shows both directions of the join.
func TestDemoListMode(t *testing.T) {
	t.Parallel()
	// Each provider's API lists in its own shape (the simulator's), read by
	// the built-in profile of the same name.
	for _, prof := range []string{"reconcile", "stripe", "paypal", "square"} {
		t.Run(prof, func(t *testing.T) {
			t.Parallel()
			const items = 800
			out, stderr, err := runDemoCommand(t, func(string) string { return "" }, "--items", strconv.Itoa(items), "--mode", "list",
				"--profile", prof, "--database-url", pgtest.ConnString(t))
			if err != nil {
				t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
			}
			got := printedCounts(t, out)
			if got[ledger.Unexpected] == 0 || got[ledger.Missing] == 0 || got[ledger.Mismatched] == 0 {
				t.Errorf("list mode demo printed %v: want unexpected, missing and mismatched items", got)
			}
			if !strings.Contains(out, fmt.Sprintf("all %d outcomes match the ground truth", items+got[ledger.Unexpected])) {
				t.Errorf("no match line in:\n%s", out)
			}
			if !strings.Contains(out, "list mode: ") || !strings.Contains(out, "unexpected;") {
				t.Errorf("no list mode figures in:\n%s", out)
			}
		})
	}
}

func TestDemoCountsEqualTheGroundTruth(t *testing.T) {
	t.Parallel()
	const items, seed, date = 800, 7, "0001-01-01"
	url := pgtest.ConnString(t)
	noEnv := func(string) string { return "" }
	out, stderr, err := runDemoCommand(t, noEnv, "--items", strconv.Itoa(items), "--seed", strconv.Itoa(seed), "--database-url", url)
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	want := groundTruth(t, date, items, seed)
	got := printedCounts(t, out)
	for _, o := range ledger.TerminalStates() {
		if got[o] != want[o] {
			t.Errorf("%s: printed %d, ground truth %d", o, got[o], want[o])
		}
	}
	// The day has every kind of outcome, so the comparison means something.
	for _, o := range ledger.TerminalStates() {
		// Only an operator cancels; only list mode finds unexpected records.
		if want[o] == 0 && o != ledger.Cancelled && o != ledger.Unexpected {
			t.Errorf("the demo day has no %s item", o)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("all %d outcomes match the ground truth", items)) {
		t.Errorf("no match line in:\n%s", out)
	}
	for _, s := range []string{"provider calls:", "throttled (429)", "example discrepancies", "example dead letters", "demo-0001-01-01 complete",
		"the demo's runs are named demo-0001-01-01…"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	if !strings.Contains(stderr, `"msg":"progress final"`) {
		t.Errorf("no final progress line on stderr:\n%s", stderr)
	}

	// A second demo on the same database checks the date again as a new
	// generation.
	out, stderr, err = runDemoCommand(t, noEnv, "--items", "50", "--seed", "3", "--database-url", url)
	if err != nil {
		t.Fatalf("second demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	if !strings.Contains(out, "demo-0001-01-01-g2") || !strings.Contains(out, "all 50 outcomes match the ground truth") {
		t.Errorf("second demo:\n%s", out)
	}
}

func TestDemoFinishesOnAThrowawayDatabaseAndKeepsIt(t *testing.T) {
	t.Parallel()
	// DATABASE_URL names a database (perhaps production's): the demo must
	// not write there.
	other := pgtest.New(t)
	url := other.Config().ConnString()
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}
	out, stderr, err := runDemoCommand(t, getenv, "--items", "300", "--date", "2026-10-24", "--keep")
	m := regexp.MustCompile(`psql -h (\S+) -U postgres reconcile`).FindStringSubmatch(out)
	if m != nil {
		dir := m[1]
		t.Cleanup(func() {
			if out, err := exec.Command("sh", "-c", stopCommand(dir)).CombinedOutput(); err != nil {
				t.Errorf("stop kept server: %v: %s", err, out)
			}
			if err := os.RemoveAll(dir); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatalf("demo: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	var runs int
	if err := other.QueryRow(t.Context(), `SELECT count(*) FROM runs`).Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != 0 {
		t.Errorf("the demo wrote %d runs into the database of DATABASE_URL", runs)
	}
	if !strings.Contains(out, "all 300 outcomes match the ground truth") {
		t.Errorf("demo report:\n%s", out)
	}
	if m == nil {
		t.Fatalf("no psql instructions:\n%s", out)
	}
	if !strings.Contains(out, "database: a throwaway PostgreSQL in "+m[1]+", kept running afterwards") {
		t.Errorf("the demo does not say which database it used:\n%s", out)
	}
	// The demo process's work is over; the kept server still answers, and
	// the printed queries run.
	conn, err := pgx.Connect(t.Context(), "host="+m[1]+" user=postgres dbname=reconcile sslmode=disable")
	if err != nil {
		t.Fatalf("connect to the kept server: %v", err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	var items, matched int
	if err := conn.QueryRow(t.Context(), `SELECT item_count, matched FROM run_summary`).Scan(&items, &matched); err != nil {
		t.Fatal(err)
	}
	if items != 300 || matched == 0 {
		t.Errorf("run_summary: %d items, %d matched", items, matched)
	}
	for _, q := range regexp.MustCompile(`(?m)^  (SELECT .*;)$`).FindAllStringSubmatch(out, -1) {
		if _, err := conn.Exec(t.Context(), q[1]); err != nil {
			t.Errorf("printed query %s: %v", q[1], err)
		}
	}
	// status and limit show on the kept database show the limiter that
	// paced the demo (set to the provider's first rate), not an untouched
	// default.
	var configured float64
	if err := conn.QueryRow(t.Context(), `SELECT rate FROM rate_limiters WHERE name = $1`, limiter.DefaultName).
		Scan(&configured); err != nil {
		t.Fatalf("the demo's limiter is not the default one: %v", err)
	}
	kept := func(k string) string {
		if k == "DATABASE_URL" {
			return "host=" + m[1] + " user=postgres dbname=reconcile sslmode=disable"
		}
		return ""
	}
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"status"}, []string{"configured " + human.Rate(configured), "limit set"}},
		{[]string{"limit", "show"}, []string{"rate:           " + human.Rate(configured), "set at:"}},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(t.Context(), append(c.args, "--log-level", "error"), kept, strings.NewReader(""), &stdout, &stderr); err != nil {
			t.Fatalf("%s on the kept database: %v\n%s", c.args, err, stderr.String())
		}
		for _, want := range c.wants {
			if !strings.Contains(stdout.String(), want) || configured == limiter.DefaultRate {
				t.Errorf("%s on the kept database does not show the demo's limiter (%s):\n%s", c.args, want, stdout.String())
			}
		}
	}
}

func TestDemoRefusesADatabaseWithOpenRuns(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	if _, err := pool.Exec(t.Context(), `
		INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count)
		VALUES (gen_random_uuid(), 'nightly-2026-10-23', '2026-10-23', 1, 'manual', 't', 'x', '', 'UTC', 1)`); err != nil {
		t.Fatal(err)
	}
	_, _, err := runDemoCommand(t, func(string) string { return "" }, "--items", "10", "--database-url", pool.Config().ConnString())
	if err == nil || !strings.Contains(err.Error(), "1 open runs") {
		t.Fatalf("demo on a database with an open run: %v", err)
	}
	if exitCode(err, &bytes.Buffer{}) != 2 {
		t.Errorf("exit code = %d, want 2", exitCode(err, &bytes.Buffer{}))
	}
}

func TestDemoOnASharedDatabaseKeepsToItsOwnDate(t *testing.T) {
	t.Parallel()
	_, _, err := runDemoCommand(t, func(string) string { return "" }, "--database-url", "postgres://nowhere.invalid/x", "--date", "2026-10-24")
	if err == nil || !strings.Contains(err.Error(), "--date cannot go with --database-url") || exitCode(err, &bytes.Buffer{}) != 2 {
		t.Fatalf("demo --database-url --date: %v", err)
	}
}

// TestDescribePhasesCountsTheRetryTailApart checks the demo's phase table:
// calls per second by limit up to the second of the last first call, and the
// retries after it on their own.
func TestDescribePhasesCountsTheRetryTailApart(t *testing.T) {
	t.Parallel()
	s := func(limit float64, calls, first int64) providersim.Second {
		return providersim.Second{Limit: limit, Calls: calls, FirstCalls: first}
	}
	for _, tc := range []struct {
		name   string
		series []providersim.Second
		want   string
	}{
		{"tail", []providersim.Second{s(0, 5, 5), s(300, 290, 280), s(100, 90, 85), s(100, 100, 90), s(250, 240, 1), s(250, 20, 0), s(250, 3, 0)},
			"290/s while the limit was 300/s (1s), 95/s while the limit was 100/s (2s), 240/s while the limit was 250/s (1s); then 23 calls in 2s as the last retries waited out their backoff"},
		{"no tail", []providersim.Second{s(300, 300, 300), s(100, 100, 100)},
			"300/s while the limit was 300/s (1s), 100/s while the limit was 100/s (1s)"},
		{"no first calls counted", []providersim.Second{s(300, 300, 0), s(100, 100, 0)},
			"300/s while the limit was 300/s (1s), 100/s while the limit was 100/s (1s)"},
		{"empty", nil, ""},
	} {
		if got := describePhases(tc.series); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
