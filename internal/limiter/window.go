package limiter

import (
	"math"
	"slices"
	"sort"
	"time"
)

// A provider that counts calls in a sliding window (at most N calls in any
// W) looks, to the bucket the discovery measures, like a bucket refilled at
// whatever rate the fleet cruises at: when the fleet has sent at c for a
// window, its calls leave the window at c, and the headroom is N − c×W.
// A probe shorter than the window cannot tell the two apart, so the
// measurement settles at the rate cruised at, however far under N/W. What
// sets a window apart is that every refusal comes when the last W holds
// the same N calls, whatever was sent before; a bucket's refusals come when
// the calls of the last W are what its level W earlier and its refill
// allow, which differ with what came before. The window reading tests
// that, for sliding windows and for fixed ones (N in each W from some
// start), over refusals that came from different loads; since a bucket's
// may still agree by chance, the discovery tries a window read before it
// trusts it.

// windowSpans are the windows tried, shortest first: providers state their
// quotas over round spans (per second, per ten seconds, per minute).
var windowSpans = [...]time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
	15 * time.Second, 30 * time.Second, time.Minute}

// windowHorizon is how long the samples and refusals are kept for the
// window reading: two of the longest window.
const windowHorizon = 2 * time.Minute

// windowSlack is how far apart the calls counted before refusals may be
// for the window reading to take them as the same quota: a twentieth of
// it, as the measure's rate is read within about 5% (fewCalls), and at
// least a call.
func windowSlack(quota float64) float64 {
	return math.Max(1, 0.05*quota)
}

// calls is a count read from the samples, interpolated between them, as
// the whole number of calls a window's quota is: the nearest, at least one.
func calls(n float64) float64 {
	return math.Max(1, math.Round(n))
}

// refusal is a counted throttle as the window reading keeps it: when, and
// the fleet-wide accepted count then.
type refusal struct {
	at       time.Time
	accepted int64
}

// windowLog is the history the window reading needs: the samples of the
// accepted count and the counted throttles of the last windowHorizon, and
// the calls the first throttle came after in each span of windowSpans.
type windowLog struct {
	samples []sample
	refused []refusal
	// origin is the first sample: nothing is counted before it (a
	// process that joins a busy fleet counts less than the provider
	// did, which makes it read no window rather than a wrong one).
	origin sample
	// first holds, for each span, the calls counted in the span before
	// the first throttle: the provider's first refusal, most often
	// after a burst from idle, whose window a window provider had to
	// fill too.
	first [len(windowSpans)]float64
	// firstCame holds, for each span, the calls of the span before
	// that: the load the first refusal came from (see firstLoad), and
	// firstAt when the first refusal came.
	firstCame [len(windowSpans)]float64
	firstAt   time.Time
	firstSet  bool
	// changed is the limit's last change seen (zero: none): when the
	// whole log agrees with no window, the reading takes only what
	// came after it.
	changed shift
}

// add records a sample of the fleet-wide accepted count.
func (w *windowLog) add(s sample) {
	if n := len(w.samples); n > 0 && (!s.at.After(w.samples[n-1].at) || s.accepted < w.samples[n-1].accepted) {
		return
	}
	if w.origin.at.IsZero() {
		w.origin = s
	}
	w.samples = append(w.samples, s)
	w.forget(s.at)
}

// refuse records a counted throttle at at with accepted calls by then,
// whose sample add has taken (the discovery observes a throttle first).
func (w *windowLog) refuse(at time.Time, accepted int64) {
	x := refusal{at: at, accepted: accepted}
	w.refused = append(w.refused, x)
	if !w.firstSet {
		w.countFirst(x)
		w.firstSet = true
	}
}

// countFirst sets what each span held before the first refusal x.
func (w *windowLog) countFirst(x refusal) {
	for i, span := range windowSpans {
		w.first[i], w.firstCame[i], _ = w.loads(reading{window: span}, x)
	}
	w.firstAt = x.at
}

