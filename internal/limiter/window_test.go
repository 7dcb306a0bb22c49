package limiter

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// feedWindowLog sends calls to a provider meter as the discovery's cycle
// does (three times the rate, the limit set, until the second 429; then
// after each 2 s pause a cruise at the given share of the rate for 5 s and
// a probe ramping up from it until a 429), samples the accepted count every
// 100 ms and records each 429 in a windowLog, as throttled does, until the
// refused-th.
func feedWindowLog(t *testing.T, alg providersim.Algorithm, rate float64, burst int, window time.Duration, cruise float64, refused int) *windowLog {
	t.Helper()
	m, err := providersim.NewMeter(alg, providersim.Schedule{{At: 0, Rate: rate}}, burst, window)
	if err != nil {
		t.Fatal(err)
	}
	w := &windowLog{}
	var accepted int64
	next := time.Duration(0) // next sample
	sampleTo := func(d time.Duration) {
		for ; next <= d; next += 100 * time.Millisecond {
			w.add(sample{at: t0.Add(next), accepted: accepted})
		}
	}
	at, from := time.Duration(0), time.Duration(0) // now; when the phase began
	pace := func(r float64) time.Duration { return time.Duration(float64(time.Second) / r) }
	for refusals := 0; refusals < refused && at < time.Minute; {
		sampleTo(at)
		var r float64
		switch since := (at - from).Seconds(); {
		case refusals < trustedRefusals:
			r = 3 * rate
		case since < 5:
			r = cruise * rate
		default: // the probe: a fifth of the rate more each second
			r = rate * (cruise + 0.2*(since-5) + 0.02)
		}
		ok, _, _ := m.Take(at)
		if !ok {
			w.add(sample{at: t0.Add(at), accepted: accepted})
			w.refuse(t0.Add(at), accepted)
			refusals++
			at += 2 * time.Second
			sampleTo(at)
			from = at
			continue
		}
		accepted++
		at += pace(r)
	}
	return w
}

func TestWindowReadFindsWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		alg  providersim.Algorithm
		want reading
	}{
		{"sliding log of a second", providersim.SlidingLog, reading{quota: 200, window: time.Second}},
		{"sliding log of two seconds", providersim.SlidingLog, reading{quota: 400, window: 2 * time.Second}},
		{"fixed window of a second", providersim.FixedWindow, reading{quota: 200, window: time.Second, fixed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Cruising at 40% of the rate, where the bucket's measure
			// of a window settles, and read at the first probe's 429
			// as the discovery does (the two before it are the limit
			// set's).
			w := feedWindowLog(t, tc.alg, 200, 0, tc.want.window, 0.4, agreeing)
			got, ok := w.read(reading{})
			if !ok {
				t.Fatalf("read no window; refusals %v", w.refused)
			}
			if got.window != tc.want.window || got.fixed != tc.want.fixed || math.Abs(got.quota-tc.want.quota) > windowSlack(tc.want.quota) {
				t.Fatalf("read %g calls in %v (fixed %v), want %g in %v (fixed %v)", got.quota, got.window, got.fixed,
					tc.want.quota, tc.want.window, tc.want.fixed)
			}
			// The probes' refusals after it confirm it.
			w = feedWindowLog(t, tc.alg, 200, 0, tc.want.window, 0.4, agreeing+2)
			if again, ok := w.read(got); !ok || again != got {
				t.Fatalf("the window read is not confirmed by the next refusals: %+v %v", again, ok)
			}
		})
	}
}

func TestWindowReadNeedsRefusalsFromDifferentLoads(t *testing.T) {
	t.Parallel()
	// Refusals each after the same 150 calls in the last second, each
	// after the same cruise, the first too (the log saw the second
	// before it): a bucket's refusals look like that too, and nothing
	// tells them apart.
	w := refusalsAfter(false)
	if r, ok := w.read(reading{}); ok {
		t.Fatalf("read %g calls in %v from refusals that came from the same load", r.quota, r.window)
	}
}

