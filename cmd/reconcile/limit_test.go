package main

import (
	"context"
	"os/user"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/pgtest"
)

// TestLimitSetRecordsWhoAndWhy: a limit change is an operator's action, so
// the limiter's history names who made it and why.
func TestLimitSetRecordsWhoAndWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.ConnString(t)
	e, out := envOn(url)
	err := run(ctx, []string{"limit", "set", "--rate", "20", "--burst", "4", "--reason", "provider halved our quota"},
		e.getenv, e.stdin, e.stdout, e.stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "rate 20/s, burst 4") {
		t.Errorf("limit set printed %q", out.String())
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var cause, actor, reason string
	var rate float64
	if err := conn.QueryRow(ctx, `SELECT cause, rate, actor, reason FROM rate_limiter_history
		WHERE limiter = 'provider' ORDER BY id DESC LIMIT 1`).Scan(&cause, &rate, &actor, &reason); err != nil {
		t.Fatal(err)
	}
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	if cause != "limit set" || rate != 20 || !strings.HasPrefix(actor, me.Username+"@") || reason != "provider halved our quota" {
		t.Errorf("history row: cause %q, rate %g, actor %q, reason %q", cause, rate, actor, reason)
	}
	// For a while: limit show says until when and what comes back.
	out.Reset()
	if err := run(ctx, []string{"limit", "set", "--rate", "5", "--for", "30m"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"limit", "show"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "for 30m0s, then back to what it was") || !strings.Contains(out.String(), "then rate 20/s, burst 4") {
		t.Errorf("limit set --for and limit show printed:\n%s", out.String())
	}
	err = run(ctx, []string{"limit", "set", "--rate", "5", "--for", "-1m"}, e.getenv, e.stdin, e.stdout, e.stderr)
	if code := exitCode(err, &strings.Builder{}); code != 2 {
		t.Errorf("limit set --for -1m: exit %d (%v), want 2", code, err)
	}
}

// TestLimitShowSaysTheRefusals: once the provider has refused the limit
// set, limit show says how often (the limit is trusted until a second
// refusal) and limit show --json carries the count.
func TestLimitShowSaysTheRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.ConnString(t)
	e, out := envOn(url)
	if err := run(ctx, []string{"limit", "set", "--rate", "20", "--burst", "4"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	l, err := limiter.Open(ctx, pool, limiter.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Throttled(ctx, 0, limiter.RateLimited); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"limit", "show"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "refused:        1 times since it was set (trusted until refused twice)") ||
		!strings.Contains(out.String(), "effective rate: 20/s") {
		t.Errorf("limit show after one refusal printed:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"limit", "show", "--json"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"refusals": 1`) {
		t.Errorf("limit show --json after one refusal printed:\n%s", out.String())
	}
}