// before counts a call more before the last refusal, at at: its answer
// came after the refusal's, its call before the refused one.
func (w *windowLog) before(at time.Time) {
	n := len(w.refused)
	if n == 0 || !w.refused[n-1].at.Equal(at) {
		return
	}
	w.refused[n-1].accepted++
	if n == 1 {
		w.countFirst(w.refused[0])
	}
}

// rescaled returns the window held with the quota the refusal x says,
// when x ended a surge (the limit rose): a provider that counts its calls
// in windows keeps their length and kind when its limit changes, and a
// window refuses only when full, so the window before x held the new
// quota, however the calls in it were spread. (Not so after a fall: the
// window that refused then still held the calls the old limit allowed.)
// ok is false when no window is held or the samples do not reach that
// far.
func (w *windowLog) rescaled(held reading, x refusal) (reading, bool) {
	if held.window == 0 {
		return reading{}, false
	}
	n, _, ok := w.loads(held, x)
	if !ok || n < 1 {
		return reading{}, false
	}
	held.quota = calls(n)
	return held, true
}

// shift is a change of the limit as the window reading takes it. After a
// fall, the windows before it held more than the new quota allows: only
// the 429s whose windows came after it, and the windows after it, count.
// After a rise (the 429 that ended a surge, at), the 429s before it came
// after fewer calls than the new quota: only it and those after count,
// it taking the place of the night's first 429 (it too came after a
// burst); the windows before it held less, which a window allows.
type shift struct {
	at   time.Time
	rose bool
	// from bounds the window read: after a fall, below the highest rate
	// the limit fell from; after a rise, above the rate it rose from.
	from float64
}

// fell records that the limit fell at at from the rate from: the fleet was
// refused while cruising under it. A fall may follow another before the
// window is read again, from an estimate the first one lowered: the
// highest rate it fell from bounds the new window.
func (w *windowLog) fell(at time.Time, from float64) {
	if !w.changed.rose {
		from = math.Max(from, w.changed.from)
	}
	w.changed = shift{at: at, from: from}
}

// rose records that the limit rose from the rate from, the surge that
// found it ending in the 429 at at.
func (w *windowLog) rose(at time.Time, from float64) {
	w.changed = shift{at: at, rose: true, from: from}
}

// counts reports whether the refusal x counts for a window of the given
// span after the change c.
func (c shift) counts(x refusal, span time.Duration) bool {
	if c.rose {
		return !x.at.Before(c.at)
	}
	return !x.at.Add(-span).Before(c.at)
}

// allows reports whether a window of rate r may be read after the change
// c.
func (c shift) allows(r float64) bool {
	if c.at.IsZero() {
		return true
	}
	if c.rose {
		return r > c.from
	}
	return r < c.from
}

// forget drops what is older than windowHorizon before now, and halves the
// samples when they exceed maxSamples.
func (w *windowLog) forget(now time.Time) {
	cut := 0
	for cut < len(w.samples)-1 && now.Sub(w.samples[cut].at) > windowHorizon {
		cut++
	}
	if len(w.samples)-cut > maxSamples {
		cut = len(w.samples) - maxSamples/2
	}
	if cut > 0 {
		w.samples = append(w.samples[:0], w.samples[cut:]...)
	}
	cut = 0
	for cut < len(w.refused) && w.refused[cut].at.Before(w.samples[0].at) {
		cut++
	}
	if cut > 0 {
		w.refused = append(w.refused[:0], w.refused[cut:]...)
	}
}

// countAt is the accepted count at t, interpolated between the samples
// around it (the calls between two samples spread over their span); ok is
// false before the first sample.
func (w *windowLog) countAt(t time.Time) (float64, bool) {
	n := len(w.samples)
	if n == 0 {
		return 0, false
	}
	if t.Before(w.samples[0].at) {
		// Before the origin nothing is counted; before a sample
		// forgotten, nothing is known.
		return float64(w.origin.accepted), w.samples[0] == w.origin
	}
	lo := sort.Search(n, func(i int) bool { return w.samples[i].at.After(t) }) // the first sample after t
	if lo == n {
		return float64(w.samples[n-1].accepted), true
	}
	a, b := w.samples[lo-1], w.samples[lo]
	f := t.Sub(a.at).Seconds() / b.at.Sub(a.at).Seconds()
	return float64(a.accepted) + f*float64(b.accepted-a.accepted), true
}

