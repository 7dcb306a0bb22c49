package limiter

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// A bucket taken deeper than the provider's (learned from a start-up whose
// answers came back unevenly, or stored by an earlier night) releases more
// calls at each pause's end than the provider's bucket holds. The first one
// over is refused; read as a fall, that 429 halved the rate and the night
// became a sawtooth: the real consumer against a bucket of 20 at 200/s with
// 200 ms answers, having learned a bucket of 22, ran at 47% of the limit;
// the simulation started from a stored bucket of 22 at 24%. A 429 during
// the release says the bucket holds less than was released: it is taken
// as what it held, and the estimate kept.

// deepCells are the nights TestDiscoveryBucketTakenTooDeep runs: buckets of
// a call and of 0.1 s (where a call or two too many is a 429 at every
// resume; a bucket of a second or more holds a pause's refill, and its
// release is bounded by that), at each rate, with answers taking 20 and
// 200 ms, one process and four. Answers that take no time, which no network
// gives, are left out: there the measure that follows the first 429 reads
// the rate low whatever the bucket (a stored bucket of 0.1 s at 1,000/s,
// exact, gives 90%).
func deepCells() []matrixCell {
	return steadyCells(familyStored, []string{"bucket-1call", "bucket-0.1s"}, []float64{20, 200, 1000}, lateAnswers, []int{1, 4})
}

// lateAnswers are the latencies of the nights started from a stored
// bucket: answers that take no time are left out (see deepCells).
var lateAnswers = []time.Duration{20 * time.Millisecond, 200 * time.Millisecond}

// TestDiscoveryBucketTakenTooDeep starts each night from a stored bucket
// too deep by a tenth (at least a call) and by twice the provider's, and
// compares it with the night started from the exact one: it must end with
// the bucket taken no deeper than the provider's, reach 85% of the limit
// (the sawtooth: 10–50%), and, for one process, whose count of the calls
// since the resume is exact, come within 3 points of the exact night. A
// fleet's processes count each other's calls a lease late and take the
// bucket down by at most half a 429; its nights then differ by how their
// measures fall (up to 7 points).
func TestDiscoveryBucketTakenTooDeep(t *testing.T) {
	t.Parallel()
	for _, c := range deepCells() {
		exact := simulateNight(c.spec())
		b := float64(c.bucket())
		for _, stored := range []float64{b + math.Ceil(b/10), 2 * b} {
			sp := c.spec()
			sp.stored[1] = stored
			got := simulateNight(sp)
			e := got.efficiency()
			last := got.changes[len(got.changes)-1]
			switch {
			case last.burst > b:
				t.Errorf("%v, stored bucket %g: ends with a bucket of %.1f, deeper than the provider's %g", c, stored, last.burst, b)
			case e < 0.85:
				t.Errorf("%v, stored bucket %g: %.1f%% of the limit, want 85%% or more\n%s", c, stored, 100*e, formatChanges(got.changes))
			case c.procs == 1 && e < exact.efficiency()-0.03:
				t.Errorf("%v, stored bucket %g: %.1f%% of the limit, %.1f%% from the exact bucket", c, stored, 100*e, 100*exact.efficiency())
			}
		}
	}
}

// discoveryFeed drives a discovery as one process whose answers all take
// latency, each 429 it counts pausing the fleet a second from its answer.
type discoveryFeed struct {
	d        *discovery
	latency  time.Duration
	accepted int64
	refusals int // counted so far
}

// answer reports an accepted answer to a call sent at sent.
func (f *discoveryFeed) answer(sent time.Time) {
	f.d.answered(f.latency)
	f.accepted++
	f.d.succeeded(sent.Add(f.latency), f.accepted, f.accepted)
}

// refuse reports a 429 to a call sent at sent.
func (f *discoveryFeed) refuse(sent time.Time) {
	f.d.answered(f.latency)
	at := sent.Add(f.latency)
	f.refusals++
	f.d.refusing(at)
	f.d.throttled(at, f.accepted, f.accepted, at.Add(time.Second), f.refusals, true)
}

// TestDiscoveryTakesBackABucketAFallShrank: a fall can land while a release
// is being spent, and its first 429 then reads as a bucket that holds less.
// The next 429, cruising under the estimate kept, is the fall's: the rate
// halves and the bucket is taken back to what it was, or every later count
// would read as a faster rate.
func TestDiscoveryTakesBackABucketAFallShrank(t *testing.T) {
	t.Parallel()
	d := newDiscovery(DefaultDecrease, DefaultLeaseWindow)
	d.observe(t0, 0, 0, 600, 0)
	d.startFrom(t0, 0, 0, 200, 20, 600)
	f := discoveryFeed{d: d, latency: 20 * time.Millisecond, refusals: trustedRefusals}
	// The release, paced at 200/s: the 11th call is refused.
	for i := range 10 {
		f.answer(t0.Add(time.Duration(i) * 5 * time.Millisecond))
	}
	f.refuse(t0.Add(50 * time.Millisecond))
	if d.burst >= 20 || d.estimate != 200 {
		t.Fatalf("after a 429 during the release: bucket %.1f, estimate %.1f/s; want a smaller bucket and the estimate kept\n%s",
			d.burst, d.estimate, formatChanges(d.changes))
	}
	// The cruise after the pause, refused 2 s in: the limit fell.
	resume := t0.Add(1070 * time.Millisecond)
	for i := range 400 {
		f.answer(resume.Add(time.Duration(i) * 5 * time.Millisecond))
	}
	f.refuse(resume.Add(2 * time.Second))
	if d.burst != 20 || d.estimate > 100 {
		t.Errorf("after the cruise's 429: bucket %.1f, estimate %.1f/s; want the bucket of 20 back and the rate halved\n%s",
			d.burst, d.estimate, formatChanges(d.changes))
	}
}

