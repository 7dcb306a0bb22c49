package console

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/metrics"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/migrations"
)

// consolePool connects to b's database as a new login role granted
// reconcile_console with the code `reconcile audit grant --console` runs.
func consolePool(t *testing.T, b *testBundle) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	role := "console_test_" + strings.ToLower(rand.Text())
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := b.pool.Exec(ctx, "CREATE ROLE "+ident+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(ctx)
		_, _ = b.pool.Exec(ctx, "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM "+ident)
		if _, err := b.pool.Exec(ctx, "DROP OWNED BY "+ident+"; DROP ROLE "+ident); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if err := audit.GrantConsole(ctx, b.pool, role); err != nil {
		t.Fatal(err)
	}
	cfg := b.pool.Config().Copy()
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, ""
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestConsoleRoleActsWithinItsGrants runs the console as a role granted
// only reconcile_console: every page, export and action works, and so do
// the metrics `reconcile ui --metrics-addr` serves (so the grants are
// enough), and what none of them does is refused by the database (so they
// are not more).
func TestConsoleRoleActsWithinItsGrants(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	ctx := context.Background()
	pool := consolePool(t, b)
	h := newHandler(t, Config{Pool: pool, Auth: htpasswd(t), Queue: queue.New(pool, queue.Config{}),
		OpenSource: func(string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(fixtureDay)), nil }})
	b.h = h
	if err := migrations.Check(ctx, pool); err != nil {
		t.Errorf("reconcile ui's schema check as reconcile_console: %v", err)
	}
	wantStatus(t, b.do(t, "POST", "/login", "", url.Values{"user": {"alice"}, "password": {"wrong"}}, "Origin", "http://console.test"),
		http.StatusUnauthorized, "a failed login as reconcile_console")
	alice := b.login(t, "alice")
	run := "/runs/" + b.runID.String()
	same := []string{"Origin", "http://console.test"}
	for _, page := range []string{"/", run, run + "/discrepancies?outcome=all", run + "/dead-letters", run + "/tx/tx_d",
		"/tx?id=tx_b", "/limits", "/audit", "/audit?run=" + b.runID.String(), "/audit/bundle?run=" + b.runID.String(),
		run + "/discrepancies?outcome=all&format=csv", run + "/dead-letters?format=json",
		run + "/redrive?all=1", run + "/rerun?mode=failed", run + "/rerun?mode=all", run + "/cancel",
		"/limits/provider/set?rate=7", "/readyz"} {
		w := b.do(t, "GET", page, alice, nil)
		if w.Code != http.StatusOK && w.Code != http.StatusSeeOther {
			t.Errorf("GET %s as reconcile_console: %d\n%s", page, w.Code, w.Body)
		}
	}
	for _, a := range []struct {
		target string
		form   url.Values
	}{
		{"/limits/provider", url.Values{"rate": {"7"}, "burst": {"2"}, "note": {"incident"}}},
		{"/limits/provider", url.Values{"rate": {"8"}, "burst": {"2"}, "for": {"1h"}, "note": {"again, for a while"}}},
		{run + "/cancel", url.Values{"note": {"wrong export"}}},                     // tx_f: completes the run, round 1
		{run + "/redrive", url.Values{"id": {b.deadMessage(t)}, "note": {"fixed"}}}, // reopens it
		{run + "/cancel", url.Values{"note": {"still wrong"}}},                      // tx_d: round 2
		{run + "/rerun", url.Values{"mode": {"failed"}, "note": {"try the dead letters again"}}},
		{run + "/rerun", url.Values{"mode": {"all"}, "note": {"check everything again"}}}, // generation 2
		{run + "/rerun", url.Values{"mode": {"all"}, "note": {"and again"}}},              // 3, superseding 2's open items
		{"/logout", url.Values{}},
	} {
		w := b.do(t, "POST", a.target, alice, a.form, same...)
		if w.Code != http.StatusOK && w.Code != http.StatusSeeOther {
			t.Errorf("POST %s as reconcile_console: %d\n%s", a.target, w.Code, w.Body)
		}
	}
	// The database's metrics, as `reconcile ui --metrics-addr` serves them:
	// a read the role may not make is an invalid metric, which Gather
	// returns.
	if _, err := metrics.NewRegistry(metrics.Config{Queue: queue.New(pool, queue.Config{}), DB: pool}).Gather(); err != nil {
		t.Errorf("the metrics of reconcile ui as reconcile_console: %v", err)
	}
	var generations, round int
	if err := b.pool.QueryRow(ctx, `SELECT count(*), (SELECT round FROM run_completions WHERE run_id = $1)
		FROM runs WHERE business_date = '2026-10-24'`, b.runID).Scan(&generations, &round); err != nil || generations != 3 || round != 2 {
		t.Errorf("%d generations and a completion round %d after the actions (%v), want 3 and 2", generations, round, err)
	}

	for _, stmt := range []string{
		`UPDATE transitions SET reason = 'matched'`,
		`DELETE FROM transitions`,
		`DELETE FROM items`,
		`UPDATE items SET amount_minor = 1`,
		`UPDATE items SET transaction_id = 'x'`,
		`DELETE FROM runs`,
		`UPDATE runs SET business_date = '2026-01-01'`,
		`UPDATE runs SET triggered_by = 'someone else'`,
		`DELETE FROM queue_messages`,
		`TRUNCATE queue_messages`,
		`UPDATE queue_messages SET idempotency_key = 'x'`,
		`DELETE FROM run_completions`,
		`UPDATE run_completions SET matched = 0`,
		`DELETE FROM rate_limiter_history`,
		`UPDATE rate_limiter_history SET reason = 'x'`,
		`DELETE FROM rate_limiters`,
		`DELETE FROM consumers`,
		`UPDATE provider_circuits SET opened_at = now()`,
		`DELETE FROM notifications`,
		`SELECT * FROM notification_deliveries WHERE lease IS NOT NULL FOR UPDATE`,
		`INSERT INTO schedule_ticks DEFAULT VALUES`,
		`UPDATE console_sessions SET expires_at = now()`,
		`DELETE FROM goose_db_version`,
		`CREATE TABLE console_scratch (x int)`,
		`ALTER TABLE transitions DISABLE TRIGGER USER`,
	} {
		_, err := pool.Exec(ctx, stmt)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%s as reconcile_console: err = %v, want insufficient_privilege (42501)", stmt, err)
		}
	}
}
