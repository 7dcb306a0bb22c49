package audit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The fixture: three runs covering every state and every handbook question.
var (
	runNightly = uuid.MustParse("00000000-0000-0000-0000-0000000000a1") // 2026-10-24 g1, cron, complete
	runRerun   = uuid.MustParse("00000000-0000-0000-0000-0000000000b2") // 2026-10-24 g2, manual, open
	runNext    = uuid.MustParse("00000000-0000-0000-0000-0000000000c3") // 2026-10-25 g1, cron, complete
)

type testDB struct {
	pool *pgxpool.Pool
	conn string // superuser connection string of the same database
}

func newDB(t *testing.T) testDB {
	t.Helper()
	conn := pgtest.ConnString(t)
	pool, err := pgxpool.New(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return testDB{pool: pool, conn: conn}
}

func mustExec(t *testing.T, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// seed fills the ledger the way enqueue and consume would: items with their
// final state, and their transitions inserted in order (the trigger assigns
// seq and the hashes).
func seed(t *testing.T, db testDB) {
	t.Helper()
	mustExec(t, db.pool, `
		INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count, created_at, completed_at) VALUES
		  ($1, 'nightly-2026-10-24',    '2026-10-24', 1, 'cron',   'reconcile@batch-1',  'payments-2026-10-24.csv', 'aa', 'Europe/Berlin', 6, '2026-10-25 01:00:00+00', '2026-10-25 01:42:10+00'),
		  ($2, 'nightly-2026-10-24-g2', '2026-10-24', 2, 'manual', 'alice@ops-laptop',   'payments-2026-10-24.csv', 'aa', 'Europe/Berlin', 2, '2026-10-25 09:30:00+00', NULL),
		  ($3, 'nightly-2026-10-25',    '2026-10-25', 1, 'cron',   'reconcile@batch-1',  'payments-2026-10-25.csv', 'bb', 'Europe/Berlin', 1, '2026-10-26 01:00:00+00', '2026-10-26 01:00:02+00')`,
		runNightly, runRerun, runNext)
	type tr struct {
		from, to string
		attempt  int
		status   any
		reason   string
		retryMS  any
		details  any
		actor    string
	}
	type it struct {
		run                 uuid.UUID
		tx, account         string
		state               string
		attempts, throttles int
		differences         any
		trs                 []tr
	}
	const c = "batch-1:4242"
	items := []it{
		{runNightly, "tx-1001", "acc-1", "matched", 1, 0, nil, []tr{
			{"queued", "matched", 1, 200, "matched", nil, nil, c}}},
		{runNightly, "tx-1002", "acc-1", "mismatched", 1, 0,
			`[{"field":"amount_minor","expected":1000,"provider":900},{"field":"currency","expected":"EUR","provider":"USD"}]`, []tr{
				{"queued", "mismatched", 1, 200, "mismatched", nil, `{"fields":["amount_minor","currency"]}`, c}}},
		{runNightly, "tx-1003", "acc-2", "matched", 4, 2, nil, []tr{
			{"queued", "retry_scheduled", 1, 429, "throttled", 2000, `{"retry_after":"2"}`, c},
			{"retry_scheduled", "retry_scheduled", 2, 429, "throttled", 4000, `{"retry_after":"4"}`, c},
			{"retry_scheduled", "retry_scheduled", 3, 503, "http_503", 800, nil, c},
			{"retry_scheduled", "matched", 4, 200, "matched", nil, nil, c}}},
		{runNightly, "tx-1004", "acc-2", "matched", 2, 0, nil, []tr{
			{"queued", "dead_lettered", 1, 400, "http_400", nil, `{"detail":"http 400: invalid transaction id"}`, c},
			{"dead_lettered", "queued", 0, nil, "redrive", nil, nil, "alice@ops-laptop"},
			{"queued", "matched", 2, 200, "matched", nil, nil, c}}},
		{runNightly, "tx-1005", "acc-2", "missing", 1, 0, nil, []tr{
			{"queued", "missing", 1, 404, "missing", nil, nil, c}}},
		{runNightly, "tx-1006", "acc-1", "dead_lettered", 4, 0, nil, []tr{
			{"queued", "retry_scheduled", 1, 503, "http_503", 400, nil, c},
			{"retry_scheduled", "retry_scheduled", 2, 503, "http_503", 800, nil, c},
			{"retry_scheduled", "retry_scheduled", 3, nil, "timeout", 1600, `{"detail":"context deadline exceeded"}`, c},
			{"retry_scheduled", "dead_lettered", 4, 503, "max_attempts", nil, `{"detail":"http 503 after 4 attempts"}`, c}}},
		{runRerun, "tx-1001", "acc-1", "queued", 0, 0, nil, nil},
		{runRerun, "tx-1002", "acc-1", "retry_scheduled", 1, 0, nil, []tr{
			{"queued", "retry_scheduled", 1, 503, "http_503", 400, nil, c}}},
		{runNext, "tx-2001", "acc-3", "matched", 1, 0, nil, []tr{
			{"queued", "matched", 1, 200, "matched", nil, nil, c}}},
	}
	ctx := context.Background()
	at := time.Date(2026, 10, 25, 1, 0, 0, 123456000, time.UTC)
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		for _, i := range items {
			var reconciliationID string
			if err := tx.QueryRow(ctx, `SELECT reconciliation_id FROM runs WHERE run_id = $1`, i.run).Scan(&reconciliationID); err != nil {
				return err
			}
			terminal := i.state != "queued" && i.state != "retry_scheduled"
			if _, err := tx.Exec(ctx, `
				INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard,
				                   state, attempts, throttles, differences, terminal_at)
				VALUES ($1, $2, $3, $4, 1000, 'EUR', 'succeeded', '2026-10-24 12:00:00+00', 0, $5, $6, $7, $8::jsonb,
				        CASE WHEN $9 THEN $10::timestamptz END)`,
				i.run, i.tx, i.account, reconciliationID+":"+i.tx, i.state, i.attempts, i.throttles, i.differences,
				terminal, at.Add(time.Minute)); err != nil {
				return err
			}
			for _, r := range i.trs {
				at = at.Add(7*time.Second + 1001*time.Microsecond)
				if _, err := tx.Exec(ctx, `
					INSERT INTO transitions (run_id, transaction_id, from_state, to_state, at, attempt, http_status, reason, retry_after_ms, details, actor)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11)`,
					i.run, i.tx, r.from, r.to, at, r.attempt, r.status, r.reason, r.retryMS, r.details, r.actor); err != nil {
					return err
				}
			}
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO account_progress (run_id, account_id, item_count, remaining) VALUES
			  ($1, 'acc-1', 3, 0), ($1, 'acc-2', 3, 0), ($2, 'acc-1', 2, 2), ($3, 'acc-3', 1, 0)`,
			runNightly, runRerun, runNext); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO run_shards (run_id, shard, remaining) VALUES ($1, 0, 0), ($2, 0, 2), ($3, 0, 0)`,
			runNightly, runRerun, runNext); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO run_breakdown (run_id, shard, provider, currency, item_count, mismatched, missing, dead_lettered,
			                           mismatched_minor, missing_minor, dead_lettered_minor) VALUES
			  ($1, 0, '', 'EUR', 6, 1, 1, 1, 1000, 1000, 1000), ($2, 0, '', 'EUR', 2, 0, 0, 0, 0, 0, 0), ($3, 0, '', 'EUR', 1, 0, 0, 0, 0, 0, 0)`,
			runNightly, runRerun, runNext); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO run_completions (run_id, round, items, matched, mismatched, missing, dead_lettered, provider_calls, throttles, completed_at, completed_by) VALUES
			  ($1, 2, 6, 2, 1, 1, 2, 12, 2, '2026-10-25 01:30:00+00', 'batch-1:4242'),
			  ($2, 1, 1, 1, 0, 0, 0, 1, 0, '2026-10-26 01:00:02+00', 'batch-1:4242')`,
			runNightly, runNext); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE runs SET first_completed_at = CASE WHEN run_id = $1 THEN '2026-10-25 01:30:00+00'::timestamptz ELSE completed_at END`,
			runNightly); err != nil {
			return err
		}
		// The next day was listed (list mode): one page, its one record.
		if _, err := tx.Exec(ctx, `
			INSERT INTO run_listings (run_id, provider, state, window_from, window_to, pages, records, calls, finished_at)
			VALUES ($1, '', 'done', '2026-10-24 23:00:00+00', '2026-10-26 00:00:00+00', 1, 1, 1, '2026-10-26 01:00:01+00')`,
			runNext); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO provider_records (run_id, provider, record_id, amount_minor, currency, status, kind, page)
			SELECT run_id, provider, transaction_id, amount_minor, currency, status, 'payment', 1 FROM items WHERE run_id = $1`,
			runNext); err != nil {
			return err
		}
		// tx-1004 was dead-lettered when the night first completed; its
		// redrive completed the run and acc-2 a second time.
		if _, err := tx.Exec(ctx, `
			INSERT INTO completion_rounds (run_id, account_id, round, items, matched, mismatched, missing, dead_lettered, cancelled,
			                               provider_calls, throttles, completed_at, completed_by) VALUES
			  ($1, NULL,    2, 6, 3, 1, 1, 1, 0, 13, 2, '2026-10-25 01:42:10+00', 'batch-1:4242'),
			  ($1, 'acc-2', 2, 3, 2, 0, 1, 0, 0, 7, 2, '2026-10-25 01:42:10+00', 'batch-1:4242')`, runNightly); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO account_completions (run_id, account_id, round, items, matched, mismatched, missing, dead_lettered, provider_calls, throttles, completed_at, completed_by) VALUES
			  ($1, 'acc-1', 1, 3, 1, 1, 0, 1, 6, 0, '2026-10-25 01:40:00+00', 'batch-1:4242'),
			  ($1, 'acc-2', 2, 3, 1, 0, 1, 1, 6, 2, '2026-10-25 01:30:00+00', 'batch-1:4242'),
			  ($2, 'acc-3', 1, 1, 1, 0, 0, 0, 1, 0, '2026-10-26 01:00:02+00', 'batch-1:4242')`,
			runNightly, runNext); err != nil {
			return err
		}
		// Both completions of the night were announced; the webhook took
		// the first and refused the second twice so far.
		if _, err := tx.Exec(ctx, `
			INSERT INTO notifications (event_id, run_id, type, round, payload, created_at) VALUES
			  ('6d1f0c2e-0000-4000-8000-000000000001', $1, 'run.completed', 1, '{"round": 1}', '2026-10-25 01:30:00+00'),
			  ('6d1f0c2e-0000-4000-8000-000000000002', $1, 'run.completed', 2, '{"round": 2}', '2026-10-25 01:42:10+00')`,
			runNightly); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO notification_deliveries (event_id, destination, target, format, state, attempts, next_attempt_at,
			                                     last_status, last_error, created_at, finished_at) VALUES
			  ('6d1f0c2e-0000-4000-8000-000000000001', 'a1b2c3d4e5f60718', 'https://hooks.example.com/…', 'standard', 'delivered', 1,
			   '2026-10-25 01:30:01+00', 204, NULL, '2026-10-25 01:30:01+00', '2026-10-25 01:30:01+00'),
			  ('6d1f0c2e-0000-4000-8000-000000000002', 'a1b2c3d4e5f60718', 'https://hooks.example.com/…', 'standard', 'pending', 2,
			   '2026-10-25 01:43:00+00', 503, 'http 503: try later', '2026-10-25 01:42:11+00', NULL)`); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// tamper runs stmt as the superuser with the table's own triggers off, the