func TestWindowReadTakesTheFirstRefusalFromIdle(t *testing.T) {
	t.Parallel()
	// The same refusals, the first after a burst from idle: the later
	// ones all came from a full window, the first from none. A sliding
	// log of 10 s that the fleet keeps full refuses so, each cycle a
	// burst and the pause until the window frees; read from the later
	// refusals alone, it was never read (91.7% of the physical minimum).
	w := refusalsAfter(true)
	r, ok := w.read(reading{})
	if !ok || r.window != time.Second || math.Abs(r.quota-150) > windowSlack(150) {
		t.Fatalf("read %g calls in %v (%v), want a window of 150 calls in 1s; refusals %v", r.quota, r.window, ok, w.refused)
	}
}

// refusalsAfter returns a window log of refusals each after 150 calls in
// the second before it, 100 spread over the second and 50 at its end, and
// the same in each second before that; the first refusal comes after a
// burst of 150 from idle when fromIdle, after 7 s of the same cruise
// otherwise (a process that joins a busy fleet sees no calls before it
// joined: only a window that reaches back before that takes the first
// refusal as from idle, and such a window counts the first short).
func refusalsAfter(fromIdle bool) *windowLog {
	w := &windowLog{}
	w.add(sample{at: t0})
	var accepted int64
	first := 70
	if fromIdle {
		first = 10
	}
	for s := 1; s <= first+100; s++ {
		at := t0.Add(time.Duration(s) * 100 * time.Millisecond)
		switch {
		case fromIdle && s <= 10:
			accepted += 15
		case s%10 == 0:
			accepted += 60
		default:
			accepted += 10
		}
		w.add(sample{at: at, accepted: accepted})
		if s%10 == 0 && s >= first {
			w.refuse(at, accepted)
		}
	}
	return w
}

func TestWindowStart(t *testing.T) {
	t.Parallel()
	r := reading{window: time.Second, fixed: true, phase: t0.Add(300 * time.Millisecond)}
	for _, tc := range []struct{ at, want time.Duration }{
		{2500 * time.Millisecond, 2300 * time.Millisecond},
		{2300 * time.Millisecond, 2300 * time.Millisecond},
		{200 * time.Millisecond, -700 * time.Millisecond},
	} {
		if got := r.start(t0.Add(tc.at)); !got.Equal(t0.Add(tc.want)) {
			t.Errorf("start(%v) = %v, want %v", tc.at, got.Sub(t0), tc.want)
		}
	}
	sliding := reading{window: time.Second}
	if got := sliding.start(t0.Add(2500 * time.Millisecond)); !got.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("sliding start = %v, want 1.5s", got.Sub(t0))
	}
}

// TestWindowConfirmMovesAFixedStart holds a fixed window whose start was
// read 13 ms early, and refuses a probe at the true window's very end:
// the refusal then falls in the window held, 12 ms into it, which a
// window refusing only when full cannot do. The start moves after the
// refusal, and the window before it holds the quota.
func TestWindowConfirmMovesAFixedStart(t *testing.T) {
	t.Parallel()
	w := &windowLog{}
	// 200 calls a second, 2 every 10 ms, windows starting at t0.
	for ms := 0; ms <= 2999; ms += 10 {
		w.add(sample{at: t0.Add(time.Duration(ms) * time.Millisecond), accepted: int64(ms / 5)})
	}
	x := refusal{at: t0.Add(2999 * time.Millisecond), accepted: 599}
	w.add(sample{at: x.at, accepted: x.accepted})
	w.refuse(x.at, x.accepted)
	held := reading{quota: 200, window: time.Second, fixed: true, phase: t0.Add(-13 * time.Millisecond)}
	got, n, ok := w.confirm(held, x)
	if !ok {
		t.Fatalf("the refusal at the window's end does not confirm the window held")
	}
	if !got.same(held) || !got.start(x.at).Equal(x.at.Add(-time.Second).Add(time.Nanosecond)) || math.Abs(n-200) > 1 {
		t.Fatalf("confirmed %+v with the window before the refusal starting at %v holding %g calls; want it ending at the refusal, holding 200",
			got, got.start(x.at).Sub(t0), n)
	}
	// Far from the held start, the refusal says the limit changed: no
	// move.
	held.phase = t0.Add(-300 * time.Millisecond)
	if r, n, ok := w.confirm(held, x); ok {
		t.Fatalf("a refusal 300 ms into the window held confirmed it at %+v, %g calls", r, n)
	}
}

