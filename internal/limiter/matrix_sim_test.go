package limiter

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// The discovery matrix's simulation: every consumer process is a Shared
// without a pool (its discovery, its local slots, its Observe and apply as
// they run in production), the row is the test model of the statements
// (bucket, and the rules of penaliseSQL and leaseSQL that
// TestStatementsMatchModel checks), and the provider is a
// providersim.Meter, all on a simulated clock: callers always want a token,
// answers come back after a fixed latency. It is deterministic and
// event-driven.

// raStyle is how the simulated provider says when to call again.
type raStyle struct {
	style providersim.RetryAfterStyle
	min   time.Duration // whole seconds: at least this
}

func (r raStyle) String() string {
	switch r.style {
	case providersim.RetryAfterExact:
		return "exact"
	case providersim.RetryAfterAbsent:
		return "absent"
	}
	return fmt.Sprintf("%ds", int(r.min/time.Second))
}

// pause is the Retry-After the provider gives for a wait, and whether it
// gives one.
func (r raStyle) pause(wait time.Duration) (time.Duration, bool) {
	switch r.style {
	case providersim.RetryAfterExact:
		return wait, true
	case providersim.RetryAfterAbsent:
		return 0, false
	}
	return max(time.Duration(math.Ceil(wait.Seconds()))*time.Second, r.min), true
}

// nightSpec is one simulated night.
type nightSpec struct {
	alg     providersim.Algorithm
	sched   providersim.Schedule
	burst   int           // the buckets' size
	window  time.Duration // the windows' length
	headers bool          // IETF RateLimit fields on every answer
	ra      raStyle
	latency time.Duration
	procs   int
	ceiling float64 // the limit set
	told    int     // its burst
	length  time.Duration
	// stored, when set, is what an earlier night left in the row: its
	// estimate and bucket, two refusals, a throttle hours old.
	stored [2]float64
	// offset is how long after the provider's clock started the
	// processes make their first lease, and jitter how much longer than
	// latency every answer takes (see matrixPhases).
	offset, jitter time.Duration
	// coldSpread is how much longer, at most, the answers to the calls
	// sent in the night's first second take, spread evenly over the
	// calls: a consumer whose workers all start at once opens a
	// connection for each, and the first answers come back unevenly.
	// Answered hears each answer's own latency. 0 in the matrix.
	coldSpread time.Duration
	// idle is how long after its first read of the row each process
	// makes its first lease (and call): a consumer claims its first
	// messages meanwhile. 0 in the matrix.
	idle time.Duration
}

// nightSecond is one second of a simulated night, as the provider saw it.
type nightSecond struct {
	calls, accepted, throttled int
}

// nightResult is what a simulated night measured.
type nightResult struct {
	series []nightSecond
	// supply is the most the provider could have accepted.
	supply float64
	// early counts calls a process sent inside a Retry-After window it
	// knew of.
	early   int
	changes []change // the first process's history
}

func (r nightResult) count(from, to int) (calls, accepted, throttled int) {
	for _, s := range r.series[from:min(to, len(r.series))] {
		calls += s.calls
		accepted += s.accepted
		throttled += s.throttled
	}
	return calls, accepted, throttled
}

func (r nightResult) efficiency() float64 {
	_, a, _ := r.count(0, len(r.series))
	return float64(a) / r.supply
}

// firstMeasure is the first process's first change of the estimate measured
// between two 429s; nil when none was.
func (r nightResult) firstMeasure() *change {
	for i, ch := range r.changes {
		if ch.cause == causeEstimate && strings.HasPrefix(ch.detail, "measured") {
			return &r.changes[i]
		}
	}
	return nil
}

// throttledSeconds is how many seconds from second from on had a call
// answered 429: in a steady night once measured, one a probe.
func (r nightResult) throttledSeconds(from int) int {
	n := 0
	for _, s := range r.series[from:] {
		if s.throttled > 0 {
			n++
		}
	}
	return n
}

// throttleShare is the share of calls answered 429 from second from on.
func (r nightResult) throttleShare(from int) float64 {
	calls, _, throttled := r.count(from, len(r.series))
	if calls == 0 {
		return 0
	}
	return float64(throttled) / float64(calls)
}