// most is the most calls counted in any span of at most span between two
// samples from from on.
func (w *windowLog) most(from time.Time, span time.Duration) float64 {
	best := 0.0
	i := 0
	for j, b := range w.samples {
		if b.at.Before(from) {
			i = j + 1
			continue
		}
		for i < j && b.at.Sub(w.samples[i].at) > span {
			i++
		}
		best = math.Max(best, float64(b.accepted-w.samples[i].accepted))
	}
	return best
}

// reading is a window the refusals are consistent with: quota calls in
// any span of window (sliding), or in each window from phase on (fixed).
type reading struct {
	quota  float64
	window time.Duration
	fixed  bool
	phase  time.Time // a fixed window's start
}

// rate is the window's sustained rate.
func (r reading) rate() float64 { return r.quota / r.window.Seconds() }

// start is when the window that counts the calls before t began.
func (r reading) start(t time.Time) time.Time {
	if !r.fixed {
		return t.Add(-r.window)
	}
	k := t.Sub(r.phase) / r.window
	if t.Sub(r.phase)%r.window < 0 {
		k--
	}
	return r.phase.Add(k * r.window)
}

// phaseSteps is how finely a fixed window's start is sought: to a
// twentieth of the window, as the quota is to a twentieth (windowSlack).
const phaseSteps = 20

// loads counts the calls of the window before at as r counts them (the
// load the provider refused at at) and of the window before that (the load
// the fleet came from); ok is false when the samples do not reach that
// far.
func (w *windowLog) loads(r reading, x refusal) (n, came float64, ok bool) {
	from := r.start(x.at)
	end, ok1 := w.countAt(from)
	before, ok2 := w.countAt(from.Add(-r.window))
	return float64(x.accepted) - end, end - before, ok1 && ok2
}

// holds reports whether no window of r from from on held more than limit
// calls.
func (w *windowLog) holds(r reading, from time.Time, limit float64) bool {
	if !r.fixed {
		return w.most(from, r.window) <= limit
	}
	last := w.samples[len(w.samples)-1]
	for b := r.start(from); b.Before(last.at); b = b.Add(r.window) {
		lo, ok1 := w.countAt(b)
		hi, ok2 := w.countAt(minTime(b.Add(r.window), last.at))
		if ok1 && ok2 && hi-lo > limit {
			return false
		}
	}
	return true
}

// agreeing is how many refusals a new window is read from: two that
// agree may be a bucket's whose levels a window earlier happened to match
// (the more likely as a fixed window's start is sought among phaseSteps);
// three that agree, from loads that differ, are a window's.
const agreeing = 3

// agree reports whether the refusals rs are consistent with r (its quota
// aside), the quota they read and how far apart their counts were (in
// whole calls): the window before each held the same calls, the windows
// before those held counts that differ (the fleet came to them from
// different loads, so a bucket would have refused after different
// counts), no window kept held more (the first refusal's
// neither, though its samples are forgotten), and every other refusal
// kept, the first one too, came after as many (a window refuses only when
// full). A bucket's refusals that agree as a window's, after the same
// cruise and the same pause, are refuted by its first, after a burst from
// idle: that one held more than a window would, or less. The first counts
// among the loads too: a fleet that keeps a long window full (a sliding
// log of 10 s, each cycle a burst then the pause until the window frees)
// comes to every later refusal from the same load, a full window, and
// only the first, from idle, came from another. The quota is the
// median count, in whole calls: the counts agree within windowSlack, and
// one of three off by a call (a call dated across the window's edge) is
// outvoted. The lowest, read below a small quota by one count, cost a
// call in every window (a fifth of the rate at 5 calls a second), and the
// probes' 429s under it confirmed it; one read a call too large costs a
// 429, and the window then refuses full (see confirm), at the count less
// a call. After the change since (when not zero), only the refusals and
// windows it counts are checked.
func (w *windowLog) agree(r reading, rs []refusal, span int, since shift) (quota, spread float64, ok bool) {
	ns := make([]float64, 0, len(rs))
	cameLo, cameHi := math.Inf(1), math.Inf(-1)
	for _, x := range rs {
		n, came, ok := w.loads(r, x)
		if !ok {
			return 0, 0, false
		}
		ns = append(ns, n)
		cameLo, cameHi = math.Min(cameLo, came), math.Max(cameHi, came)
	}
	slices.Sort(ns)
	lo, hi := ns[0], ns[len(ns)-1]
	least, most := lo-windowSlack(lo), lo+windowSlack(lo)
	if hi-lo > windowSlack(lo) || !w.holds(r, w.from(r, since), most) {
		return 0, 0, false
	}
	// The first refusal's span held the quota, and (before a sliding
	// window's refusal) no more.
	first, firstCame, cameKnown := w.firstLoad(r, span, since)
	if first < least || !r.fixed && first > most {
		return 0, 0, false
	}
	if cameKnown {
		cameLo, cameHi = math.Min(cameLo, firstCame), math.Max(cameHi, firstCame)
	}
	if cameHi-cameLo <= windowSlack(lo) {
		return 0, 0, false
	}
	for _, x := range w.refused {
		if n, _, ok := w.loads(r, x); ok && n < least && since.counts(x, r.window) {
			return 0, 0, false
		}
	}
	// In whole calls (calls rounds without reordering: the median of
	// the counts rounded is the rounded median).
	return calls(ns[len(ns)/2]), calls(hi) - calls(lo), true
}

