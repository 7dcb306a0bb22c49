package limiter

import (
	"testing"
	"time"
)

func TestResetBound(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	// The window resets at +10.3 s; answers say t rounded up.
	reset := t0.Add(10300 * ms)
	var b resetBound
	for _, tt := range []struct {
		at   time.Duration
		want time.Duration // the narrowed reset, from t0
	}{
		{0, 11 * time.Second},    // t=11
		{800 * ms, 10800 * ms},   // t=10: (9.8, 10.8]
		{7400 * ms, 10400 * ms},  // t=3: (9.4, 10.4]
		{9350 * ms, 10350 * ms},  // t=1: (9.35, 10.35]
		{10500 * ms, 20500 * ms}, // the next window: t=10 from 10.5 s
	} {
		now := t0.Add(tt.at)
		r := reset
		if now.After(reset) {
			r = reset.Add(10 * time.Second)
		}
		secs := time.Duration((r.Sub(now) + time.Second - 1) / time.Second * time.Second)
		got := b.refine(Hints{Reset: now.Add(secs)})
		if !got.Reset.Equal(t0.Add(tt.want)) {
			t.Errorf("at +%v (t=%v): reset +%v, want +%v", tt.at, secs, got.Reset.Sub(t0), tt.want)
		}
		if got.Reset.Before(r) {
			t.Errorf("at +%v: reset +%v is before the real one +%v", tt.at, got.Reset.Sub(t0), r.Sub(t0))
		}
	}
}

// TestResetBoundFollowsTheCountLeft drives a window of one second that
// resets at +0.3 s of every second, every answer saying t=1: the rounding
// says nothing, the count left going up says when the window restarted.
func TestResetBoundFollowsTheCountLeft(t *testing.T) {
	t.Parallel()
	const quota = 10
	step := 100 * time.Millisecond
	edge := 300 * time.Millisecond
	var b resetBound
	for at := time.Duration(0); at < 5*time.Second; at += step {
		// Every call is counted; the window's count restarts at each edge.
		used := int64((at-edge)%time.Second/step) + 1
		if at < edge {
			used = int64(at/step) + 1
		}
		next := (at-edge)/time.Second*time.Second + edge + time.Second
		if at < edge {
			next = edge
		}
		sent := t0.Add(at)
		got := b.refine(Hints{Remaining: quota - used, HasRemaining: true, Quota: quota, Window: time.Second,
			Sent: sent, Reset: sent.Add(time.Second)})
		if got.Reset.Before(t0.Add(next)) {
			t.Fatalf("at +%v: reset +%v is before the real one +%v", at, got.Reset.Sub(t0), next)
		}
		// From the first restart seen on, the reset is known to a step.
		if at >= edge+time.Second && got.Reset.Sub(t0.Add(next)) > step {
			t.Errorf("at +%v: reset +%v, want within %v after +%v", at, got.Reset.Sub(t0), step, next)
		}
	}
}