// risenBy returns the seconds after second at until three whole seconds
// average within 10% of limit (the rise is used); span when they never do.
func (r nightResult) risenBy(at int, limit float64, span int) int {
	for s := at; s+3 <= at+span; s++ {
		_, a, _ := r.count(s, s+3)
		if math.Abs(float64(a)/3-limit) <= 0.1*limit {
			return s - at
		}
	}
	return span
}

// obeyedBy returns the seconds after second at until three whole seconds
// draw at most 10% of limit's calls in 429s, and the two of a probe (the
// calls beyond the new limit have stopped); span when they never do.
func (r nightResult) obeyedBy(at int, limit float64, span int) int {
	for s := at; s+3 <= at+span; s++ {
		_, _, th := r.count(s, s+3)
		if float64(th) <= 0.1*limit*3+2 {
			return s - at
		}
	}
	return span
}

// nightRow is the limiter's row as the statements keep it, with the
// discovery on (the test model of statements_test.go).
type nightRow struct {
	b                 *bucket // the shared bucket, at the effective rate
	rate              float64 // configured
	burst             int
	holdUntil         time.Time
	throttles         int64
	refusals          int
	accepted          int64
	throttledAt       time.Time
	throttledAccepted int64
	estimate          float64
	estimateBurst     float64
	settingsAt        time.Time
	steeredAt         time.Time // increased_at: the last lease that set the rate
}

// state is the row as a statement at now returns it.
func (w *nightRow) state(now time.Time) rowState {
	r := rowState{Rate: w.rate, Burst: w.burst, EffectiveRate: w.b.rate, Throttles: w.throttles, Accepted: w.accepted,
		ThrottledAccepted: w.throttledAccepted, SettingsAt: w.settingsAt, Refusals: w.refusals, Now: now}
	if !w.b.penaltyUntil.IsZero() {
		r.PenaltyUntil = new(w.b.penaltyUntil)
	}
	if !w.throttledAt.IsZero() {
		r.ThrottledAt = new(w.throttledAt)
	}
	if w.estimate > 0 {
		r.Estimate, r.EstimateBurst = new(w.estimate), new(w.estimateBurst)
	}
	if !w.steeredAt.IsZero() {
		r.SteeredAt = new(w.steeredAt)
	}
	return r
}

// floor is the effective rate's floor.
func (w *nightRow) floor() float64 { return math.Min(DefaultFloor(w.rate), w.rate) }

// penalise is penaliseSQL with the discovery on: the pause, the release
// when it ends, the fleet's count, and a counted throttle (a refusal;
// from the trustedRefusals-th on it halves the effective rate).
func (w *nightRow) penalise(now time.Time, pause time.Duration, counted bool, refill float64, accepted int64) {
	w.b.Penalise(now, pause, refill)
	w.accepted += accepted
	if !counted {
		return
	}
	w.throttles++
	if now.Before(w.holdUntil) {
		return
	}
	if w.refusals+1 >= trustedRefusals {
		w.b.SetLimit(now, math.Max(w.floor(), w.b.rate*DefaultDecrease), w.burst)
	}
	w.holdUntil = now.Add(max(pause, minHold))
	w.refusals++
	w.throttledAt, w.throttledAccepted = now, w.accepted
}

// lease is leaseSQL with the discovery on.
func (w *nightRow) lease(now time.Time, want int, window time.Duration, rep report, follow float64, store stored) leaseResult {
	eff := w.b.rate
	leads := store.led.Equal(w.throttledAt)
	if follow > 0 && leads {
		eff = math.Min(w.rate, follow)
		w.steeredAt = now
	}
	if rep.hintRate > 0 {
		eff = math.Min(eff, rep.hintRate)
	}
	eff = math.Max(w.floor(), eff)
	n, avail, at := w.b.Lease(now, want, window, store.capacity, eff)
	w.b.SetLimit(now, eff, w.burst)
	w.accepted += rep.accepted
	if store.estimate > 0 && store.burst > 0 && store.settingsAt.Equal(w.settingsAt) && leads {
		w.estimate, w.estimateBurst = store.estimate, store.burst
	}
	res := leaseResult{row: w.state(now), n: n, avail: avail, t0: at, penalised: now.Before(w.b.penaltyUntil),
		penaltyUntil: w.b.penaltyUntil}
	return res
}

// nightProc is one consumer process.
type nightProc struct {
	l        *Shared
	retryAt  time.Duration // no lease before (local.retryAt, as an offset)
	lastRead time.Duration
	// The arrival times of accepted answers on their way back, oldest
	// first from head.
	inflight []inflight
	head     int
}

