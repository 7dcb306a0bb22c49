package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/outbox"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// announcements reads the run's announcements of type typ, oldest first.
func announcements(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID, typ string) []outbox.Run {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT payload FROM notifications WHERE run_id = $1 AND type = $2 ORDER BY created_at, round`, runID, typ)
	if err != nil {
		t.Fatal(err)
	}
	payloads, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	out := make([]outbox.Run, len(payloads))
	for i, p := range payloads {
		if err := json.Unmarshal(p, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// finish ends the run's four items: a match, a mismatch, a missing one and
// a dead letter, the first three in one transaction, the last (which
// completes the run) in another.
func finish(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID, at time.Time) ledger.Result {
	t.Helper()
	ctx := context.Background()
	change := func(id string, to ledger.State, reason string) ledger.Change {
		return ledger.Change{RunID: runID, TransactionID: id, From: ledger.Queued, To: to, Called: true, Attempt: 1,
			HTTPStatus: 200, Reason: reason, Actor: "test", At: at}
	}
	if _, err := recordBatch(ctx, pool, []ledger.Change{change("tx00000", ledger.Matched, "matched"),
		change("tx00001", ledger.Mismatched, "mismatched"), change("tx00002", ledger.Missing, "missing")}); err != nil {
		t.Fatal(err)
	}
	res, err := record(ctx, pool, change("tx00003", ledger.DeadLettered, "http_400"))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCompletionIsAnnouncedInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	runID := seedRun(t, pool, 4, 2)
	at := mustTime(t).Add(time.Hour)

	// A completion rolled back leaves no announcement.
	change := func(id string, to ledger.State) ledger.Change {
		return ledger.Change{RunID: runID, TransactionID: id, From: ledger.Queued, To: to, Reason: string(to), Actor: "test", At: at}
	}
	rollback := errors.New("rolled back")
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err := ledger.RecordBatch(ctx, tx, []ledger.Change{change("tx00000", ledger.Matched), change("tx00001", ledger.Matched),
			change("tx00002", ledger.Matched), change("tx00003", ledger.Matched)})
		if err != nil {
			return err
		}
		if len(res.RunsCompleted) != 1 || len(announcementsIn(t, tx, runID)) != 1 {
			t.Errorf("completed %v with %d announcements in the transaction, want the run and one", res.RunsCompleted, len(announcementsIn(t, tx, runID)))
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatal(err)
	}
	if got := announcements(t, pool, runID, outbox.Completed); len(got) != 0 {
		t.Fatalf("a rolled-back completion left %d announcements", len(got))
	}

	if res := finish(t, pool, runID, at); len(res.RunsCompleted) != 1 {
		t.Fatalf("the run did not complete: %+v", res)
	}
	got := announcements(t, pool, runID, outbox.Completed)
	if len(got) != 1 {
		t.Fatalf("%d announcements of the completion, want 1", len(got))
	}
	r := got[0]
	wantOutcomes := map[string]int{"matched": 1, "mismatched": 1, "missing": 1, "dead_lettered": 1, "cancelled": 0, "unexpected": 0}
	// seedRun's currencies cycle EUR, USD, JPY with amounts 100, 101, ...
	wantStake := []outbox.Amount{{Currency: "EUR", DeadLetteredMinor: 103}, {Currency: "JPY", MissingMinor: 102},
		{Currency: "USD", MismatchedMinor: 101}}
	if r.Round != 1 || r.Items != 4 || r.Open != 0 || !reflect.DeepEqual(r.Outcomes, wantOutcomes) ||
		!reflect.DeepEqual(r.AtStake, wantStake) || !reflect.DeepEqual(r.DeadLetters, map[string]int{"http_400": 1}) ||
		r.ProviderCalls != 4 || r.BusinessDate != "2026-10-24" || r.Generation != 1 || r.Trigger != "manual" {
		t.Errorf("announcement = %+v", r)
	}
	if r.CompletedAt == nil || !r.CompletedAt.Equal(at) || r.DurationSeconds != at.Sub(r.EnqueuedAt).Seconds() {
		t.Errorf("completed at %v after %gs, want %v after %gs", r.CompletedAt, r.DurationSeconds, at, at.Sub(r.EnqueuedAt).Seconds())
	}

	// A redrive that finishes the run again is announced as round 2.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ledger.Requeue(ctx, tx, runID, []string{"tx00003"}, "redrive", "test", at)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := record(ctx, pool, ledger.Change{RunID: runID, TransactionID: "tx00003", From: ledger.Queued, To: ledger.Matched,
		Called: true, Attempt: 2, HTTPStatus: 200, Reason: "matched", Actor: "test", At: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got = announcements(t, pool, runID, outbox.Completed)
	if len(got) != 2 || got[1].Round != 2 || got[1].Outcomes["matched"] != 2 || got[1].Outcomes["dead_lettered"] != 0 ||
		len(got[1].DeadLetters) != 0 || len(got[1].AtStake) != 2 {
		t.Fatalf("after the redrive: %+v, want round 2 with two matches and no dead letter", got)
	}
}

func announcementsIn(t *testing.T, tx pgx.Tx, runID uuid.UUID) []uuid.UUID {
	t.Helper()
	rows, err := tx.Query(context.Background(), `SELECT event_id FROM notifications WHERE run_id = $1`, runID)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestMissedDeadlineIsAnnouncedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	open := seedRun(t, pool, 4, 1)
	if _, err := pool.Exec(ctx, `UPDATE runs SET business_date = '2026-10-23' WHERE run_id = $1`, open); err != nil {
		t.Fatal(err)
	}
	done := seedRun(t, pool, 4, 1)
	finish(t, pool, done, time.Time{})

	if n, err := ledger.SetDeadlines(ctx, pool, 6*time.Hour); err != nil || n != 1 {
		t.Fatalf("set %d deadlines (%v), want the open run's", n, err)
	}
	// A second process with another deadline does not move it.
	if n, err := ledger.SetDeadlines(ctx, pool, time.Hour); err != nil || n != 0 {
		t.Fatalf("set %d deadlines again (%v), want none", n, err)
	}
	var enqueued time.Time
	if err := pool.QueryRow(ctx, `SELECT created_at FROM runs WHERE run_id = $1`, open).Scan(&enqueued); err != nil {
		t.Fatal(err)
	}
	if ids, err := ledger.OverdueRuns(ctx, pool, enqueued.Add(6*time.Hour-time.Second)); err != nil || len(ids) != 0 {
		t.Fatalf("overdue before the deadline: %v (%v)", ids, err)
	}
	late := enqueued.Add(6*time.Hour + time.Minute)
	ids, err := ledger.OverdueRuns(ctx, pool, late)
	if err != nil || len(ids) != 1 || ids[0] != open {
		t.Fatalf("overdue after the deadline: %v (%v), want %s", ids, err, open)
	}
	for i, want := range []bool{true, false} {
		var added bool
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			added, err = ledger.AnnounceMissedDeadline(ctx, tx, open, late)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if added != want {
			t.Fatalf("announcement %d added = %v, want %v", i+1, added, want)
		}
	}
	got := announcements(t, pool, open, outbox.DeadlineMissed)
	if len(got) != 1 || got[0].Open != 4 || got[0].DeadlineAt == nil || !got[0].DeadlineAt.Equal(enqueued.Add(6*time.Hour)) ||
		got[0].DurationSeconds != 6*3600 {
		t.Fatalf("missed deadline announcements: %+v", got)
	}
}