// TestDiscoveryReadsWindows runs the nights the bucket's measure did
// worst on, windows of a second with a 2 s Retry-After: it settled at the
// rate the fleet cruised at (40% of a sliding log's, 53% of a fixed
// window's), the headroom of a window looking like a bucket's. And two a
// fixed window's start read a few milliseconds early lost: the probe's
// refusal fell in the next window (the window read was dropped, the
// bucket's measure ratcheted down a probe at a time, 64%); a quota read 1%
// high drew a 429 each window while cruising, which halved the rate (60%).
// And a quota of 20 read as 20.3 calls, the counts being interpolated,
// cruised at 20.1/s, and the trial's 429 refuted the window (73%). And a
// sliding log of 10 s at 1,000/s read as a bucket: each probe's 429 was
// followed about 5 s later by a cruise's, so the last three 429s were
// never half a window apart and read no window; the reading takes the
// last one and those at least half a window before the one taken after
// them (92.0% before, 9.2% of the calls answered 429).
func TestDiscoveryReadsWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shape   string
		rate    float64
		ra      raStyle
		latency time.Duration
		read    string  // the window read, in the history's words
		least   float64 // the efficiency to reach
	}{
		{"log-1s", 200, matrixRetryAfter[1], 0, "window of 1s", 0.8},
		{"window-1s", 200, matrixRetryAfter[1], 0, "window of 1s", 0.8},
		{"window-1s", 200, matrixRetryAfter[1], 20 * time.Millisecond, "window of 1s", 0.8},
		{"window-1s", 1000, matrixRetryAfter[0], 200 * time.Millisecond, "window of 1s", 0.8},
		{"window-1s", 20, matrixRetryAfter[0], 20 * time.Millisecond, "window of 1s", 0.8},
		{"log-10s", 1000, matrixRetryAfter[2], 20 * time.Millisecond, "sliding window of 10s", 0.95},
		// A quota of 5: before three refusals a sliding window of a
		// second held 5, 5 and 5 calls, a fixed one at one of the
		// starts tried 4, 5 and 5 (a call dated across its edge); the
		// lowest count of each read, the lowest quota won: a fixed
		// window of 4 (76.3%).
		{"log-1s", 5, matrixRetryAfter[0], 0, "each after 5 calls in a sliding window of 1s", 0.9},
		// With 20 ms answers a fixed window at one start held 4, 4
		// and 5, the sliding one 5, 5 and 5: the counts that agree
		// to the call are read, not the lowest quota (59.7%).
		{"log-1s", 5, matrixRetryAfter[0], 20 * time.Millisecond, "each after 5 calls in a sliding window of 1s", 0.9},
		// A 429 in the trial of a window read, the window full: the
		// calls of the probe before it were still in it. Taken as
		// refuting the window, the night went back to the bucket's
		// 8.55/s (77.3%).
		{"log-10s", 5, matrixRetryAfter[3], 200 * time.Millisecond, "sliding window of 10s", 0.85},
	} {
		c := matrixCell{family: familyUnknown, shape: shapeNamed(tc.shape), rate: tc.rate, ra: tc.ra, latency: tc.latency,
			procs: 1, pattern: matrixPatterns[0]}
		r := simulateNight(c.spec())
		read := false
		for _, ch := range r.changes {
			read = read || strings.Contains(ch.detail, tc.read)
		}
		if e := r.efficiency(); e < tc.least || !read {
			t.Errorf("%s: efficiency %.1f%%, %s read %v; want >= %.0f%% and read\n%s", c, 100*e, tc.read, read, 100*tc.least, formatChanges(r.changes))
		}
	}
}

