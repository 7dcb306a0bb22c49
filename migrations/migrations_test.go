package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.ConnString(t)
	// The template was migrated already: a second run applies nothing.
	r, err := migrations.Up(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Applied) != 0 {
		t.Fatalf("second Up applied %v, want nothing", r.Applied)
	}
	if r.Current == 0 {
		t.Fatal("schema version is 0 after Up")
	}
}

func TestEveryTableAndColumnIsCommented(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname || coalesce('.' || a.attname, '')
		  FROM pg_class c
		  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		 WHERE c.relkind IN ('r', 'v') AND c.relname NOT LIKE 'goose%'
		   AND col_description(c.oid, coalesce(a.attnum, 0)) IS NULL
		   AND (a.attnum IS NOT NULL OR obj_description(c.oid, 'pg_class') IS NULL)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		t.Errorf("no COMMENT ON %s", name)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCommentsSpeakOfThePaymentFile keeps the auditors' comments in the
// project's words: the expected record is the payment file's (a source
// whose owner the project does not know), not "the game's".
func TestCommentsSpeakOfThePaymentFile(t *testing.T) {
	t.Parallel()
	pool := pgtest.New(t)
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname || coalesce('.' || a.attname, ''), d.description
		  FROM pg_description d
		  JOIN pg_class c ON c.oid = d.objoid AND d.classoid = 'pg_class'::regclass
		  LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.objsubid AND d.objsubid > 0
		 WHERE d.description ~* '\mgame'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, comment string
		if err := rows.Scan(&name, &comment); err != nil {
			t.Fatal(err)
		}
		t.Errorf("COMMENT ON %s speaks of a game: %q", name, comment)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestTransitionsAreAppendOnlyAndChained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	_, err := pool.Exec(ctx, `
		INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256, time_zone, item_count)
		VALUES ('00000000-0000-0000-0000-000000000001', 'nightly-2026-10-24', '2026-10-24', 1, 'manual', 'test', 'x.csv', '', 'UTC', 1);
		INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard)
		VALUES ('00000000-0000-0000-0000-000000000001', 'tx1', 'acc', 'nightly-2026-10-24:tx1', 100, 'EUR', 'succeeded', now(), 0);
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, reason, actor)
		VALUES ('00000000-0000-0000-0000-000000000001', 'tx1', 'queued', 'retry_scheduled', 1, 'http_503', 'test'),
		       ('00000000-0000-0000-0000-000000000001', 'tx1', 'retry_scheduled', 'matched', 2, 'matched', 'test');`)
	if err != nil {
		t.Fatal(err)
	}
	var seq int
	var chained bool
	err = pool.QueryRow(ctx, `
		SELECT t2.seq, t2.prev_hash = t1.hash AND i.history_head = t2.hash AND i.history_len = 2
		  FROM transitions t1 JOIN transitions t2 ON t2.seq = t1.seq + 1
		  JOIN items i ON i.transaction_id = t2.transaction_id`).Scan(&seq, &chained)
	if err != nil {
		t.Fatal(err)
	}
	if seq != 2 || !chained {
		t.Fatalf("seq=%d chained=%v, want 2 true", seq, chained)
	}
	for _, stmt := range []string{
		`UPDATE transitions SET reason = 'x'`,
		`DELETE FROM transitions`,
		`TRUNCATE transitions CASCADE`,
	} {
		_, err := pool.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s: err = %v, want insufficient_privilege", stmt, err)
		}
	}
}
