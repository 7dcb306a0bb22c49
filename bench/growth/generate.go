package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// shape is the generated ledger: runs nightly runs of items each, on the
// dates before first (the last one the day before), every item with 1 to 4
// transitions (2.5 on average), and the acked queue messages of the last
// acked runs (what a 90-day prune keeps).
type shape struct {
	runs, items, acked int
	before             time.Time // the day after the last generated date
}

// generate fills db with the shape in SQL. The transitions' hash-chain
// trigger (and the foreign keys' triggers) would cost a row lookup and an
// item update per transition, so they are switched off for the session
// (session_replication_role = replica, as the cluster's superuser): the
// rows are consistent by construction but their chains are not real ones,
// and `audit verify` of a generated date fails. Durability is off meanwhile
// (fsync, synchronous_commit, full_page_writes, reloaded), and back on,
// with a checkpoint, before anything is measured.
func generate(ctx context.Context, conn *pgx.Conn, s shape, step func(string, time.Duration)) error {
	first := s.before.AddDate(0, 0, -s.runs)
	// A fixed 32-byte value gives hash columns their real width.
	const hash = `'\x` + "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" + `'::bytea`
	type stmt struct {
		name string
		sql  string
		args pgx.StrictNamedArgs
	}
	stmts := []stmt{
		{"runs", `
INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256,
                  time_zone, item_count, created_at, completed_at)
SELECT gen_random_uuid(), 'nightly-' || d::date, d::date, 1, 'cron', 'bench', 'generated', '', 'UTC', @items,
       d + interval '26 hours', d + interval '27 hours'
  FROM generate_series(@first::date, @last::date, interval '1 day') d`,
			pgx.StrictNamedArgs{"items": s.items, "first": first, "last": s.before.AddDate(0, 0, -1)}},
	}
	// Items and transitions fifty runs to a statement, so that progress shows.
	for lo := 0; lo < s.runs; lo += 50 {
		from, to := first.AddDate(0, 0, lo), first.AddDate(0, 0, min(lo+50, s.runs)-1)
		batch := pgx.StrictNamedArgs{"from": from, "to": to, "items": s.items}
		stmts = append(stmts, stmt{fmt.Sprintf("items of runs %d-%d", lo+1, min(lo+50, s.runs)), `
INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at,
                   shard, state, attempts, throttles, provider_amount_minor, provider_currency, provider_status,
                   last_http_status, last_reason, first_attempt_at, updated_at, terminal_at, history_len, history_head)
SELECT r.run_id, t.id, 'acct_' || (i % 500), r.reconciliation_id || ':' || t.id, 100 + i % 100000, 'EUR', 'succeeded',
       r.business_date + (i % 86400) * interval '1 second', i % 16, t.state, 1 + i % 4, 0, 100 + i % 100000, 'EUR',
       'succeeded', 200, t.state, r.created_at, r.completed_at, r.completed_at, 1 + i % 4, ` + hash + `
  FROM runs r CROSS JOIN generate_series(1, @items) i
 CROSS JOIN LATERAL (SELECT 'tx_' || to_char(r.business_date, 'YYYYMMDD') || '_' || lpad(i::text, 6, '0') AS id,
                            CASE i % 100 WHEN 0 THEN 'mismatched' WHEN 1 THEN 'missing' WHEN 2 THEN 'dead_lettered'
                                         ELSE 'matched' END AS state) t
 WHERE r.business_date BETWEEN @from AND @to AND r.source = 'generated'`, batch})
		stmts = append(stmts, stmt{fmt.Sprintf("transitions of runs %d-%d", lo+1, min(lo+50, s.runs)), `
INSERT INTO transitions (run_id, transaction_id, seq, from_state, to_state, at, attempt, http_status, reason,
                         retry_after_ms, actor, prev_hash, hash)
SELECT i.run_id, i.transaction_id, n, CASE WHEN n = 1 THEN 'queued' ELSE 'retry_scheduled' END,
       CASE WHEN n = i.history_len THEN i.state ELSE 'retry_scheduled' END, i.first_attempt_at + n * interval '1 second',
       n, CASE WHEN n = i.history_len THEN 200 ELSE 503 END,
       CASE WHEN n = i.history_len THEN i.state ELSE 'transient' END, CASE WHEN n < i.history_len THEN 1000 END, 'bench',
       CASE WHEN n > 1 THEN ` + hash + ` END, ` + hash + `
  FROM runs r JOIN items i USING (run_id) CROSS JOIN LATERAL generate_series(1, i.history_len) n
 WHERE r.business_date BETWEEN @from AND @to AND r.source = 'generated'`, pgx.StrictNamedArgs{"from": from, "to": to}})
	}
	totals := `count(*) FILTER (WHERE state = 'matched'), count(*) FILTER (WHERE state = 'mismatched'),
       count(*) FILTER (WHERE state = 'missing'), count(*) FILTER (WHERE state = 'dead_lettered'), sum(attempts), sum(throttles)`
	stmts = append(stmts,
		stmt{"run_shards", `
INSERT INTO run_shards (run_id, shard, remaining, matched, mismatched, missing, dead_lettered, provider_calls, throttles)
SELECT run_id, shard, 0, ` + totals + ` FROM items GROUP BY run_id, shard`, nil},
		stmt{"account_progress", `
INSERT INTO account_progress (run_id, account_id, item_count, remaining, matched, mismatched, missing, dead_lettered,
                              provider_calls, throttles)
SELECT run_id, account_id, count(*), 0, ` + totals + ` FROM items GROUP BY run_id, account_id`, nil},
		stmt{"run_completions", `
INSERT INTO run_completions (run_id, items, matched, mismatched, missing, dead_lettered, provider_calls, throttles,
                             completed_at, completed_by)
SELECT run_id, item_count, matched, mismatched, missing, dead_lettered, provider_calls, throttles, r.completed_at, 'bench'
  FROM runs r JOIN (SELECT run_id, sum(matched) AS matched, sum(mismatched) AS mismatched, sum(missing) AS missing,
                           sum(dead_lettered) AS dead_lettered, sum(provider_calls) AS provider_calls,
                           sum(throttles) AS throttles
                      FROM run_shards GROUP BY run_id) s USING (run_id)`, nil},
		stmt{"account_completions", `
INSERT INTO account_completions (run_id, account_id, items, matched, mismatched, missing, dead_lettered, provider_calls,
                                 throttles, completed_at, completed_by)
SELECT p.run_id, p.account_id, p.item_count, p.matched, p.mismatched, p.missing, p.dead_lettered, p.provider_calls,
       p.throttles, r.completed_at, 'bench'
  FROM account_progress p JOIN runs r USING (run_id)`, nil},
		stmt{"acked queue messages", `
INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, attempt, state, visible_at,
                            deliveries, enqueued_at, changed_at)
SELECT i.run_id, r.reconciliation_id, i.transaction_id, i.idempotency_key, i.attempts, 'acked', r.completed_at,
       i.attempts, r.created_at, r.completed_at
  FROM runs r JOIN items i USING (run_id)
 WHERE r.business_date >= @from AND r.source = 'generated'`, pgx.StrictNamedArgs{"from": s.before.AddDate(0, 0, -s.acked)}},
	)

	for _, sql := range []string{
		`ALTER SYSTEM SET fsync = off`, `ALTER SYSTEM SET synchronous_commit = off`, `ALTER SYSTEM SET full_page_writes = off`,
		`ALTER SYSTEM SET max_wal_size = '8GB'`, `SELECT pg_reload_conf()`, `SET session_replication_role = replica`,
		`SET maintenance_work_mem = '512MB'`, `SET work_mem = '256MB'`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	for _, st := range stmts {
		t0 := time.Now()
		var args []any
		if st.args != nil {
			args = []any{st.args}
		}
		if _, err := conn.Exec(ctx, st.sql, args...); err != nil {
			return fmt.Errorf("generate %s: %w", st.name, err)
		}
		step(st.name, time.Since(t0))
	}
	for _, sql := range []string{
		`SET session_replication_role = DEFAULT`, `VACUUM (ANALYZE)`, `CHECKPOINT`,
		`ALTER SYSTEM RESET fsync`, `ALTER SYSTEM RESET synchronous_commit`, `ALTER SYSTEM RESET full_page_writes`,
		`ALTER SYSTEM RESET max_wal_size`,
		`SELECT pg_reload_conf()`, `CHECKPOINT`,
	} {
		t0 := time.Now()
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
		if sql == `VACUUM (ANALYZE)` {
			step("vacuum analyze", time.Since(t0))
		}
	}
	return nil
}