// TestDiscoveryReleaseStartsWhenThePauseEnds: with answers that take
// 200 ms, the calls in flight when the counted 429 came back are refused
// too (up to 37 of 80 against a bucket of 20 at 200/s), each pausing the
// fleet again from its answer, so the pause ends up to a latency after the
// counted one's, and the release with it. Timed from the counted pause's
// end, the release's calls read as the cruise's, and a 429 among them as a
// fall (the real consumer: a 429 at every resume, 47% of the limit).
func TestDiscoveryReleaseStartsWhenThePauseEnds(t *testing.T) {
	t.Parallel()
	const latency = 200 * time.Millisecond
	d := newDiscovery(DefaultDecrease, DefaultLeaseWindow)
	d.observe(t0, 0, 0, 600, 0)
	for range latencyKept {
		d.answered(latency)
	}
	d.startFrom(t0, 0, 0, 200, 22, 600)
	// The last refused call's answer ends the pause 150 ms later.
	resume := t0.Add(150 * time.Millisecond)
	d.paused(resume)
	f := discoveryFeed{d: d, latency: latency, refusals: trustedRefusals}
	for i := range 20 {
		f.answer(resume.Add(time.Duration(i) * 5 * time.Millisecond))
	}
	f.refuse(resume.Add(100 * time.Millisecond))
	if d.burst >= 22 || d.estimate != 200 {
		t.Errorf("a 429 100 ms into the release: bucket %.1f, estimate %.1f/s; want a smaller bucket and the estimate kept\n%s",
			d.burst, d.estimate, formatChanges(d.changes))
	}
}

// TestDiscoveryBucketTakenTooShallow starts nights from a stored bucket of
// three quarters and of half the provider's (a bucket of 0.1 s at 200 and
// 1,000/s, answers of 20 and 200 ms, one process). Taken too shallow, the
// bucket made the measure read its calls as a faster rate (211/s against
// 200/s with a bucket of 15), the cruise at it was refused about a second
// after each pause, and the rate halved, to be measured the same again:
// 51–61% of the limit, and the real consumer's start-up that learned a
// bucket of 15 ran at 48%. The 429 while cruising and the span measured
// before it, solved together, give the rate and the bucket: within 5
// points of the night started from the exact bucket, ending with at least
// nine tenths of it. A fleet's counts lack the other processes' calls of
// the last lease, which read as a deeper bucket: it keeps halving.
func TestDiscoveryBucketTakenTooShallow(t *testing.T) {
	t.Parallel()
	for _, c := range steadyCells(familyStored, []string{"bucket-0.1s"}, []float64{200, 1000}, lateAnswers, []int{1}) {
		exact := simulateNight(c.spec())
		b := float64(c.bucket())
		for _, stored := range []float64{0.75 * b, 0.5 * b} {
			sp := c.spec()
			sp.stored[1] = stored
			got := simulateNight(sp)
			e := got.efficiency()
			last := got.changes[len(got.changes)-1]
			if e < exact.efficiency()-0.05 || last.burst < 0.9*b {
				t.Errorf("%v, stored bucket %g: %.1f%% of the limit (%.1f%% from the exact bucket), ending with a bucket of %.1f of %g\n%s",
					c, stored, 100*e, 100*exact.efficiency(), last.burst, b, formatChanges(got.changes))
			}
		}
	}
}

