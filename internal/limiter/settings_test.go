package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/pgtest"
)

// TestTemporarySettingsExpire sets a limit for a while twice and a plain one
// after: the first temporary change keeps the settings to return to, the
// second keeps the same ones, the expiry restores them once (whichever
// consumer gets there) and says so in the history, and a plain change
// cancels a pending restore.
func TestTemporarySettingsExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.New(t)
	by := SetBy{Actor: "alice@ops", Reason: "provider incident"}
	if err := SaveSettings(ctx, pool, "p", Settings{Rate: 50, Burst: 10}, by); err != nil {
		t.Fatal(err)
	}
	by.For = time.Hour
	for _, s := range []Settings{{Rate: 5, Burst: 1}, {Rate: 2, Burst: 1}} {
		if err := SaveSettings(ctx, pool, "p", s, by); err != nil {
			t.Fatal(err)
		}
	}
	st, err := LoadState(ctx, pool, "p")
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings != (Settings{Rate: 2, Burst: 1}) || st.Restore != (Settings{Rate: 50, Burst: 10}) ||
		st.ExpiresAt.Sub(st.SettingsUpdatedAt) < 59*time.Minute {
		t.Fatalf("after two temporary changes: %+v", st)
	}
	if n, err := ExpireSettings(ctx, pool); err != nil || n != 0 {
		t.Fatalf("ExpireSettings before the expiry = %d, %v", n, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE rate_limiters SET settings_expire_at = now() - interval '1 second' WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		if n, err := ExpireSettings(ctx, pool); err != nil || n != want {
			t.Fatalf("ExpireSettings call %d = %d, %v; want %d", i, n, err, want)
		}
	}
	st, err = LoadState(ctx, pool, "p")
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings != (Settings{Rate: 50, Burst: 10}) || st.EffectiveRate != 50 || !st.ExpiresAt.IsZero() {
		t.Fatalf("after the expiry: %+v", st)
	}
	var detail, actor string
	if err := pool.QueryRow(ctx, `SELECT detail, actor FROM rate_limiter_history WHERE limiter = 'p' ORDER BY id DESC LIMIT 1`).
		Scan(&detail, &actor); err != nil {
		t.Fatal(err)
	}
	if detail != "rate 50/s, burst 10 restored: the temporary limit expired" || actor != "reconcile" {
		t.Errorf("history of the expiry: %q by %q", detail, actor)
	}

	// A plain change cancels a pending restore.
	if err := SaveSettings(ctx, pool, "p", Settings{Rate: 5, Burst: 1}, by); err != nil {
		t.Fatal(err)
	}
	if err := SaveSettings(ctx, pool, "p", Settings{Rate: 30, Burst: 3}, SetBy{Actor: "bob@ops"}); err != nil {
		t.Fatal(err)
	}
	if st, err := LoadState(ctx, pool, "p"); err != nil || !st.ExpiresAt.IsZero() || st.Restore != (Settings{}) {
		t.Fatalf("after a plain change: %+v, %v", st, err)
	}
	if err := SaveSettings(ctx, pool, "p", Settings{Rate: 5, Burst: 1}, SetBy{For: -time.Second}); err == nil {
		t.Error("a negative For was accepted")
	}
}