// inflight is an accepted call's answer on its way back: when it arrives,
// and how long after its call.
type inflight struct{ at, took time.Duration }

// answer is an answer on its way back.
type nightAnswer struct {
	at    time.Duration
	proc  int
	ok    bool
	pause time.Duration // Retry-After of a 429
	given bool          // a Retry-After was sent
	hints Hints
	took  time.Duration // how long after its call it arrives
}

// raWindows are the Retry-After windows the provider gave, per process that
// got them, merged where they overlap: from a 429's arrival to the end of
// its Retry-After.
type raWindows [][]struct{ from, until time.Duration }

func (w raWindows) add(proc int, from, until time.Duration) {
	list := w[proc]
	if n := len(list); n > 0 && from <= list[n-1].until {
		list[n-1].until = max(list[n-1].until, until)
		return
	}
	w[proc] = append(list, struct{ from, until time.Duration }{from, until})
}

// check returns 1 when a call sent at at by proc falls inside a Retry-After
// window it must honour: its own from the 429's arrival, another
// process's from the lease round after it (the slots it had leased by then
// are spent, as the design allows: two lease windows).
//
//go:norace
func (w raWindows) check(at time.Duration, proc int) int {
	hit := 0
	for q, list := range w {
		for len(list) > 0 && at >= list[0].until {
			list = list[1:]
		}
		w[q] = list
		grace := time.Duration(0)
		if q != proc {
			grace = 2 * DefaultLeaseWindow
		}
		for _, x := range list {
			if at >= x.from+grace && at < x.until {
				hit = 1
			}
		}
	}
	return hit
}

// night is one simulated night in progress.
type night struct {
	sp      nightSpec
	start   time.Time
	now     time.Time // the simulated clock every process reads
	row     *nightRow
	procs   []*nightProc
	meter   *providersim.Meter
	answers []nightAnswer
	head    int
	windows raWindows
	res     nightResult
	cold    int // calls sent in the first second, for coldSpread
}

func (n *night) at(d time.Duration) time.Time { return n.start.Add(d) }
func (n *night) off(t time.Time) time.Duration {
	return t.Sub(n.start)
}

// simulateNight runs one night.
func simulateNight(sp nightSpec) nightResult {
	meter, err := providersim.NewMeter(sp.alg, sp.sched, sp.burst, sp.window)
	if err != nil {
		panic(err)
	}
	n := &night{sp: sp, start: t0, meter: meter, windows: make(raWindows, sp.procs)}
	n.now = t0
	n.res.series = make([]nightSecond, int(sp.length/time.Second))
	n.res.supply = nightSupply(sp)
	n.row = &nightRow{rate: sp.ceiling, burst: sp.told, settingsAt: t0.Add(-10 * time.Hour), b: newBucket(sp.ceiling, sp.told, t0)}
	if sp.stored[0] > 0 {
		n.row.refusals, n.row.estimate, n.row.estimateBurst = trustedRefusals, sp.stored[0], sp.stored[1]
		n.row.throttledAt = t0.Add(-8 * time.Hour)
		n.row.b.penaltyUntil = n.row.throttledAt.Add(time.Second)
		n.row.b.SetLimit(t0, math.Min(sp.stored[0], sp.ceiling), sp.told)
	}
	for range sp.procs {
		cfg := Config{Name: "night", Now: func() time.Time { return n.now }, LocalClock: true}.WithDefaults()
		l := &Shared{cfg: cfg, local: newLocal(cfg.LeaseWindow), disc: newDiscovery(cfg.Decrease, cfg.LeaseWindow)}
		l.apply(n.row.state(t0), t0)
		n.procs = append(n.procs, &nightProc{l: l, retryAt: sp.offset + sp.idle, lastRead: sp.offset})
	}
	n.run()
	n.res.changes = append(n.res.changes, n.procs[0].l.disc.takeChanges()...)
	return n.res
}

// Event kinds of the loop.
const (
	evAnswer = iota
	evSend
	evLease
	evPoll
)

