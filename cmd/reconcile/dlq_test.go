package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// deadLetteredRun enqueues a run of three items for 2026-10-24 and
// dead-letters tx1 and tx2 (one provider call each), as a consumer would
// have; it returns the env and a connection to its database.
func deadLetteredRun(t *testing.T) (*env, *bytes.Buffer, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	e, stdout, _ := testEnv(t)
	src := filepath.Join(t.TempDir(), "day.csv")
	if err := os.WriteFile(src, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+
		"tx1,acc,100,EUR,succeeded,2026-10-24T10:00:00Z\n"+
		"tx2,acc,200,EUR,succeeded,2026-10-24T11:00:00Z\n"+
		"tx3,acc,300,EUR,succeeded,2026-10-24T12:00:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-24", "--source", src, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, e.getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.WithoutCancel(ctx)) })
	if _, err := conn.Exec(ctx, `
		UPDATE queue_messages SET state = 'dead', reason = 'http_400', last_error = 'http 400' WHERE transaction_id IN ('tx1', 'tx2');
		UPDATE items SET state = 'dead_lettered', attempts = 1, last_reason = 'http_400' WHERE transaction_id IN ('tx1', 'tx2');
		UPDATE account_progress SET remaining = remaining - 2, dead_lettered = dead_lettered + 2, provider_calls = provider_calls + 2;
		UPDATE run_shards s SET remaining = remaining - c.n, dead_lettered = dead_lettered + c.n, provider_calls = provider_calls + c.n
		  FROM (SELECT shard, count(*)::int AS n FROM items WHERE transaction_id IN ('tx1', 'tx2') GROUP BY shard) c
		 WHERE s.shard = c.shard;
		UPDATE run_breakdown b SET dead_lettered = dead_lettered + c.n, dead_lettered_minor = dead_lettered_minor + c.amount
		  FROM (SELECT shard, provider, currency, count(*)::int AS n, sum(amount_minor) AS amount FROM items
		         WHERE transaction_id IN ('tx1', 'tx2') GROUP BY shard, provider, currency) c
		 WHERE b.shard = c.shard AND b.provider = c.provider AND b.currency = c.currency`); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	return e, stdout, conn
}