// firstLoad is what the first refusal's window held and the one before it
// (the load it came from), for the span'th of windowSpans, and whether
// that load is known: the samples reach back to it, or the refusal's own
// window reaches back to the origin (the night's first burst filled it
// from idle; a process that joined a busy fleet counts such a window
// short). Since a change, the first is the first refusal that counts
// after it, counted as r counts.
func (w *windowLog) firstLoad(r reading, span int, since shift) (n, came float64, known bool) {
	n, came, at := w.first[span], w.firstCame[span], w.firstAt
	if !since.at.IsZero() {
		for _, x := range w.refused {
			if since.counts(x, r.window) {
				n, came, _ = w.loads(r, x)
				at = x.at
				break
			}
		}
	}
	from := r.start(at)
	return n, came, !from.Add(-r.window).Before(w.origin.at) || !from.After(w.origin.at)
}

// from is where the windows of r the reading checks start: at the first
// sample kept, or after a fall at the first window that starts after it.
func (w *windowLog) from(r reading, since shift) time.Time {
	from := w.samples[0].at
	if !since.rose && since.at.After(from) {
		from = since.at
		if r.fixed && r.start(from).Before(from) {
			from = r.start(from).Add(r.window)
		}
	}
	return from
}

// confirm reports whether the refusal x confirms the window held: the
// window before it held the held quota, and none since held more; n is
// the calls it held. A fixed window's start was sought to a phaseSteps-th
// of the window, and a refusal comes when the window is full, most often
// at its very end. A start found a few milliseconds early puts such a
// refusal in the next window, nearly empty, less than a step into it: a
// fixed window refuses only when full, so the window that refused ends
// after the refusal, and the start moves there. One found a step late
// misses the calls at the window's start: the start moves a step
// earlier. The reading returned keeps the start the refusal confirms (the
// provider's windows do not move; the start read of them is refined at
// each refusal).
func (w *windowLog) confirm(held reading, x refusal) (r reading, n float64, ok bool) {
	if held.window == 0 {
		return reading{}, 0, false
	}
	slack := windowSlack(held.quota)
	confirms := func(r reading, n float64) bool {
		return math.Abs(n-r.quota) <= slack && w.holds(r, r.start(x.at), r.quota+slack)
	}
	n, _, ok = w.loads(held, x)
	if !ok {
		return reading{}, 0, false
	}
	if confirms(held, n) {
		return held, n, true
	}
	if !held.fixed {
		return reading{}, 0, false
	}
	var tries []reading
	if n <= slack && x.at.Sub(held.start(x.at)) < held.window/phaseSteps {
		after := held
		after.phase = x.at.Add(time.Nanosecond)
		tries = append(tries, after)
	}
	early := held
	early.phase = held.phase.Add(-held.window / phaseSteps)
	for _, r := range append(tries, early) {
		if n, _, ok := w.loads(r, x); ok && confirms(r, n) {
			return r, n, true
		}
	}
	return reading{}, 0, false
}

