package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// TestConsumeRateKeepsTheStoredLimit: --rate sets the shared limit only
// when none is stored, or with --save; otherwise it warns and changes
// nothing.
func TestConsumeRateKeepsTheStoredLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	stored := func(t *testing.T, pool *pgxpool.Pool) limiter.Settings {
		t.Helper()
		s, err := limiter.LoadSettings(ctx, pool, limiter.DefaultName)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := applyRate(ctx, pool, logger, consumeFlags{rate: 50, burst: 5}); err != nil {
		t.Fatal(err)
	}
	if s := stored(t, pool); s != (limiter.Settings{Rate: 50, Burst: 5}) {
		t.Errorf("first --rate 50 --burst 5: stored %+v", s)
	}
	if err := applyRate(ctx, pool, logger, consumeFlags{rate: 500}); err != nil {
		t.Fatal(err)
	}
	if s := stored(t, pool); s != (limiter.Settings{Rate: 50, Burst: 5}) {
		t.Errorf("--rate 500 without --save changed the stored limit to %+v", s)
	}
	if !strings.Contains(logs.String(), "--save") {
		t.Errorf("no warning that --rate was ignored:\n%s", logs.String())
	}
	if err := applyRate(ctx, pool, logger, consumeFlags{rate: 500, save: true}); err != nil {
		t.Fatal(err)
	}
	if s := stored(t, pool); s != (limiter.Settings{Rate: 500, Burst: 500}) {
		t.Errorf("--rate 500 --save: stored %+v", s)
	}
	if err := (&consumeFlags{save: true, concurrency: 1, visibility: 30e9, maxDeliveries: 1, timeout: 1, progress: "off"}).validate(); err == nil ||
		!strings.Contains(err.Error(), "--save needs --rate") {
		t.Errorf("--save without --rate: %v", err)
	}
}

// TestUntilDoneSummaryAfterARedrive completes a run with two dead letters,
// redrives them and completes it again: the summary of the consumer that
// finished it is the run as it is now (no dead letter), once, and leaves
// out the runs completed before the consumer started.
func TestUntilDoneSummaryAfterARedrive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, conn := deadLetteredRun(t)
	pool, err := pgxpool.New(ctx, e.getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var runID uuid.UUID
	if err := conn.QueryRow(ctx, `SELECT run_id FROM runs`).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	match := func(runID uuid.UUID, id string, attempt int) {
		t.Helper()
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ledger.Record(ctx, tx, ledger.Change{RunID: runID, TransactionID: id, From: ledger.Queued, To: ledger.Matched,
				Called: true, Attempt: attempt, HTTPStatus: 200, Reason: "matched", Actor: "test"})
			return err
		})
		if err != nil {
			t.Fatalf("match %s: %v", id, err)
		}
	}
	match(runID, "tx3", 1) // the run completes: 1 matched, 2 dead-lettered
	// An older night, complete before the consumer starts.
	src := filepath.Join(t.TempDir(), "older.csv")
	if err := os.WriteFile(src, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+
		"old1,acc,100,EUR,succeeded,2026-10-23T10:00:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-23", "--source", src, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	var older uuid.UUID
	if err := conn.QueryRow(ctx, `SELECT run_id FROM runs WHERE business_date = '2026-10-23'`).Scan(&older); err != nil {
		t.Fatal(err)
	}
	match(older, "old1", 1)

	since := time.Now()
	if err := cmdDLQ(ctx, e, []string{"redrive", "--run", "nightly-2026-10-24", "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	match(runID, "tx1", 2)
	match(runID, "tx2", 2)
	stdout.Reset()
	if err := printCompletions(ctx, stdout, pool, since); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "nightly-2026-10-24 complete again (round 2, after a redrive): 3 items: 3 matched, 0 mismatched, 0 missing, 0 dead-lettered;") {
		t.Errorf("summary after the redrive:\n%s\nwant one line: nightly-2026-10-24 complete again, 3 matched, no dead letter", stdout)
	}
}