func deadCount(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM queue_messages WHERE state = 'dead'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDLQRedriveAsksWhich(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, conn := deadLetteredRun(t)
	dlq := func(args ...string) error {
		return cmdDLQ(ctx, e, append(args, "--log-level", "error"))
	}

	// No selector: refused, nothing moved.
	err := dlq("redrive")
	if err == nil || !strings.Contains(err.Error(), "--all") || exitCode(err, &bytes.Buffer{}) != 2 {
		t.Errorf("redrive without a selector: %v", err)
	}
	// An unknown id is an error, not "redrove 0".
	if err := dlq("redrive", "--id", "999999"); err == nil || !strings.Contains(err.Error(), "--id 999999: no such dead letter") {
		t.Errorf("redrive --id of no dead letter: %v", err)
	}
	// An unknown run too.
	if err := dlq("redrive", "--run", "nightly-2026-10-23"); err == nil || !strings.Contains(err.Error(), "no such run") {
		t.Errorf("redrive --run of no run: %v", err)
	}
	// A dry run by reconciliation id lists both and moves nothing.
	if err := dlq("redrive", "--run", "nightly-2026-10-24", "--dry-run"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "2 dead-lettered message(s) would go back") || deadCount(t, conn) != 2 {
		t.Errorf("dry run: %d dead left; printed:\n%s", deadCount(t, conn), stdout.String())
	}

	// dlq list: the ledger's attempts, as in the report; --run by name.
	stdout.Reset()
	if err := dlq("list", "--run", "nightly-2026-10-24"); err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^\d+\s+nightly-2026-10-24\s+(tx\d)\s+http_400\s+(\d+)\s+(\d+)\s`).FindAllStringSubmatch(stdout.String(), -1)
	if len(rows) != 2 || rows[0][1] != "tx1" || rows[0][3] != "1" || rows[1][3] != "1" {
		t.Errorf("dlq list, want tx1 and tx2 with 1 attempt each:\n%s", stdout.String())
	}

	// Redrive by run name.
	stdout.Reset()
	if err := dlq("redrive", "--run", "nightly-2026-10-24"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "redrove 2 ") || deadCount(t, conn) != 0 {
		t.Errorf("redrive --run: %d dead left; printed:\n%s", deadCount(t, conn), stdout.String())
	}
	// --all with nothing left is fine.
	stdout.Reset()
	if err := dlq("redrive", "--all"); err != nil || !strings.Contains(stdout.String(), "redrove 0 ") {
		t.Errorf("redrive --all: %v\n%s", err, stdout.String())
	}
}

// TestDLQRedriveTakesSeveralIDs gives --id the way its usage shows it,
// several ids after one flag, and the other spellings of the same.
func TestDLQRedriveTakesSeveralIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, conn := deadLetteredRun(t)
	var a, b string
	if err := conn.QueryRow(ctx, `SELECT min(message_id)::text, max(message_id)::text FROM queue_messages WHERE state = 'dead'`).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--id", a, b, "--dry-run"},
		{"--dry-run", "--id", a, b},
		{"--id", a + "," + b, "--dry-run"},
		{"--id", a, "--id", b, "--dry-run"},
	} {
		stdout.Reset()
		if err := cmdDLQ(ctx, e, append([]string{"redrive", "--log-level", "error"}, args...)); err != nil {
			t.Errorf("dlq redrive %s: %v", strings.Join(args, " "), err)
			continue
		}
		if !strings.Contains(stdout.String(), "2 dead-lettered message(s) would go back") {
			t.Errorf("dlq redrive %s printed:\n%s", strings.Join(args, " "), stdout)
		}
	}
	for _, args := range [][]string{{"--id", a, "oops"}, {"--dry-run", a}, {"--id", a, "3x"}} {
		err := cmdDLQ(ctx, e, append([]string{"redrive", "--log-level", "error"}, args...))
		if exitCode(err, &bytes.Buffer{}) != 2 {
			t.Errorf("dlq redrive %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
	stdout.Reset()
	if err := cmdDLQ(ctx, e, []string{"redrive", "--log-level", "error", "--id", a, b}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "redrove 2 ") || deadCount(t, conn) != 0 {
		t.Errorf("redrive --id %s %s: %d dead left; printed:\n%s", a, b, deadCount(t, conn), stdout)
	}
}

// TestDLQListLeavesOutCancelledLetters cancels a run whose third item was
// open: its message is dead-lettered with reason cancelled and is never
// redriven, so dlq list does not offer it (it counts it, and --cancelled
// lists it), and a redrive of the run says it stays.
func TestDLQListLeavesOutCancelledLetters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, conn := deadLetteredRun(t)
	if err := cmdCancel(ctx, e, []string{"--date", "2026-10-24", "--reason", "wrong export", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	list := func(args ...string) string {
		t.Helper()
		stdout.Reset()
		if err := cmdDLQ(ctx, e, append([]string{"list", "--log-level", "error"}, args...)); err != nil {
			t.Fatal(err)
		}
		return stdout.String()
	}
	out := list()
	if strings.Contains(out, "tx3") || !strings.Contains(out, "tx1") || !strings.Contains(out, "2 dead letter(s) (and 1 of cancelled runs, not redriven: --cancelled lists them)") {
		t.Errorf("dlq list after a cancel:\n%s", out)
	}
	if out := list("--cancelled"); !strings.Contains(out, "tx3") || !strings.Contains(out, "3 dead letter(s);") {
		t.Errorf("dlq list --cancelled:\n%s", out)
	}
	if out := list("--json"); strings.Contains(out, "tx3") {
		t.Errorf("dlq list --json offers the cancelled letter:\n%s", out)
	}
	stdout.Reset()
	if err := cmdDLQ(ctx, e, []string{"redrive", "--run", "nightly-2026-10-24", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "redrove 2 dead-lettered message(s) back to the queue; 1 of cancelled runs stay") || deadCount(t, conn) != 1 {
		t.Errorf("redrive of the cancelled run: %d dead left; printed:\n%s", deadCount(t, conn), stdout)
	}
}
