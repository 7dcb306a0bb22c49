package audit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/reconcile/reconcile/internal/audit"
)

// ledgerRelations are what reconcile_auditor may read: the ledger tables and
// the auditor views. Everything else in the schema is off limits, but for
// the scheduler's tick record (when and why a night's run was or was not
// enqueued), which the seed leaves empty.
var ledgerRelations = []string{
	"runs", "items", "transitions", "run_shards", "account_progress", "run_completions", "account_completions",
	"completion_rounds", "run_breakdown", "notifications", "notification_deliveries", "provider_records", "run_listings",
	"run_summary", "discrepancies", "dead_lettered_items", "account_completion", "transaction_history",
}

// loginAs creates a LOGIN role with a unique name (roles are cluster-wide and
// tests run in parallel), lets setup give it rights, and connects as it.
func loginAs(t *testing.T, db testDB, setup func(role string)) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	role := "audit_test_" + strings.ReplaceAll(randomName(), "-", "")
	mustExec(t, db.pool, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	t.Cleanup(func() {
		if _, err := db.pool.Exec(context.WithoutCancel(ctx), "DROP ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	setup(role)
	cfg, err := pgx.ParseConfig(db.conn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	cfg.Password = ""
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(ctx)) })
	return conn
}

// loginAsAuditor grants the auditor role with the code `reconcile audit
// grant` runs.
func loginAsAuditor(t *testing.T, db testDB) *pgx.Conn {
	t.Helper()
	return loginAs(t, db, func(role string) {
		if err := audit.Grant(context.Background(), db.pool, role); err != nil {
			t.Fatal(err)
		}
		// Granting twice is harmless.
		if err := audit.Grant(context.Background(), db.pool, role); err != nil {
			t.Fatal(err)
		}
	})
}

func wantDenied(t *testing.T, conn *pgx.Conn, stmt string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), stmt)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("%s: err = %v, want insufficient_privilege (42501)", stmt, err)
		return
	}
	// The refusal comes from privileges, not from the append-only trigger.
	if !strings.Contains(pgErr.Message, "permission denied") && !strings.Contains(pgErr.Message, "must be owner") {
		t.Errorf("%s: refused by %q, want a permission check", stmt, pgErr.Message)
	}
}

func TestAuditorReadsLedgerOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	seed(t, db)
	// Stand-ins for the queue's and the limiter's tables and functions, made
	// after the migrations the way a later migration would.
	mustExec(t, db.pool, `CREATE TABLE stand_in_queue (id bigint PRIMARY KEY, body text)`)
	mustExec(t, db.pool, `CREATE FUNCTION stand_in_claim() RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'`)
	auditor := loginAsAuditor(t, db)

	for _, rel := range ledgerRelations {
		var n int64
		if err := auditor.QueryRow(ctx, "SELECT count(*) FROM "+rel).Scan(&n); err != nil {
			t.Errorf("auditor cannot read %s: %v", rel, err)
		} else if n == 0 {
			t.Errorf("auditor reads no rows from %s", rel)
		}
	}
	for _, table := range []string{"runs", "items", "transitions"} {
		wantDenied(t, auditor, "INSERT INTO "+table+" DEFAULT VALUES")
		wantDenied(t, auditor, "UPDATE "+table+" SET run_id = run_id")
		wantDenied(t, auditor, "DELETE FROM "+table)
		wantDenied(t, auditor, "TRUNCATE "+table+" CASCADE")
	}
	wantDenied(t, auditor, "SELECT * FROM stand_in_queue")
	wantDenied(t, auditor, "SELECT stand_in_claim()")
	wantDenied(t, auditor, "CREATE TABLE auditor_scratch (x int)")

	// Privilege by privilege, over every table and function in the schema,
	// whoever created them: SELECT on the ledger, EXECUTE on the read-only
	// transition_payload, nothing else.
	rows, err := auditor.Query(ctx, `
		SELECT c.relname, p.priv
		  FROM pg_class c
		  JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
		 CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER']) p(priv)
		 WHERE c.relkind IN ('r', 'v', 'm', 'p', 'f', 'S')
		   AND has_table_privilege(c.oid, p.priv)
		UNION ALL
		SELECT p.proname || '()', 'EXECUTE'
		  FROM pg_proc p
		  JOIN pg_namespace n ON n.oid = p.pronamespace AND n.nspname = 'public'
		 WHERE has_function_privilege(p.oid, 'EXECUTE')`)
	if err != nil {
		t.Fatal(err)
	}
	granted := map[string]bool{}
	for rows.Next() {
		var rel, priv string
		if err := rows.Scan(&rel, &priv); err != nil {
			t.Fatal(err)
		}
		granted[rel+" "+priv] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"transition_payload() EXECUTE": true, "schedule_ticks SELECT": true}
	for _, rel := range ledgerRelations {
		want[rel+" SELECT"] = true
	}
	for g := range granted {
		if !want[g] {
			t.Errorf("auditor has %s", g)
		}
	}
	for w := range want {
		if !granted[w] {
			t.Errorf("auditor lacks %s", w)
		}
	}
}

func TestAppRoleAppendsButCannotRewriteHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	seed(t, db)
	app := loginAs(t, db, func(role string) {
		mustExec(t, db.pool, "GRANT reconcile_app TO "+pgx.Identifier{role}.Sanitize())
	})
	// What the consumer does: a state change and its transition.
	if _, err := app.Exec(ctx, `UPDATE items SET state = 'retry_scheduled', attempts = 1
		WHERE run_id = $1 AND transaction_id = 'tx-1001' AND state = 'queued'`, runRerun); err != nil {
		t.Fatalf("app cannot update items: %v", err)
	}
	if _, err := app.Exec(ctx, `INSERT INTO transitions (run_id, transaction_id, from_state, to_state, attempt, http_status, reason, actor)
		VALUES ($1, 'tx-1001', 'queued', 'retry_scheduled', 1, 503, 'http_503', 'c')`, runRerun); err != nil {
		t.Fatalf("app cannot append a transition: %v", err)
	}
	wantDenied(t, app, "UPDATE transitions SET reason = 'matched'")
	wantDenied(t, app, "DELETE FROM transitions")
	wantDenied(t, app, "TRUNCATE transitions")
	wantDenied(t, app, "ALTER TABLE transitions DISABLE TRIGGER USER")
	if rep := verify(t, db, audit.Filter{}); !rep.OK() {
		t.Fatalf("after the app's transition: %v", rep.Breaks)
	}
}
