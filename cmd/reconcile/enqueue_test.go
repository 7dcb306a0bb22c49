package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnqueueEstimatesAtEachProvidersLimit enqueues a night of two
// providers whose limits only the providers file states (no consumer has
// stored them yet): the estimate is each provider's items at its own rate,
// the slowest setting the time, not every item at the default 10/s.
func TestEnqueueEstimatesAtEachProvidersLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, _ := testEnv(t)
	dir := t.TempDir()
	providers := filepath.Join(dir, "providers.json")
	if err := os.WriteFile(providers, []byte(`{"default": "cards", "providers": {
  "cards": {"profile": "reconcile", "url": "http://127.0.0.1:1", "rate": 50},
  "wallet": {"profile": "reconcile", "url": "http://127.0.0.1:2", "rate": 20}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var day strings.Builder
	day.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at,provider\n")
	for i := range 3000 {
		p := "cards"
		if i%3 == 0 {
			p = "wallet" // 1,000 wallet items at 20/s: 50 s; 2,000 cards items at 50/s: 40 s
		}
		fmt.Fprintf(&day, "tx%d,acc,100,EUR,succeeded,2026-10-24T10:00:00Z,%s\n", i, p)
	}
	src := filepath.Join(dir, "day.csv")
	if err := os.WriteFile(src, []byte(day.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-24", "--source", src, "--providers", providers, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	out := stdout.String()
	for _, want := range []string{"3,000 items enqueued", "consumers need 50s",
		"wallet 1,000 items at the providers file's 20/s (50s)", "cards 2,000 items at the providers file's 50/s (40s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("enqueue printed %q, want %q in it", out, want)
		}
	}
	// Without a providers file: the default limiter, not stored yet.
	plain := filepath.Join(dir, "plain.csv")
	if err := os.WriteFile(plain, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+
		"p1,acc,100,EUR,succeeded,2026-10-25T10:00:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-25", "--source", plain, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "a consumer needs 100ms at the default 10/s") {
		t.Errorf("enqueue without a providers file printed %q", stdout)
	}
}

func TestBusinessDate(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 00:30 in Berlin on the 26th is still the 25th in UTC; the day after
	// the fall-back night is 25 hours long.
	now := time.Date(2026, 10, 26, 0, 30, 0, 0, berlin)
	for _, tc := range []struct {
		in, want string
		now      time.Time
	}{
		{"yesterday", "2026-10-25", now},
		{"today", "2026-10-26", now},
		{"yesterday", "2026-10-24", now.UTC()},
		{"2026-10-24", "2026-10-24", now},
		{"tomorrow", "", now},
		{"2026-13-01", "", now},
	} {
		d, err := businessDate(tc.in, tc.now)
		if tc.want == "" {
			if err == nil {
				t.Errorf("businessDate(%q) = %s, want an error", tc.in, d)
			}
			continue
		}
		if err != nil || d.String() != tc.want {
			t.Errorf("businessDate(%q, %v) = %s, %v; want %s", tc.in, tc.now, d, err, tc.want)
		}
	}
}