func (n *night) run() {
	end := n.sp.length
	clock := time.Duration(0)
	for {
		next, who, what := end, -1, evAnswer
		if n.head < len(n.answers) && n.answers[n.head].at < next {
			next = n.answers[n.head].at
		}
		for i, p := range n.procs {
			t, kind := n.nextOf(p, clock)
			if t < next {
				next, who, what = t, i, kind
			}
		}
		if next >= end {
			return
		}
		clock = next
		n.now = n.at(clock)
		switch {
		case who < 0:
			a := n.answers[n.head]
			n.head++
			if n.head > 4096 && n.head > len(n.answers)/2 {
				n.answers = append(n.answers[:0], n.answers[n.head:]...)
				n.head = 0
			}
			n.answer(a)
		case what == evSend:
			clock = n.send(who, clock)
		case what == evLease:
			n.lease(who, clock)
		default:
			p := n.procs[who]
			n.arrived(p, clock)
			p.l.apply(n.row.state(n.now), n.now)
			p.lastRead = clock
			n.keepChanges(who)
		}
	}
}

// nextOf is process p's next event after clock: a call on its next slot
// (slots the pause or the lease window voided are dropped first), a lease
// when it has none, or a poll of the row.
//
//go:norace
func (n *night) nextOf(p *nightProc, clock time.Duration) (time.Duration, int) {
	loc := p.l.local
	for len(loc.slots) > 0 {
		s := n.off(loc.slots[0])
		switch {
		case s < n.off(loc.penalty):
			loc.slots = loc.slots[1:] // the pause drops it
		case s+loc.window < clock:
			loc.slots = loc.slots[1:] // expired unused
		default:
			return max(s, clock), evSend
		}
	}
	t := max(clock, p.retryAt, n.off(loc.penalty))
	if poll := p.lastRead + p.l.cfg.PollInterval; poll < t {
		return max(clock, poll), evPoll
	}
	return t, evLease
}

// lease is Shared.fetch against the row model.
func (n *night) lease(who int, clock time.Duration) {
	p := n.procs[who]
	l, now := p.l, n.now
	n.arrived(p, clock)
	want := l.local.leaseSize(now, math.MaxInt32, l.snap.EffectiveRate, l.snap.Burst)
	rep := l.local.takeReport()
	follow, store := l.steer(now)
	if !rep.hintStop.IsZero() {
		n.row.penalise(now, rep.hintStop.Sub(now), false, 1, 0)
	}
	res := n.row.lease(now, want, l.cfg.LeaseWindow, rep, follow, store)
	l.apply(res.row, now)
	l.local.leased(now, want, res)
	p.retryAt = n.off(l.local.retryAt)
	p.lastRead = clock
	n.keepChanges(who)
}

// throttle is Shared.Throttled of a 429 with the given Retry-After (0:
// none) against the row model.
func (n *night) throttle(who int, retryAfter time.Duration) {
	p := n.procs[who]
	l, now := p.l, n.now
	until := now.Add(retryAfter)
	l.local.stop(until)
	refill := l.disc.refused(now, retryAfter)
	accepted := l.local.takeAccepted()
	n.row.penalise(now, retryAfter, true, refill, accepted)
	l.apply(n.row.state(now), now)
	p.lastRead = n.off(now)
	n.keepChanges(who)
}

// answer takes an answer that came back: hints go to Observe, an accepted
// call to Succeeded, a 429 to Throttled.
func (n *night) answer(a nightAnswer) {
	p := n.procs[a.proc]
	if a.hints != (Hints{}) {
		p.l.Observe(a.hints)
	}
	if a.ok {
		return
	}
	n.arrived(p, a.at)
	p.l.Answered(a.took)
	n.throttle(a.proc, a.pause)
}

// arrived reports the accepted answers back by clock, as Answered and
// Succeeded do for each.
//
//go:norace
func (n *night) arrived(p *nightProc, clock time.Duration) {
	now := n.now
	for p.head < len(p.inflight) && p.inflight[p.head].at <= clock {
		// Each at its time, as Answered and Succeeded take it.
		a := p.inflight[p.head]
		n.now = n.at(a.at)
		p.head++
		p.l.Answered(a.took)
		p.l.Succeeded()
	}
	n.now = now
	if p.head > 4096 && p.head > len(p.inflight)/2 {
		p.inflight = append(p.inflight[:0], p.inflight[p.head:]...)
		p.head = 0
	}
}

