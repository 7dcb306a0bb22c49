package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

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
