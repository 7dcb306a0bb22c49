package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPruneKeepsTheLedgerAndTheDateEnqueuedOnce prunes a run completed 100
// days ago next to an open one: only the old run's acked messages and ticks
// go, its ledger rows stay, and enqueuing its date again creates nothing.
func TestPruneKeepsTheLedgerAndTheDateEnqueuedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, _ := testEnv(t)
	dir := t.TempDir()
	src := func(date string) string {
		p := filepath.Join(dir, date+".csv")
		body := "transaction_id,account_id,amount_minor,currency,status,occurred_at\n"
		for _, tx := range []string{"a", "b", "c"} {
			body += tx + "," + "acc,100,EUR,succeeded," + date + "T10:00:00Z\n"
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, d := range []string{"2026-01-10", "2026-10-24"} {
		if err := cmdEnqueue(ctx, e, []string{"--date", d, "--source", src(d), "--log-level", "error"}); err != nil {
			t.Fatal(err)
		}
	}
	stdout.Reset()
	pool := pgtestPool(t, e)
	for _, sql := range []string{
		// The old run is done: its messages acked, completed 100 days ago.
		`UPDATE queue_messages SET state = 'acked' WHERE reconciliation_id IN ('nightly-2026-01-10', 'nightly-2026-10-24')`,
		`UPDATE runs SET completed_at = now() - interval '100 days' WHERE business_date = '2026-01-10'`,
		`INSERT INTO schedule_ticks (scheduled_at, business_date, catch_up, outcome, run_id, source, scheduler, recorded_at)
		 SELECT now() - interval '101 days', business_date, false, 'enqueued', run_id, 'x', 's', now() - interval '101 days' FROM runs`,
		// The limiter's own changes go with the retention, an operator's stay.
		`INSERT INTO rate_limiter_history (limiter, recorded_at, cause, rate) VALUES
		 ('provider', now() - interval '100 days', 'probe', 10), ('provider', now() - interval '100 days', 'limit set', 10),
		 ('provider', now(), 'probe', 20)`,
		`INSERT INTO consumers (consumer_id, host, pid, started_at, last_seen) VALUES
		 ('old:1', 'old', 1, now() - interval '100 days', now() - interval '100 days'), ('new:2', 'new', 2, now(), now())`,
	} {
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if err := cmdPrune(ctx, e, []string{"--older-than", "90d", "--dry-run", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.HasPrefix(out, "would delete 3 acked queue messages and 1 schedule ticks") ||
		!strings.Contains(out, "1 limiter history rows and 1 consumer heartbeats") {
		t.Fatalf("dry run printed %q", out)
	}
	if n := count(`SELECT count(*) FROM queue_messages`); n != 6 {
		t.Fatalf("the dry run left %d messages, want 6", n)
	}
	stdout.Reset()
	if err := cmdPrune(ctx, e, []string{"--older-than", "90d", "--batch", "2", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	if out := stdout.String(); !strings.HasPrefix(out, "deleted 3 acked queue messages and 1 schedule ticks") {
		t.Fatalf("prune printed %q", out)
	}
	if n := count(`SELECT count(*) FROM queue_messages WHERE reconciliation_id = 'nightly-2026-10-24'`); n != 3 {
		t.Fatalf("the open run kept %d messages, want 3", n)
	}
	if n := count(`SELECT count(*) FROM queue_messages`); n != 3 {
		t.Fatalf("%d messages left, want 3", n)
	}
	if n := count(`SELECT count(*) FROM schedule_ticks`); n != 1 {
		t.Fatalf("%d ticks left, want the open run's", n)
	}
	if n := count(`SELECT count(*) FROM rate_limiter_history WHERE cause = 'limit set' OR recorded_at > now() - interval '1 day'`); n != 2 ||
		count(`SELECT count(*) FROM rate_limiter_history`) != 2 {
		t.Fatalf("limiter history after prune: want the operator's old row and the recent one")
	}
	if n := count(`SELECT count(*) FROM consumers WHERE consumer_id = 'new:2'`); n != 1 || count(`SELECT count(*) FROM consumers`) != 1 {
		t.Fatalf("consumers after prune: want only the recent one")
	}

	// The pruned date cannot be enqueued twice: the run's key stops it.
	stdout.Reset()
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-01-10", "--source", src("2026-01-10"), "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	if n := count(`SELECT count(*) FROM queue_messages WHERE reconciliation_id = 'nightly-2026-01-10'`); n != 0 {
		t.Fatalf("re-enqueue of a pruned date published %d messages", n)
	}
	if n := count(`SELECT count(*) FROM runs`) + count(`SELECT count(*) FROM items`); n != 2+6 {
		t.Fatalf("runs + items = %d after prune and re-enqueue, want 8", n)
	}
	if err := cmdAudit(ctx, e, []string{"verify", "--log-level", "error"}); err != nil {
		t.Fatalf("audit verify after prune: %v", err)
	}

	if err := cmdPrune(ctx, e, []string{"--older-than", "soon"}); exitCode(err, &strings.Builder{}) != 2 {
		t.Fatalf("bad --older-than: %v", err)
	}
}

// TestSchedulePruneAfterRejectsABadAge checks that `schedule --prune-after`
// reads its age as `prune --older-than` does, before touching the database.
func TestSchedulePruneAfterRejectsABadAge(t *testing.T) {
	t.Parallel()
	e, _, _ := testEnv(t)
	err := cmdSchedule(context.Background(), e, []string{"--cron", "0 2 * * *", "--source-template", "/data/{date}.csv", "--prune-after", "soon"})
	var msg strings.Builder
	if exitCode(err, &msg) != 2 || !strings.Contains(msg.String(), `--prune-after "soon"`) {
		t.Fatalf("bad --prune-after: exit %d, %q", exitCode(err, &strings.Builder{}), msg.String())
	}
}

// TestPruneSaysOlderThanIsRequired runs prune, dry or not, without an age:
// one line saying the flag is required and what it means (exit 2), not a
// complaint about the empty string it was not given.
func TestPruneSaysOlderThanIsRequired(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--dry-run"}, {}} {
		var stdout, stderr strings.Builder
		err := run(context.Background(), append([]string{"prune"}, args...), func(string) string { return "" },
			strings.NewReader(""), &stdout, &stderr)
		code := exitCode(err, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--older-than is required") || strings.Contains(stderr.String(), `""`) {
			t.Errorf("prune %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr.String())
		}
	}
}