// send makes process who's calls from its next slot on while they come
// before every other event (or an answer of these calls that is one) and it
// is not paused: each is counted against the meter, in the per-second
// series and against the Retry-After windows. It returns the time of the
// last call. The simulation spends most of its time here, on one goroutine
// per night: the race detector has nothing to look for in it.
//
//go:norace
func (n *night) send(who int, clock time.Duration) time.Duration {
	p := n.procs[who]
	loc := p.l.local
	limit := n.sp.length
	if n.head < len(n.answers) {
		limit = n.answers[n.head].at
	}
	for i, q := range n.procs {
		if i != who {
			t, _ := n.nextOf(q, clock)
			limit = min(limit, t)
		}
	}
	limit = min(limit, p.lastRead+p.l.cfg.PollInterval)
	last := clock
	for first := true; len(loc.slots) > 0; first = false {
		sent := max(n.off(loc.slots[0]), clock)
		if !first && (sent >= limit || sent < n.off(loc.penalty)) || sent >= n.sp.length {
			break
		}
		loc.slots = loc.slots[1:]
		last = sent
		ok, wait, _ := n.meter.Take(sent)
		sec := &n.res.series[int(sent/time.Second)]
		sec.calls++
		took := n.sp.latency + n.sp.jitter
		if sent < time.Second && n.sp.coldSpread > 0 {
			// The golden ratio's multiples spread the calls' extra
			// latency evenly over [0, coldSpread).
			n.cold++
			took += time.Duration(math.Mod(float64(n.cold)*0.6180339887, 1) * float64(n.sp.coldSpread))
		}
		arrive := sent + took
		n.res.early += n.windows.check(sent, who)
		if ok {
			sec.accepted++
			p.inflight = inArrivalOrder(p.inflight, p.head, inflight{at: arrive, took: took}, func(x inflight) time.Duration { return x.at })
			if !n.sp.headers {
				continue
			}
		} else {
			sec.throttled++
		}
		ans := nightAnswer{at: arrive, proc: who, ok: ok, took: took}
		if !ok {
			ans.pause, ans.given = n.sp.ra.pause(wait)
			if ans.given {
				n.windows.add(who, ans.at, ans.at+ans.pause)
			}
		}
		if n.sp.headers {
			q, remaining, w, reset := n.meter.Quota(sent)
			// Delta seconds rounded up, read from the call's send time
			// as the consumer does.
			ans.hints = Hints{Remaining: remaining, HasRemaining: true, Quota: q, Window: w, Sent: n.at(sent),
				Reset: n.at(sent + time.Duration(math.Ceil(reset.Seconds()))*time.Second)}
		}
		n.answers = inArrivalOrder(n.answers, n.head, ans, func(x nightAnswer) time.Duration { return x.at })
		limit = min(limit, arrive)
	}
	return last
}

// inArrivalOrder inserts x into l, whose items from head on are in the
// order they arrive (at), after those that arrive at the same time: at the
// end when every answer takes as long.
func inArrivalOrder[T any](l []T, head int, x T, at func(T) time.Duration) []T {
	i := len(l)
	for i > head && at(l[i-1]) > at(x) {
		i--
	}
	return slices.Insert(l, i, x)
}

// keepChanges keeps the history of the first process and drops the
// others'.
func (n *night) keepChanges(who int) {
	d := n.procs[who].l.disc
	if len(d.changes) == 0 {
		return
	}
	c := d.takeChanges()
	if who == 0 && len(n.res.changes) < 4096 {
		n.res.changes = append(n.res.changes, c...)
	}
}

// nightSupply is the most a provider of the spec could accept in the night:
// a bucket's size plus its rate over the time; a window's quota for every
// window that starts in the night.
func nightSupply(sp nightSpec) float64 {
	step := 10 * time.Millisecond
	switch sp.alg {
	case providersim.SlidingLog, providersim.FixedWindow:
		total := 0.0
		for at := time.Duration(0); at < sp.length; at += sp.window {
			total += math.Max(1, math.Floor(sp.sched.RateAt(at)*sp.window.Seconds()+1e-9))
		}
		return total
	}
	total := float64(sp.burst)
	for at := time.Duration(0); at < sp.length; at += step {
		total += sp.sched.RateAt(at) * step.Seconds()
	}
	return total
}

func formatNight(series []nightSecond) string {
	var s []byte
	for i, x := range series {
		s = fmt.Appendf(s, "%d:%d/%d ", i, x.accepted, x.throttled)
	}
	return string(s)
}