// TestDiscoveryStartUpReleaseMeasuresNoRate: a consumer told three times
// the limit starts against a bucket of 20 at 200/s, is refused after the
// bucket and its refill, and after the second-long pause spends the release
// at once: the provider takes what its bucket refilled and refuses the
// rest. Those calls say how deep the bucket is, not how fast it refills;
// measured, the smallest rate they allow is the bucket over the pause (the
// real consumer: 24/s, and 10 s to climb back, 76% of the limit over a
// minute). Too few to measure, they halve the rate the calls were accepted
// at, and the next 429 measures the provider.
func TestDiscoveryStartUpReleaseMeasuresNoRate(t *testing.T) {
	t.Parallel()
	m, err := providersim.NewMeter(providersim.TokenBucket, providersim.Schedule{{At: 0, Rate: 200}}, 20, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := newDiscovery(DefaultDecrease, DefaultLeaseWindow)
	d.observe(t0, 0, 0, 600, 0)
	f := discoveryFeed{d: d, latency: 5 * time.Millisecond}
	read := t0 // the row's last read
	// call sends a call at sent; it reports whether the provider took it.
	// The row is read a lease window apart, before a call.
	call := func(sent time.Time) bool {
		if sent.Sub(read) >= DefaultLeaseWindow {
			d.observe(sent, f.accepted, f.accepted, 600, 0)
			read = sent
		}
		if ok, _, _ := m.Take(sent.Sub(t0)); !ok {
			f.refuse(sent)
			return false
		}
		f.answer(sent)
		return true
	}
	// The limit set, 600/s, until the provider refuses it.
	sent := t0
	for call(sent) {
		sent = sent.Add(time.Second / 600)
	}
	// The release: the calls the pause refilled, sent at once.
	sent = d.resumeAt.Add(f.latency)
	for call(sent) {
		sent = sent.Add(time.Millisecond)
	}
	if d.estimate < 100 || !d.guess {
		t.Fatalf("after the release's 429: estimate %.1f/s (a guess: %v); want at least half the provider's 200/s, measured again at the next 429\n%s",
			d.estimate, d.guess, formatChanges(d.changes))
	}
	// Cruise at the rate the discovery gives until the next 429.
	sent = d.resumeAt.Add(f.latency)
	for call(sent) {
		sent = sent.Add(time.Duration(float64(time.Second) / d.rate(sent)))
	}
	if d.guess || math.Abs(d.estimate-200) > 0.1*200 {
		t.Errorf("after the cruise's 429: estimate %.1f/s (a guess: %v); want a measure within 10%% of 200/s\n%s",
			d.estimate, d.guess, formatChanges(d.changes))
	}
}

// TestDiscoveryNoIntervalBeyondTheBucket replays the real consumer against a
// bucket of 2 at 200/s, told 600/s: after the limit set's second refusal
// halved it to a guess of 300/s, the workers that waited out the pause went
// at once and the provider took two calls, its bucket. With no two calls
// beyond what the bucket held, nothing was refilled between calls that
// counts: the measure is the bucket over the pause ("measured between two
// 429s on 2 calls: 5.82/s", then 6 s to climb back). The rate refused
// halves instead, no lower than the measure.
func TestDiscoveryNoIntervalBeyondTheBucket(t *testing.T) {
	t.Parallel()
	d := newDiscovery(DefaultDecrease, DefaultLeaseWindow)
	d.observe(t0, 0, 0, 600, 0)
	f := discoveryFeed{d: d, latency: 5 * time.Millisecond}
	// burst answers k calls sent a millisecond apart from sent, then
	// refuses the next.
	burst := func(sent time.Time, k int) {
		for range k {
			f.answer(sent)
			sent = sent.Add(time.Millisecond)
		}
		f.refuse(sent)
	}
	burst(t0, 3)
	burst(d.resumeAt, 2)
	guess := d.estimate
	if !d.guess || guess < 100 {
		t.Fatalf("after the limit set's second refusal: estimate %.1f/s (a guess: %v); want half the rate it was sent at\n%s",
			guess, d.guess, formatChanges(d.changes))
	}
	d.observe(d.resumeAt, f.accepted, f.accepted, 600, guess*cruiseShare)
	burst(d.resumeAt, 2)
	if want := guess * DefaultDecrease; d.estimate < want || !d.guess {
		t.Errorf("after a release of two calls: estimate %.1f/s (a guess: %v); want at least %.1f/s, measured again at the next 429\n%s",
			d.estimate, d.guess, want, formatChanges(d.changes))
	}
}

// TestDiscoveryShortPausesMeasureNoRate runs nights told 600/s against
// buckets at 200/s with an exact Retry-After. The row counts one 429 a
// second; between the limit set's two counted refusals the process took
// more, each a pause of a few milliseconds and the lease's debt after it,
// while the provider refilled. Against a bucket of one call 20 calls were
// accepted between, about one a pause: they measured 25/s, and the night
// crawled at it until a probe 5 s later (90.8% of the physical minimum).
// Such a measure says only that the provider allows at least that much:
// the rate halves instead, and the next 429 measures. A bucket of 20 calls
// absorbs the gaps (198 calls between 20 pauses), and its measure is taken.
func TestDiscoveryShortPausesMeasureNoRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		shape  string
		halves bool
	}{
		{"bucket-1call", true},
		{"bucket-0.1s", false},
	} {
		c := matrixCell{family: familyUnknown, shape: shapeNamed(tc.shape), rate: 200, ra: matrixRetryAfter[2], procs: 1,
			pattern: matrixPatterns[0]}
		r := simulateNight(c.spec())
		halved := false
		for _, ch := range r.changes {
			halved = halved || strings.Contains(ch.detail, "the fleet paused at")
		}
		m := r.firstMeasure()
		if halved != tc.halves || m == nil || m.estimate < 0.9*200 {
			t.Errorf("%s: halved for the pauses %v (want %v), first measure %+v (want within 10%% of 200/s)\n%s",
				c, halved, tc.halves, m, formatChanges(r.changes))
			continue
		}
		if e := r.efficiency(); e < 0.95 {
			t.Errorf("%s: efficiency %.1f%%, want >= 95%%\n%s", c, 100*e, formatChanges(r.changes))
		}
	}
}