// kind is the reading's kind of window, in words.
func (r reading) kind() string {
	if r.fixed {
		return "a fixed window"
	}
	return "a sliding window"
}

// same reports whether r and o are the same window, a fixed window's start
// aside (confirm refines it).
func (r reading) same(o reading) bool {
	return r.quota == o.quota && r.window == o.window && r.fixed == o.fixed
}

// read returns the window the refusals are consistent with, within
// windowSlack. While a window is held, the last refusal confirms it
// when the window before it held the held quota and no window held more.
// Otherwise it returns the shortest window, sliding or fixed at any start,
// for which the last agreeing refusals agree (when several do, the one
// whose counts agree most closely, then the lowest rate: a window refuses
// at its quota, so the counts of the provider's own agree to the call,
// and at 5 calls a second a fixed window at some start, whose counts
// differed by one, read 4 where the sliding one read 5, 5 and 5). ok is
// false when none is.
func (w *windowLog) read(held reading) (reading, bool) {
	if len(w.refused) == 0 {
		return reading{}, false
	}
	last := w.refused[len(w.refused)-1]
	if r, _, ok := w.confirm(held, last); ok {
		return r, true
	}
	if len(w.refused) < agreeing {
		return reading{}, false
	}
	if r, ok := w.readSince(shift{}); ok {
		return r, true
	}
	if w.changed.at.IsZero() {
		return reading{}, false
	}
	if r, ok := w.readSince(w.changed); ok && w.changed.allows(r.rate()) {
		return r, true
	}
	return reading{}, false
}

// spread returns the last refusal and, going back, the agreeing − 1 before
// it that each came at least half a window of span before the one taken
// after it, oldest first; nil when the log holds too few. The windows
// before two closer refusals share most of their calls, and agree
// whatever the provider is. When the last agreeing refusals are that far
// apart, they are the ones returned.
func spread(refused []refusal, span time.Duration) []refusal {
	rs := make([]refusal, agreeing)
	k := agreeing - 1
	rs[k] = refused[len(refused)-1]
	for i := len(refused) - 2; i >= 0 && k > 0; i-- {
		if rs[k].at.Sub(refused[i].at) >= span/2 {
			k--
			rs[k] = refused[i]
		}
	}
	if k > 0 {
		return nil
	}
	return rs
}

// readSince returns the shortest window for which the last agreeing
// refusals agree, from what the log holds after the change since (all of
// it when zero); ok is false when none does. When the last ones are
// closer than half a window of a span (a cruise's 429 a few seconds after
// each probe's, under a long window), those spread half a window apart
// are read instead, for a quota of at least fewCalls: of fewer, a call's
// slack is too wide for three refusals chosen among many to say anything
// (a bucket of one call agrees with a window of one).
func (w *windowLog) readSince(since shift) (reading, bool) {
	last := w.refused[len(w.refused)-1]
	for i, span := range windowSpans {
		rs := spread(w.refused, span)
		if rs == nil {
			break
		}
		least := 0.0
		if rs[0] != w.refused[len(w.refused)-agreeing] {
			least = fewCalls
		}
		if _, ok := w.countAt(rs[0].at.Add(-2 * span)); !ok || !since.counts(rs[0], span) {
			break
		}
		best, bestSpread, found := reading{}, 0.0, false
		try := func(r reading) {
			quota, spread, ok := w.agree(r, rs, i, since)
			if !ok || quota < least {
				return
			}
			if !found || spread < bestSpread || spread == bestSpread && quota < best.quota {
				r.quota = quota
				best, bestSpread, found = r, spread, true
			}
		}
		try(reading{window: span})
		for g := 1; g <= phaseSteps; g++ {
			try(reading{window: span, fixed: true, phase: last.at.Add(-span * time.Duration(g) / phaseSteps)})
		}
		if found {
			return best, true
		}
	}
	return reading{}, false
}
