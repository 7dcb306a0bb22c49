package providersim

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestMeterAlgorithms drives each algorithm with calls at given offsets and
// checks which are accepted and the wait of those refused.
func TestMeterAlgorithms(t *testing.T) {
	t.Parallel()
	type call struct {
		at   time.Duration
		ok   bool
		wait time.Duration // of a refused call
	}
	for _, tc := range []struct {
		name   string
		alg    Algorithm
		rate   float64
		burst  int
		window time.Duration
		calls  []call
	}{
		{"token bucket: the burst, then one token per 1/rate", TokenBucket, 10, 2, 0, []call{
			{0, true, 0}, {0, true, 0}, {0, false, ms(100)}, {ms(100), true, 0}, {ms(150), false, ms(50)}, {ms(1000), true, 0},
		}},
		{"leaky bucket: the same law, counted as calls in the bucket", LeakyBucket, 10, 2, 0, []call{
			{0, true, 0}, {0, true, 0}, {0, false, ms(100)}, {ms(100), true, 0}, {ms(150), false, ms(50)}, {ms(1000), true, 0},
		}},
		{"sliding log: rate×window in any window", SlidingLog, 2, 0, 2 * time.Second, []call{
			{0, true, 0}, {ms(500), true, 0}, {ms(600), true, 0}, {ms(700), true, 0}, {ms(800), false, ms(1200)},
			// The window is (now-2s, now]: the first call has left at
			// 2 s, the second leaves at 2.5 s, the third at 2.6 s.
			{ms(2000), true, 0}, {ms(2001), false, ms(499)}, {ms(2100), false, ms(400)}, {ms(2500), true, 0}, {ms(2501), false, ms(99)},
		}},
		{"fixed window: rate×window per window from the start", FixedWindow, 2, 0, 2 * time.Second, []call{
			{0, true, 0}, {ms(10), true, 0}, {ms(20), true, 0}, {ms(30), true, 0}, {ms(40), false, ms(1960)},
			{ms(1999), false, ms(1)}, {ms(2000), true, 0}, {ms(3999), true, 0}, {ms(3999), true, 0}, {ms(3999), true, 0}, {ms(3999), false, ms(1)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := NewMeter(tc.alg, Schedule{{0, tc.rate}}, tc.burst, tc.window)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range tc.calls {
				ok, wait, rate := m.Take(c.at)
				if ok != c.ok || (!ok && wait != c.wait) || rate != tc.rate {
					t.Errorf("call %d at %v: ok %v wait %v rate %v, want ok %v wait %v", i, c.at, ok, wait, rate, c.ok, c.wait)
				}
			}
		})
	}
}

// TestMeterNeverExceeds sends random calls at each algorithm and checks the
// law it promises over every stretch of time: a bucket of b at rate r
// accepts at most b + r×t in any t, a sliding log at most its quota in any
// window, a fixed window at most its quota in each one.
func TestMeterNeverExceeds(t *testing.T) {
	t.Parallel()
	const rate, burst = 50.0, 5
	const window = time.Second
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, SlidingLog, FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			t.Parallel()
			var w time.Duration
			b := burst
			if alg.windowed() {
				w, b = window, 0
			}
			m, err := NewMeter(alg, Schedule{{0, rate}}, b, w)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var accepted []time.Duration
			at := time.Duration(0)
			for range 20000 {
				at += time.Duration(rng.ExpFloat64() * float64(time.Second) / (2 * rate))
				if ok, wait, _ := m.Take(at); ok {
					accepted = append(accepted, at)
				} else if wait <= 0 {
					t.Fatalf("a refusal at %v with wait %v", at, wait)
				}
			}
			for i := range accepted {
				for j := i; j < len(accepted); j++ {
					span := accepted[j] - accepted[i]
					n := float64(j - i + 1)
					switch {
					case !alg.windowed() && n > burst+rate*span.Seconds()+1e-6:
						t.Fatalf("%v calls in %v: more than %d + %v/s", n, span, burst, rate)
					case alg == SlidingLog && span < window && n > rate*window.Seconds():
						t.Fatalf("%v calls in %v: more than the log's %v", n, span, rate*window.Seconds())
					case alg == FixedWindow && accepted[i]/window == accepted[j]/window && n > rate*window.Seconds():
						t.Fatalf("%v calls in window %d", n, accepted[i]/window)
					}
					if span > 3*time.Second {
						break
					}
				}
			}
			// The limit is used, not just kept: about the rate over the run.
			if got := float64(len(accepted)) / at.Seconds(); got < 0.8*rate {
				t.Errorf("accepted %.1f/s, want about %v/s", got, rate)
			}
		})
	}
}

func TestNewMeterRefusesBadShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		alg    Algorithm
		burst  int
		window time.Duration
	}{{TokenBucket, 1, time.Second}, {SlidingLog, 0, 0}, {FixedWindow, 0, 0}, {LeakyBucket, -1, 0}, {Algorithm(9), 1, 0}} {
		if _, err := NewMeter(tc.alg, Schedule{{0, 1}}, tc.burst, tc.window); err == nil {
			t.Errorf("NewMeter(%v, burst %d, window %v) accepted", tc.alg, tc.burst, tc.window)
		}
	}
	if _, err := ParseAlgorithm("sliding-log"); err != nil {
		t.Error(err)
	}
	if _, err := ParseAlgorithm("gcra"); err == nil {
		t.Error("ParseAlgorithm(gcra) accepted")
	}
}

// TestRetryAfterStyles checks the three ways a 429 says when to call again:
// whole seconds (at least the minimum), the exact wait in Retry-After-Ms,
// and none.
func TestRetryAfterStyles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		style   RetryAfterStyle
		min     time.Duration
		want    string // Retry-After
		wantMs  string // Retry-After-Ms
		parsed  time.Duration
		present bool
	}{
		{"whole seconds", RetryAfterSeconds, 0, "1", "", time.Second, true},
		{"whole seconds, at least 2", RetryAfterSeconds, 2 * time.Second, "2", "", 2 * time.Second, true},
		{"exact", RetryAfterExact, 0, "1", "40", 40 * time.Millisecond, true},
		{"absent", RetryAfterAbsent, 0, "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Config{Records: dataset(3), Limit: Schedule{{0, 25}}, Burst: 1, RetryAfter: tc.style, RetryAfterMin: tc.min})
			if r, err := b.get(t, "a/b", "k1"); err != nil || r.Status != 200 {
				t.Fatalf("first call: %d, %v", r.Status, err)
			}
			req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/v1/transactions/a%2Fb", nil)
			req.Header.Set("Idempotency-Key", "k2")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != tc.want || resp.Header.Get("Retry-After-Ms") != tc.wantMs {
				t.Errorf("429: %d, Retry-After %q, Retry-After-Ms %q; want %q, %q", resp.StatusCode,
					resp.Header.Get("Retry-After"), resp.Header.Get("Retry-After-Ms"), tc.want, tc.wantMs)
			}
			// The client reads the exact wait where there is one.
			r, err := b.get(t, "a/b", "k3")
			if err != nil || r.Status != 429 || r.RetryAfter != tc.parsed || r.HasRetryAfter != tc.present {
				t.Errorf("client read %d, Retry-After %v (present %v), %v; want %v (%v)", r.Status, r.RetryAfter, r.HasRetryAfter, err, tc.parsed, tc.present)
			}
		})
	}
}
