package limiter

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// skewed returns a clock off the real one by d.
func skewed(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// TestSharedClockSkew runs two limiters on one row, one process's clock 3 s
// ahead and the other's 3 s behind: the row's times come from the
// database's clock, so neither takes more than its share of the budget,
// and neither calls inside a Retry-After window the other wrote, nor waits
// far beyond it.
func TestSharedClockSkew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p1, p2 := twoPools(t)
	const rate, burst = 40.0, 4
	if err := SaveSettings(ctx, p1, DefaultName, Settings{Rate: rate, Burst: burst}, SetBy{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	ahead := openShared(t, p1, Config{Now: skewed(3 * time.Second)})
	behind := openShared(t, p2, Config{Now: skewed(-3 * time.Second)})

	// Share: four callers on each limiter for 1.5 s.
	var mu sync.Mutex
	grants := map[*Shared][]time.Time{}
	var all []time.Time
	runCtx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for i := range 8 {
		l := []*Shared{ahead, behind}[i%2]
		wg.Go(func() {
			for {
				if err := l.Wait(runCtx); err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Error(err)
					}
					return
				}
				now := time.Now()
				mu.Lock()
				grants[l] = append(grants[l], now)
				all = append(all, now)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	checkRateBound(t, all, rate, burst, rate*0.1)
	// About 64 grants in all: a fair split varies by a few either way,
	// a process starved by its clock gets a handful.
	for l, name := range map[*Shared]string{ahead: "3 s ahead", behind: "3 s behind"} {
		if n := len(grants[l]); float64(n) < 0.25*float64(len(all)) {
			t.Errorf("the process %s got %d of %d grants, want at least 25%%", name, n, len(all))
		}
	}

	// Penalties: each writes a Retry-After window the other honours, on
	// the database's clock, to within a lease window.
	const retryAfter = 600 * time.Millisecond
	for _, c := range []struct {
		name          string
		throttled, by *Shared
	}{{"3 s behind throttled, 3 s ahead waits", behind, ahead}, {"3 s ahead throttled, 3 s behind waits", ahead, behind}} {
		before := time.Now()
		if err := c.throttled.Throttled(ctx, retryAfter, ConcurrencyLimited); err != nil {
			t.Fatal(err)
		}
		// The other stops at its next lease: slots it leased before the
		// throttle may still be used within a lease window, and a
		// slot's timer may fire after its time on a busy machine (21 ms
		// late once, the suite running under the race detector on two
		// cores). A limiter that ignored the pause would grant every
		// 25 ms, well before its end.
		const timerSlack = 100 * time.Millisecond
		end := before.Add(retryAfter)
		for {
			if err := c.by.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			got := time.Now()
			if got.Sub(before) < DefaultLeaseWindow+timerSlack {
				continue
			}
			// Postgres keeps microseconds; the offset is known to within
			// half a round trip.
			if got.Before(end.Add(-5*time.Millisecond)) || got.After(end.Add(time.Second)) {
				t.Errorf("%s: granted %v after the throttle, want about %v", c.name, got.Sub(before), retryAfter)
			}
			break
		}
	}
}
