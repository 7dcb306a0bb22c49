package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFmtPercentAndWaiting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    float64
		done bool
		want string
	}{
		{100 * 2999.0 / 3000, false, "99.9%"},
		{100 * 1.0 / 3000, false, "0.0%"},
		{50, false, "50.0%"},
		{100, true, "100.0%"},
	} {
		if got := fmtPercent(tt.p, tt.done); got != tt.want {
			t.Errorf("fmtPercent(%v, %v) = %q, want %q", tt.p, tt.done, got, tt.want)
		}
	}
	if got := fmtWaiting(QueueStatus{Delayed: 3}); got != "-" {
		t.Errorf("nothing available: oldest waiting %q, want -", got)
	}
	if got := fmtWaiting(QueueStatus{Available: 1, OldestWaitingSeconds: 0.2}); got != "200ms" {
		t.Errorf("one just published: oldest waiting %q, want 200ms", got)
	}
}

// TestStatusWritesHumanUnits writes a status with the rates a limiter
// really holds: three significant digits, and a unit that keeps a tiny rate
// readable, not every digit of a float.
func TestStatusWritesHumanUnits(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)
	eta := 5025.0
	st := Status{Now: at, Limiter: LimiterStatus{Name: "provider", ConfiguredRate: 50, Burst: 50, EffectiveRate: 39.68588065580161,
		Throttles: 12345, History: []LimiterChange{{At: at, Cause: "estimate", Rate: 0.000011458333333333333, Estimate: 41.123456}}},
		Runs: []RunStatus{{ReconciliationID: "nightly-2026-10-24", Items: 200000, Open: 1000, States: StateCounts{Matched: 199000, Queued: 1000},
			ETASeconds: &eta, EstimatedCompletion: &at, CreatedAt: at, ProviderCalls: 201234}}}
	var buf bytes.Buffer
	if err := st.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"configured 50/s (burst 50), effective 39.7/s, 12,345 throttles", "rate 0.99/day, provider estimated at 41.1/s",
		"items     200,000: 199,000 matched", "201,234 provider calls", "eta       1h24m at the effective 39.7/s (configured 50/s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}
