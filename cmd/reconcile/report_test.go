package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// testEnv returns an env on a fresh database, and its stdout and stderr.
func testEnv(t *testing.T) (*env, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	conn := pgtest.ConnString(t)
	var stdout, stderr bytes.Buffer
	getenv := func(k string) string {
		if k == "DATABASE_URL" {
			return conn
		}
		return ""
	}
	return &env{getenv: getenv, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}, &stdout, &stderr
}

func TestReportAndStatusCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, stderr := testEnv(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "payments-2026-10-24.csv")
	if err := os.WriteFile(src, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+
		"tx1,acc,100,EUR,succeeded,2026-10-24T10:00:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-24", "--source", src, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}

	// An unknown date is bad input: exit 2 with a clear message.
	err := cmdReport(ctx, e, []string{"--date", "2026-10-20", "--log-level", "error"})
	var msg bytes.Buffer
	if code := exitCode(err, &msg); code != 2 || !strings.Contains(msg.String(), "no run for this date") {
		t.Fatalf("unknown date: exit %d, %q", code, msg.String())
	}

	// An unwritable --out fails and leaves nothing behind.
	bad := filepath.Join(dir, "no-such-dir", "report.csv")
	err = cmdReport(ctx, e, []string{"--date", "2026-10-24", "--format", "csv", "--out", bad, "--log-level", "error"})
	msg.Reset()
	if code := exitCode(err, &msg); code != 1 || !strings.Contains(msg.String(), bad) {
		t.Fatalf("unwritable --out: exit %d, %q", code, msg.String())
	}

	// --out replaces the file as a whole, leaving no temporary file.
	out := filepath.Join(dir, "report.csv")
	if err := os.WriteFile(out, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdReport(ctx, e, []string{"--date", "2026-10-24", "--format", "csv", "--all", "--out", out, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil || !strings.HasPrefix(string(got), "record,reconciliation_id,") || !strings.Contains(string(got), "item,nightly-2026-10-24,2026-10-24,1,tx1,acc,100,EUR,succeeded,queued") {
		t.Fatalf("report file: %q %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Fatalf("directory holds %d entries, want the source and the report", len(entries))
	}

	stdout.Reset()
	if err := cmdStatus(ctx, e, []string{"--json", "--deadline", "1ns", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	var st struct {
		Runs     []struct{ Open int } `json:"runs"`
		Warnings []string             `json:"warnings"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &st); err != nil || len(st.Runs) != 1 || st.Runs[0].Open != 1 || len(st.Warnings) != 1 {
		t.Fatalf("status --json: %s (%v)", stdout.Bytes(), err)
	}
	if conn := e.getenv("DATABASE_URL"); strings.Contains(stdout.String()+stderr.String(), conn) {
		t.Fatal("status printed the connection string")
	}
}

func TestParseCatchUpAndDeadline(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"0": 0, "3d": 72 * time.Hour, "36h": 36 * time.Hour, "0d": 0} {
		if got, err := parseCatchUp(in); err != nil || got != want {
			t.Errorf("parseCatchUp(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1h", "3x", "-2d", "d"} {
		if _, err := parseCatchUp(in); err == nil {
			t.Errorf("parseCatchUp(%q) accepted", in)
		}
	}
	now := time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)
	if got, err := parseDeadline("6h", now); err != nil || !got.Equal(now.Add(6*time.Hour)) {
		t.Errorf("parseDeadline(6h) = %v, %v", got, err)
	}
	if got, err := parseDeadline("2026-10-25T02:00:00Z", now); err != nil || !got.Equal(now.Add(2*time.Hour)) {
		t.Errorf("parseDeadline(RFC 3339) = %v, %v", got, err)
	}
	if _, err := parseDeadline("tomorrow", now); err == nil {
		t.Error("parseDeadline(tomorrow) accepted")
	}
}

// TestScheduleCommandCatchesUp starts `reconcile schedule` on the real clock
// with a daily expression: its start-up catch-up enqueues the dates of the
// ticks of the last three days from their files, then it runs until stopped.
func TestScheduleCommandCatchesUp(t *testing.T) {
	t.Parallel()
	e, _, _ := testEnv(t)
	dir := t.TempDir()
	today := time.Now().UTC()
	for i := 1; i <= 4; i++ {
		d := today.AddDate(0, 0, -i).Format(time.DateOnly)
		body := "transaction_id,account_id,amount_minor,currency,status,occurred_at\n" +
			"tx-" + d + ",acc,100,EUR,succeeded," + d + "T12:00:00Z\n"
		if err := os.WriteFile(filepath.Join(dir, "payments-"+d+".csv"), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- cmdSchedule(ctx, e, []string{"--cron", "0 0 * * *", "--tz", "UTC", "--catch-up", "3d",
			"--source-template", filepath.Join(dir, "payments-{date}.csv"), "--log-level", "error"})
	}()
	pool := pgtestPool(t, e)
	deadline := time.Now().Add(15 * time.Second)
	for {
		var n int
		if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM runs WHERE trigger = 'cron'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 3 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("schedule stopped early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs caught up after 15s, want 3", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("schedule after cancel: %v", err)
	}
}

// pgtestPool opens a pool on e's database, closed when t ends.
func pgtestPool(t *testing.T, e *env) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), e.getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