// TestDiscoveryTakesBucketsForBuckets runs nights against buckets of every
// size the matrix has, at a low and a high rate: none may be read as a
// window of a higher rate, whose trial would cost a 429 and a pause. (A
// bucket of a second at 5/s refuses as a fixed window of 5 calls a second
// does, and may be read as one, at its rate.)
func TestDiscoveryTakesBucketsForBuckets(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"bucket-1call", "bucket-0.1s", "bucket-1s", "bucket-5s", "leaky-20s"} {
		for _, rate := range []float64{5, 200} {
			for _, ra := range matrixRetryAfter {
				for _, latency := range matrixLatencies {
					for _, procs := range []int{1, 4} {
						c := matrixCell{family: familyUnknown, shape: shapeNamed(name), rate: rate, ra: ra, latency: latency,
							procs: procs, pattern: matrixPatterns[0]}
						r := simulateNight(c.spec())
						for _, ch := range r.changes {
							if strings.Contains(ch.detail, "window of") && ch.estimate > 1.05*rate {
								t.Errorf("%s: read as a window at %v: %s", c, ch.at.Sub(t0), ch.detail)
							}
						}
					}
				}
			}
		}
	}
}

// TestDiscoveryFollowsARiseUnderAWindow raises a sliding log's limit ×4
// after the fleet read its window: the surge that finds the rise ends in a
// 429 when the window is full at the new quota, which is what the window
// then holds. Measured as a bucket, the rise read as the rate the fleet
// surged at, and three more 429s had to agree before the window was read
// again (the rise used after 80 s).
func TestDiscoveryFollowsARiseUnderAWindow(t *testing.T) {
	t.Parallel()
	c := matrixCell{family: familyUnknown, shape: shapeNamed("log-1s"), rate: 200, ra: matrixRetryAfter[0], procs: 1, pattern: matrixPatterns[1]}
	r := simulateNight(c.spec())
	rose := false
	for _, ch := range r.changes {
		rose = rose || strings.HasPrefix(ch.detail, "the limit rose: a sliding window of 1s held") && math.Abs(ch.estimate-200) <= 0.05*200
	}
	const at = 40
	if used := r.risenBy(at, 200, len(r.series)-at); used > 15 || !rose {
		t.Errorf("%s: the rise used after %d s, the window's new quota read %v; want <= 15 s and read\n%s", c, used, rose, formatChanges(r.changes))
	}
}

// TestDiscoveryReadsAWindowAfterAFall cuts a sliding log's limit to a
// quarter after the fleet read its window. The windows before the fall
// held four times the new quota, which no window reading could agree
// with until they left the log two minutes later; read from what came
// after the fall, the new window is read within 20 s of it.
func TestDiscoveryReadsAWindowAfterAFall(t *testing.T) {
	t.Parallel()
	c := matrixCell{family: familyUnknown, shape: shapeNamed("log-1s"), rate: 1000, ra: matrixRetryAfter[0],
		latency: 20 * time.Millisecond, procs: 1, pattern: matrixPatterns[2]}
	r := simulateNight(c.spec())
	const fall = 40 * time.Second
	for _, ch := range r.changes {
		if ch.at.Sub(t0) > fall && strings.Contains(ch.detail, "sliding window of 1s") && math.Abs(ch.estimate-250) <= 0.05*250 {
			if ch.at.Sub(t0) > fall+20*time.Second {
				t.Errorf("%s: the new window read %v after the fall, want within 20 s", c, ch.at.Sub(t0)-fall)
			}
			return
		}
	}
	t.Errorf("%s: the new window never read\n%s", c, formatChanges(r.changes))
}

