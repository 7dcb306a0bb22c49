package providersim

import (
	"fmt"
	"testing"
	"time"
)

// TestWindow checks the fixed-window limit: the quota of each window, the
// 429 with the wait until the next one, and the IETF fields on every
// answer.
func TestWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Records: dataset(3), Limit: Schedule{{0, 2}}, Algorithm: FixedWindow, Window: 3 * time.Second, RateLimitHeaders: true})
	for i := range 6 {
		r, err := b.get(t, "a/b", fmt.Sprintf("k%d", i))
		if err != nil || r.Status != 200 {
			t.Fatalf("call %d: %d, %v", i, r.Status, err)
		}
		if got, want := r.Header.Get("RateLimit"), fmt.Sprintf(`"default";r=%d;t=3`, 5-i); got != want {
			t.Errorf("call %d: RateLimit = %q, want %q", i, got, want)
		}
		if got := r.Header.Get("RateLimit-Policy"); got != `"default";q=6;w=3` {
			t.Errorf("call %d: RateLimit-Policy = %q", i, got)
		}
	}
	b.clock.Advance(1200 * time.Millisecond)
	r, err := b.get(t, "a/b", "k6")
	if err != nil || r.Status != 429 || r.Header.Get("Retry-After") != "2" || r.Header.Get("RateLimit") != `"default";r=0;t=2` {
		t.Fatalf("seventh call: %d, Retry-After %q, RateLimit %q, %v; want 429 after 2 s with r=0",
			r.Status, r.Header.Get("Retry-After"), r.Header.Get("RateLimit"), err)
	}
	b.clock.Advance(1800 * time.Millisecond)
	if r, err := b.get(t, "a/b", "k7"); err != nil || r.Status != 200 || r.Header.Get("RateLimit") != `"default";r=5;t=3` {
		t.Fatalf("first call of the next window: %d, RateLimit %q, %v", r.Status, r.Header.Get("RateLimit"), err)
	}
}