// way an intruder with full access would rewrite history.
func tamper(t *testing.T, db testDB, stmt string, args ...any) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `ALTER TABLE transitions DISABLE TRIGGER USER`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, stmt, args...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			t.Fatalf("%s: %d rows affected, want 1", stmt, tag.RowsAffected())
		}
		_, err = tx.Exec(ctx, `ALTER TABLE transitions ENABLE TRIGGER USER`)
		return err
	})
	if err != nil {
		t.Fatalf("tamper: %v", err)
	}
}

func verify(t *testing.T, db testDB, f audit.Filter) audit.Report {
	t.Helper()
	rep, err := audit.Verify(context.Background(), db.pool, f)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestVerifyPassesOnUntouchedLedger(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	seed(t, db)
	rep := verify(t, db, audit.Filter{})
	if !rep.OK() || len(rep.Breaks) != 0 {
		t.Fatalf("untouched ledger: breaks %v", rep.Breaks)
	}
	if len(rep.Runs) != 3 || rep.Items != 9 || rep.Transitions != 16 {
		t.Fatalf("checked %d runs, %d items, %d transitions; want 3, 9, 16", len(rep.Runs), rep.Items, rep.Transitions)
	}
	for _, r := range rep.Runs {
		if len(r.Digest) != 64 {
			t.Errorf("run %s digest %q", r.RunID, r.Digest)
		}
	}

	// The digest is stable and changes when the run gains a transition.
	again := verify(t, db, audit.Filter{RunID: &runRerun})
	if len(again.Runs) != 1 || again.Runs[0].Digest != rep.Runs[1].Digest {
		t.Fatalf("digest of %s not stable: %+v vs %+v", runRerun, again.Runs, rep.Runs[1])
	}
	mustExec(t, db.pool, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, reason, actor)
		VALUES ($1, 'tx-1001', 'queued', 'retry_scheduled', 1, 'http_503', 'c')`, runRerun)
	mustExec(t, db.pool, `UPDATE items SET state = 'retry_scheduled' WHERE run_id = $1 AND transaction_id = 'tx-1001'`, runRerun)
	after := verify(t, db, audit.Filter{RunID: &runRerun})
	if !after.OK() || after.Runs[0].Digest == again.Runs[0].Digest || after.Transitions != 2 {
		t.Fatalf("after a new transition: ok=%v digest %s (was %s), transitions %d", after.OK(),
			after.Runs[0].Digest, again.Runs[0].Digest, after.Transitions)
	}
}

func TestVerifyFilters(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	seed(t, db)
	day := time.Date(2026, 10, 24, 23, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		f           audit.Filter
		runs, items int64
	}{
		{"date", audit.Filter{BusinessDate: &day}, 2, 8},
		{"run", audit.Filter{RunID: &runNext}, 1, 1},
		{"date and other run", audit.Filter{BusinessDate: &day, RunID: &runNext}, 0, 0},
	} {
		rep := verify(t, db, tc.f)
		if int64(len(rep.Runs)) != tc.runs || rep.Items != tc.items || !rep.OK() {
			t.Errorf("%s: %d runs, %d items, ok=%v; want %d, %d, true", tc.name, len(rep.Runs), rep.Items, rep.OK(), tc.runs, tc.items)
		}
	}
}

func TestVerifyFindsTampering(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		stmt string
		tx   string
		seq  int
		kind audit.Kind
	}{
		{"edited reason", `UPDATE transitions SET reason = 'matched' WHERE run_id = $1 AND transaction_id = 'tx-1006' AND seq = 2`,
			"tx-1006", 2, audit.KindHash},
		{"edited time", `UPDATE transitions SET at = at + interval '1 microsecond' WHERE run_id = $1 AND transaction_id = 'tx-1003' AND seq = 4`,
			"tx-1003", 4, audit.KindHash},
		{"edited details", `UPDATE transitions SET details = '{"body":"fine"}' WHERE run_id = $1 AND transaction_id = 'tx-1004' AND seq = 1`,
			"tx-1004", 1, audit.KindHash},
		{"deleted middle row", `DELETE FROM transitions WHERE run_id = $1 AND transaction_id = 'tx-1003' AND seq = 2`,
			"tx-1003", 2, audit.KindMissing},
		{"deleted last row", `DELETE FROM transitions WHERE run_id = $1 AND transaction_id = 'tx-1006' AND seq = 4`,
			"tx-1006", 4, audit.KindMissing},
		{"deleted only row", `DELETE FROM transitions WHERE run_id = $1 AND transaction_id = 'tx-1005'`,
			"tx-1005", 1, audit.KindMissing},
		{"inserted row", `INSERT INTO transitions (run_id, transaction_id, seq, from_state, to_state, attempt, reason, actor, prev_hash, hash)
			SELECT run_id, transaction_id, 2, 'matched', 'matched', 1, 'matched', 'x', hash, hash FROM transitions
			 WHERE run_id = $1 AND transaction_id = 'tx-1001'`,
			"tx-1001", 2, audit.KindExtra},
		{"relinked row", `UPDATE transitions SET prev_hash = NULL WHERE run_id = $1 AND transaction_id = 'tx-1004' AND seq = 3`,
			"tx-1004", 3, audit.KindPrevHash},
		{"forged state", `UPDATE items SET state = 'matched' WHERE run_id = $1 AND transaction_id = 'tx-1006'`,
			"tx-1006", 4, audit.KindState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			seed(t, db)
			tamper(t, db, tc.stmt, runNightly)
			rep := verify(t, db, audit.Filter{})
			if rep.OK() || rep.BrokenItems != 1 || len(rep.Breaks) != 1 {
				t.Fatalf("ok=%v broken=%d breaks=%v, want exactly one break", rep.OK(), rep.BrokenItems, rep.Breaks)
			}
			b := rep.Breaks[0]
			if b.RunID != runNightly || b.TransactionID != tc.tx || b.Seq != tc.seq || b.Kind != tc.kind {
				t.Fatalf("break %v, want run %s transaction %s seq %d kind %s", b, runNightly, tc.tx, tc.seq, tc.kind)
			}
			t.Log(b)
			// The other runs are still intact.
			if other := verify(t, db, audit.Filter{RunID: &runNext}); !other.OK() {
				t.Fatalf("untouched run reported broken: %v", other.Breaks)
			}
		})
	}
}

func TestVerifyFindsDeletedItem(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	seed(t, db)
	// An item without transitions can be deleted by the table owner; the
	// run's item count gives it away.
	mustExec(t, db.pool, `DELETE FROM items WHERE run_id = $1 AND transaction_id = 'tx-1001'`, runRerun)
	rep := verify(t, db, audit.Filter{})
	if rep.OK() || rep.BrokenRuns != 1 || len(rep.Breaks) != 1 || rep.Breaks[0].Kind != audit.KindItemCount ||
		rep.Breaks[0].RunID != runRerun {
		t.Fatalf("breaks %v (broken runs %d), want one item_count break of %s", rep.Breaks, rep.BrokenRuns, runRerun)
	}
}

func TestVerifyStreamsLargeRun(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	run := uuid.New()
	const n = 5000
	seeded := time.Now()
	for _, stmt := range []string{`
		INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count)
		VALUES ($1, 'nightly-2026-11-01', '2026-11-01', 1, 'cron', 't', 'x', '', 'UTC', $2)`, `
		INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard, state)
		SELECT $1, 'tx-' || g, 'acc-' || (g % 97), 'nightly-2026-11-01:tx-' || g, g, 'EUR', 'succeeded', now(), 0, 'matched'
		  FROM generate_series(1, $2::int) g`, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, http_status, reason, retry_after_ms, details, actor)
		SELECT $1, 'tx-' || g, 'queued', 'retry_scheduled', 1, 503, 'http_503', 400, '{"error":"ü \"quoted\"\ttab","n":[1.50,2e3]}', 'c'
		  FROM generate_series(1, $2::int) g`, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, http_status, reason, actor)
		SELECT $1, 'tx-' || g, 'retry_scheduled', 'matched', 2, 200, 'matched', 'c'
		  FROM generate_series(1, $2::int) g`,
	} {
		mustExec(t, db.pool, stmt, run, n)
	}
	start := time.Now()
	t.Logf("seeded in %v", start.Sub(seeded))
	rep := verify(t, db, audit.Filter{RunID: &run})
	t.Logf("verified %d transitions in %v", rep.Transitions, time.Since(start))
	if !rep.OK() || rep.Items != n || rep.Transitions != 2*n {
		t.Fatalf("ok=%v items=%d transitions=%d breaks=%v", rep.OK(), rep.Items, rep.Transitions, rep.Breaks)
	}
}

func TestGrantUnknownRole(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	err := audit.Grant(context.Background(), db.pool, "no_such_role_"+randomName())
	if !errors.Is(err, audit.ErrNoRole) {
		t.Fatalf("err = %v, want ErrNoRole", err)
	}
}

func randomName() string { return uuid.NewString()[:8] }

// BenchmarkVerify measures Verify over one run of 10,000 items with three
// transitions each; it reports transitions verified per second.
func BenchmarkVerify(b *testing.B) {
	conn := pgtest.ConnString(b)
	pool, err := pgxpool.New(context.Background(), conn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	ctx := context.Background()
	run := uuid.New()
	const n = 10000
	for _, stmt := range []string{`
		INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count)
		VALUES ($1, 'nightly-2026-11-02', '2026-11-02', 1, 'cron', 't', 'x', '', 'UTC', $2)`, `
		INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard, state)
		SELECT $1, 'tx-' || g, 'acc-' || (g % 97), 'nightly-2026-11-02:tx-' || g, g, 'EUR', 'succeeded', now(), 0, 'matched'
		  FROM generate_series(1, $2::int) g`, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, http_status, reason, retry_after_ms, details, actor)
		SELECT $1, 'tx-' || g, 'queued', 'retry_scheduled', 1, 429, 'throttled', 2000, '{"retry_after":"2"}', 'host:1'
		  FROM generate_series(1, $2::int) g`, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, http_status, reason, retry_after_ms, actor)
		SELECT $1, 'tx-' || g, 'retry_scheduled', 'retry_scheduled', 2, 503, 'http_503', 800, 'host:1'
		  FROM generate_series(1, $2::int) g`, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, http_status, reason, actor)
		SELECT $1, 'tx-' || g, 'retry_scheduled', 'matched', 3, 200, 'matched', 'host:1'
		  FROM generate_series(1, $2::int) g`,
	} {
		if _, err := pool.Exec(ctx, stmt, run, n); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		rep, err := audit.Verify(ctx, pool, audit.Filter{RunID: &run})
		if err != nil || !rep.OK() || rep.Transitions != 3*n {
			b.Fatalf("err=%v ok=%v transitions=%d", err, rep.OK(), rep.Transitions)
		}
	}
	b.ReportMetric(float64(3*n*b.N)/b.Elapsed().Seconds(), "transitions/s")
}
