package report

import "testing"

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
	if got := fmtWaiting(QueueStatus{Available: 1, OldestWaitingSeconds: 0.2}); got != "0s" {
		t.Errorf("one just published: oldest waiting %q, want 0s", got)
	}
}