// TestDiscoveryProbesAWindowByItsQuota runs a sliding log of 1 s whose
// limit zigzags between 200/s and 50/s, the window read at each level. A
// probe under a window held is due its 429 when it has spent what the
// cruise leaves of the quota, not a bucket's worth: predicted from the
// bucket learned at start-up (150 calls), the probe had to outlive 150
// calls past the quota before it took the rise for one, and each rise was
// used after 24 s; now within 10 s.
func TestDiscoveryProbesAWindowByItsQuota(t *testing.T) {
	t.Parallel()
	c := matrixCell{family: familyUnknown, shape: shapeNamed("log-1s"), rate: 200, ra: matrixRetryAfter[2], procs: 4, pattern: matrixPatterns[4]}
	r := simulateNight(c.spec())
	for _, at := range []int{48, 96} {
		if used := r.risenBy(at, 200, 24); used > 10 {
			t.Errorf("%s: the rise at %d s used after %d s, want <= 10\n%s", c, at, used, formatChanges(r.changes))
		}
	}
}

// TestWindowShiftCountsWhatCameAfter checks which 429s a window reading
// takes after the limit changed: after a fall, those whose window (of the
// span read) came wholly after it; after a rise, the 429 that ended the
// surge and those after it; and the rates it may read.
func TestWindowShiftCountsWhatCameAfter(t *testing.T) {
	t.Parallel()
	at := t0.Add(40 * time.Second)
	x := func(d time.Duration) refusal { return refusal{at: at.Add(d)} }
	fell := shift{at: at, from: 200}
	rose := shift{at: at, rose: true, from: 50}
	for _, tc := range []struct {
		name string
		c    shift
		x    refusal
		want bool
	}{
		{"fall: a 429 whose second began before the fall", fell, x(500 * time.Millisecond), false},
		{"fall: a 429 a second after the fall", fell, x(time.Second), true},
		{"rise: the surge's own 429", rose, x(0), true},
		{"rise: a 429 before the surge's", rose, x(-time.Millisecond), false},
		{"no change: any 429", shift{}, x(-time.Hour), true},
	} {
		if got := tc.c.counts(tc.x, time.Second); got != tc.want {
			t.Errorf("%s: counts %v, want %v", tc.name, got, tc.want)
		}
	}
	if !fell.allows(150) || fell.allows(250) || !rose.allows(60) || rose.allows(40) || !(shift{}).allows(1e6) {
		t.Errorf("allows: after a fall from 200/s 150 %v 250 %v; after a rise from 50/s 60 %v 40 %v",
			fell.allows(150), fell.allows(250), rose.allows(60), rose.allows(40))
	}
	// Three 429s 100 ms apart share most of a minute's calls: they agree
	// as a minute's window whatever the provider is.
	rs := []refusal{x(0), x(100 * time.Millisecond), x(200 * time.Millisecond)}
	if got := spread(rs, time.Minute); got != nil {
		t.Errorf("spread over a minute of 429s 100 ms apart: %v, want none", got)
	}
	if got := spread(rs, 200*time.Millisecond); !slices.Equal(got, rs) {
		t.Errorf("spread over 200 ms of 429s 100 ms apart: %v, want all three", got)
	}
}

// TestSpreadSkipsCloseRefusals: refusals every 10 s and one between, 4.9 s
// after: a window of 10 s is read from the last one and those at least
// 5 s before the one taken after them.
func TestSpreadSkipsCloseRefusals(t *testing.T) {
	t.Parallel()
	x := func(s float64) refusal { return refusal{at: t0.Add(durationOf(s))} }
	rs := []refusal{x(10), x(15.5), x(20.5), x(26), x(30.9)}
	if got, want := spread(rs, 10*time.Second), []refusal{x(15.5), x(20.5), x(30.9)}; !slices.Equal(got, want) {
		t.Errorf("spread over 10 s: %v, want %v", got, want)
	}
	if got := spread(rs, time.Minute); got != nil {
		t.Errorf("spread over a minute: %v, want none", got)
	}
}
