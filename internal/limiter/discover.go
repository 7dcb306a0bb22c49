package limiter

import (
	"fmt"
	"math"
	"time"

	"github.com/reconcile/reconcile/internal/human"
)

// The discovery's shape (see discovery).
const (
	// cruiseShare is the share of the estimate used between probes: the
	// estimate is a lower bound of the provider's rate, so the margin only
	// absorbs measurement noise.
	cruiseShare = 0.99
	// firstProbe is the probe period after a change of the estimate; it
	// doubles at each probe that finds the estimate unchanged, up to
	// longestPeriod.
	firstProbe = 5 * time.Second
	// measureProbe is how soon a probe starts after a throttle that came
	// unexpectedly (at start-up, or while cruising: the limit fell), when
	// the estimate is only a guess.
	measureProbe = time.Second
	// probeSlope is how fast a probe raises the rate above the estimate: a
	// share of the estimate per second, plus the provider's burst per
	// second, so that a full bucket is drained and the 429 due within
	// about 1.5 s whatever the burst.
	probeSlope = 0.2
	// probeShare is the most of a steady hour's calls the probes may cost
	// (see longestPeriod): 0.4%, under the 1% of calls a night may see
	// answered 429, because a probe draws more 429s than the one its cost
	// counts (the calls in flight when it is refused).
	probeShare = 0.004
	// probeStart is the probe's first step above the estimate.
	probeStart = 0.02
	// surgeDoubling is how fast the rate grows once a probe has outlived the
	// moment its 429 was due.
	surgeDoubling = 500 * time.Millisecond
	// heldWithin is how close a new estimate must be to the last one for a
	// probe to count as finding the limit unchanged.
	heldWithin = 0.03
	// hintFresh is how long a rate read from response headers paces the
	// limiter after the last response that carried it.
	hintFresh = 2 * time.Second
	// comebackWatch is how long after the limit fell the probes keep to
	// firstProbe while the estimate stays under comebackShare of the rate
	// before the fall: limits that drop tend to come back, and a probe
	// that costs part of a pause would otherwise find the return only after
	// the probe period has grown.
	comebackWatch = 60 * time.Second
	comebackShare = 0.9
	// comebackProbe is the probe period while watching for a comeback
	// when a probe costs nothing but its 429s (the pause's refill is
	// released at once), so that a return is found within a second or
	// so; when a probe costs part of a pause it is firstProbe.
	comebackProbe = time.Second
	// heldFor is how long the provider must have accepted the configured
	// rate at start-up for a first 429 to count as a fall from it: the
	// comeback watch then looks for the rate held, and the burst learned
	// from the start is capped (maxBurstSeconds). The calls accepted
	// before such a 429 are a deep bucket drained, a long window filled
	// (a sliding log of 10 s fills in 3.3 s at three times its rate) or a
	// limit that fell, and the start cannot tell which. 2 s is a
	// judgement, not derived: a bucket of a second of the rate, drained
	// by a fleet told more than 1.5 times the rate, is not read as a fall.
	// Without the rule, or without the cap, the matrix loses cells
	// (docs/performance.md, "A first 429 after the limit set held").
	heldFor = 2 * time.Second
	// maxSamples bounds the samples of the accepted count kept between two
	// throttles.
	maxSamples = 4096
)

// refusedLevel is the most the provider's bucket holds when it refuses a
// call: less than the call's token. A call sent just after the refused one
// may find that token whole and be accepted; a bucket taken to be empty
// would read it as a rate as fast as the two calls were close.
const refusedLevel = 1

// fewCalls is the fewest calls between two 429s that measure the rate
// within about 5%.
const fewCalls = 20

// trustedRefusals is how many refusals of the limit set (counted throttles
// since rate and burst were set) the discovery takes before it measures the
// provider instead: one 429 may be the jitter of a first second or another
// client's burst; two are the provider's word. The second one also ends the
// first clean measurement: a fleet sending at the limit set, above the
// provider's, empties the provider's bucket at both 429s.
const trustedRefusals = 2

// phase is where the discovery is in its cycle.
type phase int

const (
	// phaseCold: no throttle yet; the configured rate is in force.
	phaseCold phase = iota
	// phaseRefused: the provider refused the limit set once; it stays in
	// force until the second refusal, which measures the provider.
	phaseRefused
	// phaseCruise: at cruiseShare of the estimate until the next probe.
	phaseCruise
	// phaseProbe: above the estimate, rising by probeSlope.
	phaseProbe
	// phaseSurge: a probe outlived its due 429; doubling every
	// surgeDoubling until the next 429 measures the new rate.
	phaseSurge
)

func (p phase) String() string {
	return [...]string{"cold", "refused", "cruise", "probe", "surge"}[p]
}

// Causes of a change of the rate, as the history records them.
const (
	causeThrottle = "throttle" // a 429 the discovery did not expect: the limit fell, or the limit set was refused
	causeProbe    = "probe"    // a probe started, grew fast, or ended in a 429 that measured the rate
	causeHint     = "hint"     // response headers pace the limiter
	causeEstimate = "estimate" // a measurement changed the estimate, or a process started from the stored one
)

// change is one change of the effective rate with its cause, for the
// history.
type change struct {
	at       time.Time
	cause    string
	rate     float64 // the rate from then on
	estimate float64 // the provider's estimated rate; 0 unknown
	burst    float64 // the provider's estimated burst; 0 unknown
	detail   string
}

// sample is the fleet-wide count of accepted calls at a time, and the
// calls this process had reported by then.
type sample struct {
	at       time.Time
	accepted int64
	own      int64
	// answer: counted at the answer to a call of this process, which
	// the provider took at the sample's time (see discovery.succeeded).
	answer bool
}

// span is what a span between two 429s held: the calls accepted, and the
// seconds from the pause's end to the second 429's call.
type span struct {
	calls, secs float64
	own         bool // every call counted is this process's
}

// discovery finds the provider's rate limit by measuring it, as a pure state
// machine: its inputs are the time, the fleet-wide count of accepted calls
// (from the row, and this process's answers as they come), the throttles
// that lower the rate (from the row, so every process sees the same ones),
// the rate the fleet is sent at, header hints and how long the answers take
// (the counts are dated by when their calls were sent: sentBy); its output
// is the rate to send at and the tokens the provider refilled during a
// pause.
//
// Between two 429s the provider's bucket is empty at both ends (less than
// the refused call's token), so the provider's rate R is the smallest rate
// at which a token bucket of the provider's burst B, so empty at the first
// 429 and fed at R, accepts every call accepted in between without going
// below zero: measure replays the counts against such a bucket (which
// models the tokens the provider lost while its bucket was full) and
// bisects for R. At start-up the calls accepted before the first 429 give
// B once R is known. Calls the bucket alone may have held at the pause's
// end bound B, not R: a span with fewer than fewCalls beyond them is too
// rough to measure (rough), and the rate halves until the next 429.
//
// Between probes the rate cruises at cruiseShare of the estimate. A probe
// rises above it; its 429 measures the rate again. It first spends the
// level the span has followed since the last 429, at a rate that comes
// down as that runs out (see probing), so that few calls are refused with
// its 429. When it finds the same rate the probe period doubles (from
// firstProbe up to the period at which probes cost probeShare of the
// calls: longestPeriod); after a change it starts again at firstProbe. A
// probe that outlives the moment its 429 was due (more calls accepted than
// the estimate and B allow) has found a raised limit and doubles the rate
// every surgeDoubling until the 429 comes. That 429, or a probe's that
// measured well above the estimate, measured a span that began under the
// old limit: while a probe costs only its 429s, the next one comes
// measureProbe after the pause. A 429 while cruising means the
// limit fell: the rate halves and a probe follows within measureProbe, so
// the next 429 measures the new rate. So does a first 429 after the
// configured rate held for heldFor. For comebackWatch after a fall (the
// latest; while it watches, for the rate before the first), while the
// estimate stays under comebackShare of that rate, the probes come every
// comebackProbe after a pause when they cost only their 429s (firstProbe
// when they cost part of a pause): limits that drop tend to come back.
//
// When a pause ends the fleet spends at once what the bucket holds of the
// pause's refill (refill), from the pause's end (paused: the calls in
// flight at the counted 429, refused too, end it later). A 429 while those
// calls are being spent says the bucket holds fewer than were released,
// not that the rate fell: the bucket is taken as what it held
// (heldBucket) and the estimate kept. A bucket taken a call or two too
// deep otherwise drew a 429 at every resume, each read as a fall. If the
// next 429 comes while cruising, it was a fall that landed in the release:
// the rate halves and the bucket is taken back. The mirror: a bucket taken
// too shallow reads the calls as a faster rate, and the cruise at it is
// refused soon after a pause. Each span between two 429s holds the bucket
// plus the rate times its time since the pause, so that span and the one
// measured before it, solved together, give both (deeper); when they give
// a deeper bucket and a rate a little lower, the fleet cruises under them
// instead of halving.
//
// A window of calls (at most N in any W, or in each W from some start)
// reads as a bucket refilled at whatever rate the fleet cruises at, and
// the measure settles there, however far under N/W. So each measuring 429
// also asks whether the last ones agree with a window (see window.go);
// when one says more than the bucket, the fleet cruises at it on trial,
// and a 429 while cruising on trial refutes it: back to the bucket's
// measure, and no window is read for windowHorizon. Past its trial, a 429
// while cruising that finds the window full lowers its quota to what it
// held (the quota was read high); one that finds it far from full is a
// fall. The window keeps its length when the limit changes: the 429 that
// ends a surge gives its new quota (windowLog.rescaled), and it is read
// from what follows a fall under a window held (windowLog.fell), or a rise
// once a window was read this night (windowLog.rose). A probe under a
// window is due its 429 when it has spent what the cruise leaves of the
// quota (kept).
//
// The limit set (the configured rate) is trusted until the provider refuses
// it trustedRefusals times since it was set: the first refusal pauses the
// fleet and keeps the rate, the second measures the provider from the calls
// accepted in between. A process started after an earlier night's pause
// ended takes that night's throttles as history: it starts from the
// estimate stored then (startFrom) or from the limit set, at full rate.
//
// The zero value is not usable; call newDiscovery. Not safe for concurrent
// use.
type discovery struct {
	decrease float64
	ceiling  float64
	// lag is how late another process's accepted calls can reach the
	// row: its lease window (see measure).
	lag time.Duration

	phase    phase
	estimate float64 // R: 0 unknown
	burst    float64 // B: 0 unknown
	// learned: this process learned the burst from its start-up counts
	// (a stored one is not checked against them). Only then does the
	// measure take each call where its answer dates it (see counts).
	learned bool
	// depth is how many calls deeper than the burst the measure takes
	// the provider's bucket to be, counting each answer: a start-up of a
	// few calls may learn the burst a call short, and a clump the bucket
	// took at once then reads as a rate too high. Each such measure that
	// a 429 refutes while cruising under it, before any other 429, adds a
	// call (raised: the last estimate is such a measure).
	depth   float64
	raised  bool
	rateNow float64 // rate sent last, for the history

	originSet bool // the cold start's first sample is known
	coldFrom  sample
	// idleUntil is the last time the fleet's count was still coldFrom's:
	// nothing sent before it, less the latency, was accepted.
	idleUntil time.Time
	coldTo    sample  // the first throttle: calls accepted from coldFrom
	coldHeld  bool    // the configured rate held for heldFor before it: the limit fell
	coldSent  float64 // the rate the calls were accepted at before it

	last     sample    // latest counted throttle
	resumeAt time.Time // its pause ends
	// released is how many calls the fleet spent at once when that
	// pause ended (see refill), when the pause refilled the whole
	// bucket (0 otherwise); shrunkFrom the bucket taken before that
	// throttle, when it came during the release before and took the
	// bucket as smaller (0 otherwise).
	released   float64
	shrunkFrom float64
	// measuredSpan is the span the estimate was last measured from (zero
	// when it is a guess or a window's), and deepened whether the last
	// throttle took the bucket as deeper from it (see deeper).
	measuredSpan span
	deepened     bool
	samples      []sample // since last, oldest first
	guess        bool     // estimate is a guess, not a measurement
	// startLevel is the provider's bucket at last: refusedLevel after a
	// 429, full when the process started from the stored estimate after a
	// quiet spell.
	startLevel float64
	// fromStored: the process started from the stored estimate and has
	// seen no 429 since.
	fromStored bool

	period     time.Duration // probe period
	probeAt    time.Time     // next probe starts
	probeFrom  time.Time     // probe or surge started
	probeRate  float64       // rate when the surge started
	probeLevel float64       // predicted bucket level, for the due 429
	// probeFill is the level the span had followed to the probe's start
	// (0: none to spend; see probing), probeSpent when the probe had
	// spent it without a 429 (zero before), and probeSent the rate the
	// probe sent above the estimate meanwhile.
	probeFill  float64
	probeSpent time.Time
	probeSent  rateSteps

	hintRate float64
	hintAt   time.Time

	win  windowLog // the samples and refusals for the window reading
	read reading   // the window the estimate was read from; zero when measured as a bucket
	// A window reading that raised the estimate is on trial until
	// trialUntil: a 429 while cruising then, the window not full,
	// refutes it, and the estimate returns to fallback, the bucket's
	// measure; no window is read again until refutedUntil. Until
	// trialFrom, the first window after the pause, the rate stays at
	// fallback: that window holds what was released at the pause's
	// end, set before the reading.
	trialFrom    time.Time
	trialUntil   time.Time
	fallback     float64
	refutedUntil time.Time
	// windowed: a window was read this night.
	windowed bool
	// overfilled is when the calls of the last probe's span have left
	// the window read: a window after a probe's 429 still holds the
	// calls it sent above the window's rate.
	overfilled time.Time

	// latency is how long the answers take; dated, the latency the
	// samples are dated by (see sentBy), is its value at the last
	// counted throttle.
	latency latencies
	dated   time.Duration
	// took is the latency of this process's latest answer, refusedTook
	// that of the 429 it is counting (0: none, or another process's),
	// and refusedSent when the call the last counted 429 refused was
	// sent: an answer to a call sent before it counts before it. A
	// consumer reports each answer's latency just before its outcome
	// (Shared.Answered, then Succeeded or Throttled); another worker's
	// answer between the two lends the outcome its latency, which moves
	// one call's date by the difference of two latencies.
	took        time.Duration
	refusedTook time.Duration
	refusedSent time.Time
	// firstSent is when this process's first accepted call was sent,
	// by its answer's own latency.
	firstSent time.Time
	// fleetRate is the rate the fleet was sent at when last observed.
	fleetRate float64

	fellFrom float64   // the rate the comeback watch looks for (see fell)
	fellAt   time.Time // when

	// repaused counts this process's 429s since the last counted
	// throttle whose calls were sent after the pause of its previous
	// 429 had ended (ownResume), with a pause shorter than the row's
	// hold: each paused the fleet again, for its pause and the lease
	// its 429 voided, inside the span the next counted throttle
	// measures (the row counts one 429 per hold, max(pause, minHold)).
	repaused  int
	ownResume time.Time

	changes []change // not yet written to the history
}

// pausedInside reports whether the measure m of the span a counted 429
// ends, with accepted calls by then, says only that the provider allows
// at least m: the fleet paused inside the span, not only at its end, at
// shortPauses 429s the row did not count (each for its pause and the
// lease its 429 voided) while the provider refilled, with fewer than two
// calls accepted a pause, no two of them an interval the provider
// refilled at the fleet's pace (a bucket that absorbs the gaps gives
// many), and m is under half the rate refused. The rate then halves, as
// for a 429 with nothing to measure; a measure at least half the rate is
// taken (it lowers the rate no further), and so is a window read.
func (d *discovery) pausedInside(shortPauses int, accepted int64, m float64) bool {
	return shortPauses >= 2 && accepted-d.last.accepted < 2*int64(shortPauses) && d.read.window == 0 && m < d.estimate*d.decrease
}

// pauses is n 429s, in words.
func pauses(n int) string {
	if n == 1 {
		return "a 429"
	}
	return fmt.Sprintf("%d 429s", n)
}

// newDiscovery returns a discovery that lowers the rate by decrease on a
// 429 the measurement cannot explain, for a fleet whose processes report
// their accepted calls with leases of window.
func newDiscovery(decrease float64, window time.Duration) *discovery {
	return &discovery{decrease: decrease, lag: window, period: firstProbe}
}

// observe records the fleet-wide count of accepted calls at now, the calls
// this process has reported (own), the configured rate and the rate the
// fleet is sent at (the row's effective rate; 0 unknown).
func (d *discovery) observe(now time.Time, accepted, own int64, ceiling, fleetRate float64) {
	d.ceiling, d.fleetRate = ceiling, fleetRate
	if !d.originSet {
		// No call was sent before the process started: the count held
		// then, not only the latency before.
		d.coldFrom, d.originSet = sample{at: now, accepted: accepted, own: own}, true
	}
	if d.phase == phaseCold && accepted == d.coldFrom.accepted {
		d.idleUntil = now
	}
	d.count(now, accepted, own)
}

// answered records an answer to one of this process's calls that took
// took.
func (d *discovery) answered(took time.Duration) {
	d.latency.add(took)
	d.took = took
}

// refusing records that this process's latest answer, reported to answered
// just before, is a 429 it is about to count, answered at now, and returns
// when the refused call was sent: its own latency dates it (see
// refusedSent), or sentOf when unknown.
func (d *discovery) refusing(now time.Time) time.Time {
	d.refusedTook = d.took
	if d.took > 0 {
		return now.Add(-d.took)
	}
	return d.sentOf(now)
}

// refused records, as refusing does, a 429 answered at now whose
// Retry-After is pause (counting it in repaused when its call went after
// the last pause had ended), and returns how many calls the fleet releases
// when the pause ends (see refill): what Shared.Throttled writes with the
// penalty.
func (d *discovery) refused(now time.Time, pause time.Duration) float64 {
	sent := d.refusing(now)
	if !sent.Before(d.ownResume) && pause < minHold {
		d.repaused++
	}
	d.ownResume = maxTime(d.ownResume, now.Add(pause))
	calls, _ := d.refill(sent, pause)
	return calls
}

// sentOf is when a call answered at at was sent, when its own latency is
// unknown: by the median latency, or, before this process has had an
// answer, as early as sentUnanswered allows.
func (d *discovery) sentOf(at time.Time) time.Time {
	if d.latency.n == 0 {
		return d.sentUnanswered(at)
	}
	return d.sentBy(at)
}

// sentUnanswered is when a call answered at at was sent, at the earliest,
// for a process that has had no answer of its own to date it: at the last
// resume, or later by as much as the fleet's first count since then came
// after it (the answers counted then took no longer).
func (d *discovery) sentUnanswered(at time.Time) time.Time {
	sent := d.resumeAt
	for _, s := range d.samples {
		if s.at.After(d.resumeAt) && s.accepted > d.last.accepted {
			sent = maxTime(sent, at.Add(-s.at.Sub(d.resumeAt)))
			break
		}
	}
	return minTime(sent, at)
}

// sentBy is when the calls counted at t were sent: t less the latency of
// the answers, which the count waits for. The provider took them then.
func (d *discovery) sentBy(t time.Time) time.Time {
	return t.Add(-d.dated)
}

// redate dates the samples of the span since the last 429 by latency from
// now on: those kept move back by the difference, so that every sample of
// a span between two 429s is dated alike (a latency learned in the middle
// of one would put the calls counted before it later than those after,
// and read the difference as a burst).
func (d *discovery) redate(latency time.Duration) {
	by := latency - d.dated
	if by == 0 {
		return
	}
	for i := range d.samples {
		d.samples[i].at = d.samples[i].at.Add(-by)
	}
	d.last.at = d.last.at.Add(-by)
	d.dated = latency
}

// count records the fleet-wide count of accepted calls read from the row
// at now (own, this process's). The window reading's log dates it by the
// latency known now: it spans many 429s, and only the counts about each
// refusal matter, which the latency of their time dates best. The span
// measured since the last 429 dates it by sentBy.
func (d *discovery) count(now time.Time, accepted, own int64) {
	d.win.add(sample{at: now.Add(-d.latency.get()), accepted: accepted, own: own})
	d.span(sample{at: d.sentBy(now), accepted: accepted, own: own})
}

// succeeded records an accepted answer of this process at now, the
// fleet-wide count then being accepted (the row's last count and this
// process's answers since) and own this process's accepted answers. A
// count at each answer shows the measure how closely the calls were
// spaced, which is all a small bucket tells between two 429s: read at the
// row's reads alone, a few calls each, the calls seem spread evenly, and
// a probe that packed them closer than the provider allows measures the
// rate it cruised at. Only the span takes it: the window reading needs no
// more than the row's reads.
func (d *discovery) succeeded(now time.Time, accepted, own int64) {
	if d.firstSent.IsZero() {
		d.firstSent = now.Add(-d.took)
	}
	if !d.refusedSent.IsZero() && len(d.samples) > 0 && accepted > d.last.accepted && !now.Add(-d.took).After(d.refusedSent) {
		// Sent before the call the last 429 refused, and answered
		// after it: answers come back out of the order their calls
		// went, most when many connections open at once. The
		// provider took this call before it refused, so the 429's
		// count holds it, and the span after it does not.
		d.last.accepted++
		d.samples[0].accepted++
		if d.coldTo.at.Equal(d.last.at) {
			d.coldTo.accepted++
		}
		d.win.before(d.last.at)
	}
	d.span(sample{at: d.sentBy(now), accepted: accepted, own: own, answer: true})
}

// span adds the count s to the span measured since the last 429, and
// follows the probe's predicted bucket level with it. A count no later
// than the last one is dropped, but for a higher one at the same time,
// which takes the last one's place: an answer counted just after the row
// was read at the same instant is where its call belongs.
func (d *discovery) span(s sample) {
	accepted := s.accepted
	if d.phase == phaseCold {
		return
	}
	// (Never the span's first count, the 429's.)
	if n := len(d.samples); n > 1 && s.at.Equal(d.samples[n-1].at) && accepted > d.samples[n-1].accepted {
		if d.estimate > 0 {
			d.probeLevel -= float64(accepted - d.samples[n-1].accepted)
		}
		d.samples[n-1] = s
		return
	}
	if n := len(d.samples); n > 0 && (!s.at.After(d.samples[n-1].at) || accepted < d.samples[n-1].accepted) {
		return
	}
	if n := len(d.samples); n > 0 {
		prev := d.samples[n-1]
		if d.estimate > 0 {
			if d.burst > 0 {
				// As in measure, allowing for the calls other
				// processes reported late (here only those of
				// this span: the later ones are not read yet).
				d.probeLevel = math.Min(d.probeLevel, d.kept()+math.Min(others(prev, s), d.estimate*d.lag.Seconds()))
			}
			d.probeLevel += d.estimate*s.at.Sub(prev.at).Seconds() - float64(accepted-prev.accepted)
		}
	}
	if len(d.samples) >= maxSamples {
		// Thin the span to every second count, the first kept: it
		// stays whole, read at half the resolution.
		kept := d.samples[:1]
		for i := 2; i < len(d.samples); i += 2 {
			kept = append(kept, d.samples[i])
		}
		d.samples = kept
	}
	d.samples = append(d.samples, s)
}

// hinted records a rate read from response headers at now: while such hints
// keep coming, they pace the limiter.
func (d *discovery) hinted(now time.Time, rate float64) {
	if d.hintAt.IsZero() || now.Sub(d.hintAt) > hintFresh {
		d.record(now, causeHint, rate, fmt.Sprintf("the provider's rate-limit headers pace the limiter at %s", human.Rate(rate)))
	}
	d.hintRate, d.hintAt = rate, now
}

// throttled records a throttle that lowers the rate, counted by the row at
// at with accepted calls accepted fleet-wide by then, whose pause ends at
// resume, own the calls this process has reported; refusals counts the
// throttles since the limit was set, this one included.
func (d *discovery) throttled(at time.Time, accepted, own int64, resume time.Time, refusals int, mine bool) {
	prev := d.phase
	// The short pauses the fleet took in the span this throttle ends,
	// its own among them when it was one: another process's counted
	// throttle is taken as one (that process paused the fleet at it).
	shortPauses := d.repaused
	if !mine {
		shortPauses++
	}
	d.repaused = 0
	// When the refused call was sent, when this process sent it and
	// knows its latency (zero otherwise: the median latency dates a
	// count, not one call).
	d.refusedSent = time.Time{}
	if mine && d.refusedTook > 0 {
		d.refusedSent = at.Add(-d.refusedTook)
	}
	d.refusedTook = 0

	d.fromStored = false
	raised := d.raised
	d.raised = false
	// The fleet pauses from the 429's answer: what a probe costs. The
	// provider refused the call a latency before, and the calls counted
	// by the answer were sent by then too.
	pause := resume.Sub(at)
	d.redate(d.latency.get())
	// When the refused call was sent, and what the fleet releases when
	// this pause ends: as Shared.Throttled reckoned them, before this
	// 429 changes the estimates.
	sent := d.refusedSent
	if sent.IsZero() {
		sent = d.sentOf(at)
	}
	release, refilled := d.refill(sent, pause)
	if !refilled {
		release = 0
	}
	// Whether the refused call went while the last release was spent;
	// what this throttle takes the bucket as, if it does; and the span
	// since the last pause's end: its calls, and its time to the refused
	// call.
	released := d.releaseRefused(sent)
	shrunkFrom, deepened := 0.0, false
	current := d.sinceResume(sample{accepted: accepted, own: own})
	current.secs = sent.Sub(d.resumeAt).Seconds()
	d.count(at, accepted, own)
	at = d.sentBy(at)
	d.win.refuse(at, accepted)
	if prev == phaseSurge && d.windowed {
		// A provider read as a window before keeps counting in
		// windows: read the new one from this 429 on.
		d.win.rose(at, d.estimate)
	}
	if prev == phaseCruise && d.fleetRate > (1+probeStart/2)*d.estimate && !d.hintFresh(at) {
		// The fleet was sent above this process's estimate, past the
		// first step of a probe, and not by the provider's headers: the
		// process leading the fleet (see Shared.steer) was probing while
		// this one cruised, and this is the probe's 429. Estimates of
		// one fleet differ by much less than the step.
		prev = phaseProbe
	}
	// A 429 while cruising under a window read, past its trial, came
	// when the provider's window was full: it held the quota then. In
	// the trial, only when it held the whole quota, or within a window
	// of a probe's 429 (the window still holds the calls the probe sent
	// above its rate, and refuses the cruise): a cruise at the window's
	// rate fills it within its slack whatever the provider is, and a
	// bucket read as a faster window must still be refuted.
	var full reading
	var held float64
	windowFull := false
	if prev == phaseCruise && !d.guess && d.read.window > 0 && !at.Before(d.trialFrom) {
		full, held, windowFull = d.win.confirm(d.read, refusal{at: at, accepted: accepted})
		if at.Before(d.trialUntil) && !at.Before(d.overfilled) && calls(held) < full.quota {
			windowFull = false
		}
	}
	// The limit set's second refusal: the calls since the first beyond
	// what the bucket may have held, measured once for the test and the
	// history line (the measure reads no state the case changes).
	var refusedBeyond float64
	if prev == phaseRefused {
		refusedBeyond = d.beyond(at, accepted)
	}
	switch {
	case prev == phaseCold && refusals < trustedRefusals:
		// The limit set is trusted: keep it, and measure the provider
		// at the next refusal. The calls accepted before this one
		// (the provider's bucket full at the start) give its burst
		// then.
		d.cold(at, accepted, own)
		d.phase, d.estimate, d.guess = phaseRefused, d.ceiling, true
		d.record(at, causeThrottle, d.ceiling, fmt.Sprintf("the provider refused the limit set (%s) once: it is kept until a second refusal", human.Rate(d.ceiling)))
		d.last = sample{at: at, accepted: accepted, own: own}
		d.samples = append(d.samples[:0], d.last)
		d.resumeAt = maxTime(resume, at)
		d.startLevel = refusedLevel
		return
	case prev == phaseCold:
		// Start-up: the burst and the rate are both unknown. Resume at
		// half the rate the calls were accepted at and probe soon: the
		// next 429 measures.
		d.cold(at, accepted, own)
		d.estimate, d.guess = math.Max(d.coldSent*d.decrease, d.floor()), true
		d.period = measureProbe
		d.record(at, causeThrottle, d.estimate*cruiseShare, fmt.Sprintf(
			"first 429, with the calls accepted at %s: the rate halves until the next 429 measures the provider", human.Rate(d.coldSent)))
	case prev == phaseRefused && d.rough(at, refusedBeyond):
		// The second refusal, on too few calls to measure: as after a
		// first 429, resume at half the rate the calls were accepted
		// at and probe soon.
		d.estimate, d.guess = math.Max(d.coldSent*d.decrease, d.floor()), true
		d.period = measureProbe
		d.record(at, causeThrottle, d.estimate*cruiseShare, fmt.Sprintf(
			"the provider refused the limit set twice, on too few calls to measure it (%d, %s beyond what its bucket may have held): the rate halves until the next 429 measures the provider",
			accepted-d.last.accepted, human.Number(refusedBeyond)))
	case prev == phaseCruise && !d.guess && d.read.window > 0 && at.Before(d.trialFrom):
		// The trial starts after the first window after the pause,
		// which holds the calls released when the pause ended, set
		// before the window was read: keep the window read.
		d.record(at, causeThrottle, d.estimate*cruiseShare, fmt.Sprintf(
			"429 in the first window after the pause, before the trial of the window's %s: the calls released at its end were set before it was read",
			human.Rate(d.estimate)))
	case prev == phaseCruise && !d.guess && d.read.window > 0 && at.Before(d.trialUntil) && !windowFull:
		// The window read is refuted: the provider is a bucket
		// whose calls before three 429s happened to agree, and the
		// window was not full when it refused.
		was := d.estimate
		d.refutedUntil = at.Add(windowHorizon)
		d.period = firstProbe
		d.record(at, causeThrottle, d.estimate*cruiseShare, fmt.Sprintf(
			"429 while cruising under the window's %s: the provider is no window of %s; back to the measured %s",
			human.Rate(was), human.Duration(d.read.window), human.Rate(d.fallback)))
		d.estimate, d.read, d.trialFrom, d.trialUntil = d.fallback, reading{}, time.Time{}, time.Time{}
	case windowFull:
		// The window refused the cruise: it holds what it held then,
		// less than read (and at least a call less: a count that
		// came out no lower is off by the counting's grain). Not a
		// fall, which leaves the window far from full.
		was := full.quota
		full.quota = math.Max(1, math.Min(calls(held), full.quota-1))
		d.read, d.estimate = full, full.rate()
		d.period = firstProbe
		d.record(at, causeEstimate, d.estimate*cruiseShare, fmt.Sprintf(
			"429 while cruising under %s of %s calls in %s: the window held %s when it refused; its quota is taken as %s (%s)",
			full.kind(), human.Number(was), human.Duration(full.window), human.Number(held), human.Number(full.quota), human.Rate(d.estimate)))
	case prev == phaseCruise && released:
		// The provider's bucket holds fewer calls than were
		// released, not a lower rate: keep the estimate, and take the
		// bucket as what it held.
		shrunkFrom = d.burst
		d.burst, d.depth = d.heldBucket(sent, sample{accepted: accepted, own: own}), 0
		d.record(at, causeEstimate, d.estimate*cruiseShare, fmt.Sprintf(
			"429 while the %s calls released at the pause's end were spent: the provider's bucket holds fewer than the %s taken; now %s, the estimate of %s kept",
			human.Number(d.released), human.Number(shrunkFrom), human.Number(d.burst), human.Rate(d.estimate)))
	case prev == phaseCruise && !d.guess && d.shrunkFrom == 0 && !d.deepened && d.deeper(current):
		// The bucket is deeper than taken, and the rate a little lower:
		// cruise under the pair both spans agree on.
		was, wasBurst := d.estimate, d.burst
		d.estimate, d.burst = d.deeperPair(current)
		d.depth, deepened = 0, true
		d.record(at, causeEstimate, d.estimate*cruiseShare, fmt.Sprintf(
			"429 while cruising under the estimate of %s, %s after the pause on %s calls: with the span measured before, %s with a bucket of %s (was a bucket of %s): a bucket deeper than taken read as a faster rate",
			human.Rate(was), human.Duration(durationOf(current.secs)), human.Number(current.calls), human.Rate(d.estimate), human.Number(d.burst), human.Number(wasBurst)))
	case prev == phaseCruise && !d.guess:
		if d.read.window > 0 {
			// A provider that counts calls in windows keeps doing
			// so: read the new one from what follows the fall.
			d.win.fell(at, d.estimate)
		}
		// Unexpected: the limit fell below the estimate, or the
		// estimate, raised by counting each answer, read a clump as a
		// rate: the bucket is deeper than it took.
		was := d.estimate
		d.fell(at)
		d.estimate, d.guess = math.Max(d.estimate*d.decrease, d.floor()), true
		d.period = measureProbe
		why := ": the limit fell"
		if d.shrunkFrom > 0 {
			// The 429 of the release before was the fall's, not
			// the bucket's: taken as smaller, the bucket would
			// read every later count as a faster rate.
			d.burst = d.shrunkFrom
			why = fmt.Sprintf(": the limit fell, and the 429 during the release before was its (the bucket is taken back to %s calls)", human.Number(d.burst))
		}
		if raised {
			d.depth++
			why = fmt.Sprintf(", which the last 429 raised: the limit fell, or the bucket is deeper than measured (now %s calls)", human.Number(d.burst+d.depth))
		}
		d.record(at, causeThrottle, d.estimate*cruiseShare, fmt.Sprintf(
			"429 while cruising under the estimate of %s%s; the rate halves until the next 429 measures it", human.Rate(was), why))
	default:
		// A probe's 429, or the one after a guess: it measures.
		exact := d.exact()
		m, ok := d.measure(at)
		held := d.read
		r, read := d.win.read(held)
		rescaled := false
		if !read && prev == phaseSurge {
			// The limit rose under a window held: the window
			// kept its length, and this 429 says its new quota.
			r, rescaled = d.win.rescaled(held, refusal{at: at, accepted: accepted})
			read, held = rescaled, r
		}
		d.read = reading{}
		// A window is read only when it says more than the bucket
		// does: a bucket's calls may agree with a window's now and
		// then, and a window's pause costs more (kept). A window
		// held and confirmed is kept while the bucket says no more.
		says := cruiseShare*r.rate() > (1+heldWithin)*m || r.same(held) && r.rate() >= m
		if read && ok && says && !d.rough(at, d.beyondBucket(accepted, m, ok)) && !at.Before(d.refutedUntil) {
			if !r.same(held) && r.rate() > (1+heldWithin)*d.estimate {
				// A new reading: on trial until the fleet has
				// cruised at it for two windows, and for as long
				// as a bucket of the burst measured would take to
				// drain at the difference.
				drain := d.burst / (cruiseShare*r.rate() - m)
				d.fallback = m
				d.trialFrom = resume.Add(r.window)
				d.trialUntil = d.trialFrom.Add(2*r.window + durationOf(drain))
			}
			m, d.read, d.windowed = r.rate(), r, true
		}
		rescaled = rescaled && d.read.window > 0
		switch {
		case !ok || d.pausedInside(shortPauses, accepted, m):
			why := "a 429 too soon after the last one to measure the provider: the rate halves until the next one measures it"
			if ok {
				why = fmt.Sprintf("the fleet paused at %s in the span since the last counted: the provider allows at least the %s measured, and the rate halves from %s until the next 429 measures it",
					pauses(shortPauses), human.Rate(m), human.Rate(d.estimate))
			}
			d.estimate = math.Max(d.estimate*d.decrease, d.floor())
			d.period = measureProbe
			d.guess = true
			d.record(at, causeThrottle, d.estimate*cruiseShare, why)
		case !d.guess && math.Abs(m-d.estimate) <= heldWithin*d.estimate:
			d.measuredSpan = current
			d.estimate = math.Max(d.estimate, m)
			d.period = d.heldPeriod(at, pause)
			d.record(at, causeProbe, d.estimate*cruiseShare, fmt.Sprintf("probe found the limit unchanged at %s; next probe %s after the pause",
				human.Rate(m), human.Duration(d.period)))
		default:
			was := d.estimate
			// A fall is a drop more than one call of the span explains:
			// a smaller one is the measure's grain, and would end a
			// watch for the comeback of a real fall.
			grain := math.Max(heldWithin, 1/float64(max(accepted-d.last.accepted, 1)))
			wasGuess := d.guess
			if !d.guess && m < (1-grain)*d.estimate {
				d.fell(at)
			}
			startUp := d.burst == 0 && !d.coldTo.at.IsZero()
			d.measuredSpan = current
			d.estimate, d.guess = math.Max(m, d.floor()), false
			if startUp {
				d.learnBurst(at)
			}
			rough := d.rough(at, d.beyond(at, accepted))
			// The limit rose during the span: a surge found it, or a
			// probe measured a bucket's rate above the estimate by
			// more than two measures within a twentieth of the rate
			// (fewCalls) differ by chance. A window read is not a
			// rise: the same calls read another way.
			rose := prev == phaseSurge ||
				prev == phaseProbe && !wasGuess && d.read.window == 0 && d.estimate > (1+2.0/fewCalls)*was
			d.period = d.measuredPeriod(at, pause, rough, rose, startUp, accepted-d.last.accepted)
			d.guess = rough
			// Fewer than two calls beyond what the bucket may have
			// held: no two of them are an interval the provider
			// refilled, and the measure is only the bucket's depth
			// over the span. As when too soon to measure, the rate
			// refused halves, no lower than the measure.
			halve, beyond := false, 0.0
			if rough && d.read.window == 0 && was*d.decrease > d.estimate {
				beyond = d.beyond(at, accepted)
				halve = beyond < 2
			}
			if halve {
				d.estimate = was * d.decrease
				d.record(at, causeThrottle, d.estimate*cruiseShare, fmt.Sprintf(
					"too few calls to measure the provider (%d, %s beyond what its bucket may have held): the rate halves until the next 429 measures it",
					accepted-d.last.accepted, human.Number(beyond)))
			} else {
				d.raised = exact && d.read.window == 0 && d.estimate > (1+heldWithin)*was
				d.record(at, causeEstimate, d.estimate*cruiseShare, d.measured(was, accepted-d.last.accepted, rescaled))
			}
		}
	}
	d.phase = phaseCruise
	d.last = sample{at: at, accepted: accepted, own: own}
	d.samples = append(d.samples[:0], d.last)
	d.resumeAt = maxTime(resume, at)
	d.released, d.shrunkFrom, d.deepened = release, shrunkFrom, deepened
	if d.guess || d.read.window > 0 {
		d.measuredSpan = span{}
	}
	if (prev == phaseProbe || prev == phaseSurge) && d.read.window > 0 {
		d.overfilled = at.Add(d.read.window)
	}
	d.probeAt = d.resumeAt.Add(d.period)
	d.probeLevel = 0
	d.startLevel = refusedLevel
}

// deeperWithin is how far under the estimate the rate solved with a deeper
// bucket may be (see deeper). A bucket taken too shallow reads the rate
// high by its missing calls over the span: a few percent (211/s for 200/s,
// a bucket of 15 for 20, over 6 s). A span the fleet spent partly under
// the rate (after a halving) holds fewer calls than bucket plus rate times
// its time, and solves to a rate far lower and a bucket far deeper (133/s
// and 76 calls, for 200/s and 20): no such span is solved.
const deeperWithin = 0.1

// deeper reports whether a 429 while cruising, after the calls of cruised
// since the pause's end, is that of a bucket deeper than taken rather than
// of a fall: the span the estimate was measured from and this one, solved
// together (deeperPair), give a bucket at least a call deeper than taken
// and a rate under the estimate by less than deeperWithin. Taken
// too shallow, a bucket makes the measure read its calls as a faster rate;
// the cruise at it is refused about a second after each pause, and halving
// then measuring again with the same bucket comes back to the same rate.
func (d *discovery) deeper(cruised span) bool {
	r, b := d.deeperPair(cruised)
	return r >= (1-deeperWithin)*d.estimate && r < d.estimate && b >= d.burst+1
}

// deeperPair solves the span the estimate was measured from and cruised
// for the provider's rate and bucket: each began when a pause long enough
// to fill the bucket ended and ended in a 429 with the bucket empty, so
// each holds the bucket plus the rate times its seconds. 0, 0 when there
// is no measured span, when either counts another process's calls (they
// reach the row up to a lease late, and a count short by a lease's calls
// reads as a bucket that many deeper), or the two are too alike in length
// to tell: the measured one must be twice as long, so that a call's grain
// in either count moves the rate by at most two calls over the longer's
// half.
func (d *discovery) deeperPair(cruised span) (rate, burst float64) {
	m := d.measuredSpan
	if !m.own || !cruised.own || m.secs <= 0 || cruised.secs <= 0 || m.secs < 2*cruised.secs {
		return 0, 0
	}
	rate = (m.calls - cruised.calls) / (m.secs - cruised.secs)
	return rate, cruised.calls - rate*cruised.secs
}

// paused records that the fleet's pause runs until until (on the
// database's clock). The calls sent before the counted 429 was heard of
// are answered up to a latency after it, and each one refused pauses the
// fleet again from its answer: the pause ends up to the latency and the
// jitter after the counted one's, and the release follows its end (the
// probe period keeps counting from the counted one's). A later pause (an
// exhausted quota's) is not this one's.
func (d *discovery) paused(until time.Time) {
	if d.phase < phaseCruise || !until.After(d.resumeAt) ||
		until.Sub(d.resumeAt) > d.latency.get()+d.latency.jitter() {
		return
	}
	d.resumeAt = until
}

// startFrom starts a process from the estimate and burst an earlier one
// stored, at now with accepted calls counted fleet-wide, when the last
// throttle's pause ended before it started: the provider's bucket is taken
// to be full, and the rate cruises at the estimate until the first probe.
func (d *discovery) startFrom(now time.Time, accepted, own int64, estimate, burst, ceiling float64) {
	d.ceiling = ceiling
	d.originSet = true
	d.coldFrom = sample{at: now, accepted: accepted}
	d.phase, d.estimate, d.burst, d.guess = phaseCruise, math.Min(estimate, ceiling), burst, false
	d.last = sample{at: now, accepted: accepted, own: own}
	d.samples = append(d.samples[:0], d.last)
	d.resumeAt, d.startLevel, d.fromStored = now, burst, true
	d.released = d.capacity(now)
	d.period = firstProbe
	d.probeAt = now.Add(d.period)
	d.record(now, causeEstimate, d.estimate*cruiseShare, fmt.Sprintf(
		"started from the stored estimate, %s with a bucket of %s: the last throttle is history", human.Rate(d.estimate), human.Number(burst)))
}

// capacity is the most tokens the row should hold when a process started
// from the stored estimate and has seen no 429 since: the provider's bucket
// as stored (at least one call), what it lets through at once, so that the
// night does not open with the configured burst; 0 otherwise, and while the
// provider's headers pace the limiter (they say what is left).
func (d *discovery) capacity(now time.Time) float64 {
	if !d.fromStored || d.burst == 0 || d.hintFresh(now) {
		return 0
	}
	return math.Max(1, math.Floor(d.burst))
}

// stored returns the estimate and burst to store in the row for processes
// started later: zero while they are a guess or unknown.
func (d *discovery) stored() (estimate, burst float64) {
	if d.phase <= phaseRefused || d.guess || d.burst == 0 {
		return 0, 0
	}
	return d.estimate, d.burst
}

// cold records the first counted throttle at at, with accepted calls
// accepted fleet-wide by then: the start-up span (from the fleet's first
// accepted call), the rate the calls were accepted at, and whether the
// limit held for heldFor before it (then it fell).
func (d *discovery) cold(at time.Time, accepted, own int64) {
	// The span starts when the fleet started sending: a process that
	// opened the limiter a while before its first call would otherwise
	// count the idle time in the span, and learn a bucket too small and
	// a rate too low.
	if from := d.sentBy(d.idleUntil); from.After(d.coldFrom.at) && from.Before(at) {
		d.coldFrom.at = from
	}
	// The reads of the row come a lease apart, and say only that no call
	// sent before the last one that counted none (less the latency) was
	// accepted; when every call counted is this process's (it has
	// reported as many), the first one's own answer says when it was
	// sent.
	if first := d.firstSent; !first.IsZero() && first.After(d.coldFrom.at) && !first.After(at) &&
		accepted-d.coldFrom.accepted <= own-d.coldFrom.own {
		d.coldFrom.at = first
	}
	d.coldTo = sample{at: at, accepted: accepted}
	// Fewer than fewCalls accepted say how busy this fleet was, not what
	// the provider allows: a fleet that had barely called would otherwise
	// resume near the floor.
	d.coldSent = d.ceiling
	if span, n := at.Sub(d.coldFrom.at).Seconds(), accepted-d.coldFrom.accepted; span > 0.05 && n >= fewCalls {
		d.coldSent = math.Min(d.coldSent, float64(n)/span)
	}
	if at.Sub(d.coldFrom.at) >= heldFor {
		d.fellFrom, d.fellAt = d.coldSent, at
		d.coldHeld = true
	}
}

// measured is the history's words for a measurement between two 429s of
// calls accepted, the estimate having been was (a guess when d.guess was);
// rescaled: the window held took the quota of the 429 that ended a surge.
func (d *discovery) measured(was float64, calls int64, rescaled bool) string {
	s := fmt.Sprintf("measured between two 429s on %d calls: %s", calls, human.Rate(d.estimate))
	switch {
	case rescaled:
		s = fmt.Sprintf("the limit rose: %s of %s held %s calls when it refused: %s",
			d.read.kind(), human.Duration(d.read.window), human.Number(d.read.quota), human.Rate(d.estimate))
	case d.read.window > 0:
		s = fmt.Sprintf("read from the last %d 429s, each after %s calls in %s of %s: %s",
			agreeing, human.Number(d.read.quota), d.read.kind(), human.Duration(d.read.window), human.Rate(d.estimate))
	case d.burst > 0:
		s += fmt.Sprintf(" with a bucket of %s", human.Number(d.burst))
	}
	if was > 0 {
		s += fmt.Sprintf(" (was %s)", human.Rate(was))
	}
	if d.guess {
		return s + "; too few calls to be sure: measured again at the next 429"
	}
	return s + fmt.Sprintf("; next probe %s after the pause", human.Duration(d.period))
}

// rough reports whether the calls accepted since the last counted throttle
// up to the one at at are too few to measure the provider's rate: soon
// after the pause, fewer than fewCalls (one call is more than a twentieth
// of them) beyond those the provider's bucket may have held when it ended
// (beyond, see beyondBucket). Those say how deep the bucket is, not how
// fast it refills: a fleet that spends them at once and is refused sees the
// bucket alone, and the smallest rate its span allows is as low as the
// bucket is deep over the pause (a bucket of 20 at 200/s, paused a second:
// 20/s).
func (d *discovery) rough(at time.Time, beyond float64) bool {
	return at.Sub(d.resumeAt) < measureProbe && beyond < fewCalls
}

// beyond is beyondBucket with the span measured now.
func (d *discovery) beyond(at time.Time, accepted int64) float64 {
	m, ok := d.measure(at)
	return d.beyondBucket(accepted, m, ok)
}

// beyondBucket is how many of the calls accepted since the last counted
// throttle, accepted by then, came beyond those the provider's bucket may
// have held when the pause ended (all of them while nothing bounds it); m
// is the rate measured over the span (ok false: none).
func (d *discovery) beyondBucket(accepted int64, m float64, ok bool) float64 {
	calls := float64(accepted - d.last.accepted)
	held := d.burst
	if held == 0 && !d.coldTo.at.IsZero() {
		// Before the bucket is learned, it held at most what the
		// provider accepted from idle.
		held = float64(d.coldTo.accepted - d.coldFrom.accepted)
	}
	if ok {
		// The pause refilled at most the rate measured over it.
		held = math.Min(held, m*d.resumeAt.Sub(d.last.at).Seconds())
	}
	return math.Max(0, calls-held)
}

// longestPeriod is how long the probe period grows while the estimate
// holds, for pauses of the given length: long enough that the probes cost
// at most probeShare of the calls. A probe costs the calls its pause loses:
// the provider refills R×pause meanwhile and its bucket keeps B of it. A
// pause shorter than the lease window (lag) costs that window all the
// same: the refused call's process drops the slots it leased, whose tokens
// stay spent in the row, and the calls after the pause wait until they
// would have gone. So cost = max(1, R×max(pause, lag) − B) calls (at least
// the one refused), against R×period calls sent between two probes; hence
// period = cost / (probeShare × R), and never less than firstProbe. With R
// and B unknown the whole pause counts.
func (d *discovery) longestPeriod(pause time.Duration) time.Duration {
	cost := math.Max(1, d.estimate*max(pause, d.lag).Seconds()-d.kept())
	return max(firstProbe, durationOf(cost/(probeShare*d.estimate)))
}

// heldPeriod is the probe period after a probe found the estimate
// unchanged at at, its pause lasting pause: while watching for a comeback,
// comebackPeriod; else twice the last period, from firstProbe (twice that
// when a probe costs part of a pause) up to longestPeriod.
func (d *discovery) heldPeriod(at time.Time, pause time.Duration) time.Duration {
	if d.comingBack(at) {
		return d.comebackPeriod(pause)
	}
	shortest := firstProbe
	if d.costly(pause) {
		shortest = 2 * firstProbe
	}
	return min(max(2*d.period, shortest), d.longestPeriod(pause))
}

// measuredPeriod is the probe period after a 429 at at measured a new
// estimate on calls accepted since the last one, its pause lasting pause:
// the first of these rules that applies, or firstProbe.
func (d *discovery) measuredPeriod(at time.Time, pause time.Duration, rough, rose, startUp bool, calls int64) time.Duration {
	cheap := !d.costly(pause)
	switch {
	case rough:
		// A count this small, soon after a pause, is a rough measure
		// (one call is more than a twentieth of it): measure again at
		// the next 429, soon.
		return measureProbe
	case rose && cheap:
		// The span measured began under the old limit, so it
		// understates the new one: measure again soon, from this 429,
		// while a probe costs only its 429s. When it costs part of a
		// pause, cruising a little under the new limit until the next
		// probe loses less than a second pause would.
		return measureProbe
	case d.comingBack(at):
		return d.comebackPeriod(pause)
	case startUp && cheap && calls >= 2*fewCalls:
		// The first measurement, on enough calls to be close, while a
		// probe costs only its 429s: no change of the limit has been
		// seen, so the probes start where an estimate that held once
		// has them. When a probe costs part of a pause the period
		// grows longer, and the first one is what corrects a start-up
		// estimate that came out low.
		return min(2*firstProbe, d.longestPeriod(pause))
	}
	return firstProbe
}

// costly reports whether a probe costs part of its pause (the provider's
// bucket cannot hold what it refills meanwhile) rather than only its 429s.
func (d *discovery) costly(pause time.Duration) bool {
	return d.burst == 0 || d.kept() < 0.9*d.estimate*pause.Seconds()
}

// fell records that the limit fell at at from the estimate. The comeback
// watch looks for the rate before the fall: a further fall while it
// watches keeps the higher rate it looks for (a limit that stepped down
// twice comes back as readily as one that fell at once), and the watch
// goes on from the latest fall.
func (d *discovery) fell(at time.Time) {
	from := d.estimate
	if d.comingBack(at) {
		from = math.Max(from, d.fellFrom)
	}
	d.fellFrom, d.fellAt = from, at
}

// comingBack reports whether at is within comebackWatch of a fall of the
// limit and the estimate is still well under the rate before it.
func (d *discovery) comingBack(at time.Time) bool {
	return !d.fellAt.IsZero() && at.Sub(d.fellAt) < comebackWatch && d.estimate < comebackShare*d.fellFrom
}

// comebackPeriod is the probe period while watching for a comeback, for
// pauses of the given length: firstProbe when a probe costs part of a
// pause; when it costs only its 429s, comebackProbe, or longer when they
// are many. A probe's 429 comes back a latency after its call, and the
// calls sent meanwhile above the rate are refused too: at the fleet's rate
// F, about 1 + (F - R) × latency of them. The watch keeps them to
// watchShare of the calls: period >= 429s / (watchShare × R), and never
// longer than when a probe costs part of a pause.
func (d *discovery) comebackPeriod(pause time.Duration) time.Duration {
	if d.costly(pause) {
		return firstProbe
	}
	refused := 1 + math.Max(0, d.fleetRate-d.estimate)*d.latency.get().Seconds()
	return min(max(comebackProbe, durationOf(refused/(watchShare*d.estimate))), firstProbe)
}

// watchShare is the most of the calls the comeback watch's probes may draw
// in 429s: a tenth, the share under which a fleet is taken to obey a fall
// (see the matrix), which the watch follows.
const watchShare = 0.1

// floor is the lowest estimate: DefaultFloor of the configured rate.
func (d *discovery) floor() float64 {
	if d.ceiling > 0 {
		return DefaultFloor(d.ceiling)
	}
	return minRate
}

// maxBurstSeconds caps the burst learned at start-up when the configured
// rate held for heldFor before the first 429, in seconds of the estimated
// rate: a bucket taken too shallow is deepened by the 429s that follow
// (see deeper), one taken too deep would be released after every pause.
// 1.5 s is a judgement: buckets of a second or less are learned whole.
const maxBurstSeconds = 1.5

// learnBurst derives the provider's burst from the calls accepted before the
// first 429 (its bucket full at the start), then measures the rate again
// with it.
func (d *discovery) learnBurst(at time.Time) {
	for range 2 {
		span := d.coldTo.at.Sub(d.coldFrom.at).Seconds()
		b := float64(d.coldTo.accepted-d.coldFrom.accepted) - d.estimate*span
		if d.coldHeld {
			// A first 429 long after the start: the calls before
			// it may be a limit that fell or a long window filled
			// as much as a deep bucket (see heldFor).
			b = math.Min(b, math.Max(d.estimate*maxBurstSeconds, 1))
		}
		d.burst = math.Max(b, 1)
		d.learned = true
		if m, ok := d.measure(at); ok && d.read.window == 0 {
			// (A window read gives the rate: the burst only
			// bounds what the fleet spends at a resume.)
			d.estimate = m
		}
	}
}

// others is how many calls other processes reported between a and b.
func others(a, b sample) float64 {
	return math.Max(0, float64((b.accepted-a.accepted)-(b.own-a.own)))
}

// lateCalls returns, for each sample, the calls other processes reported
// in the samples at most lag after it. They report their accepted calls
// with their next lease, at most a lease window after the call's answer, so
// a call that reaches the row at t was answered after t - lag: those are
// the calls that may have been accepted before the sample and are missing
// from its count. (A call's latency makes it later still: the samples are
// dated by sentBy, which takes it off every one alike.) This process's own
// calls, and every call of a fleet of one, are counted where they fall.
func (d *discovery) lateCalls(ss []sample) []float64 {
	late := make([]float64, len(ss))
	j := 0 // the last sample at most lag after sample i
	for i, a := range ss {
		j = max(j, i)
		for j+1 < len(ss) && ss[j+1].at.Sub(a.at) <= d.lag {
			j++
		}
		late[i] = others(a, ss[j])
	}
	return late
}

// exact reports whether the measure takes each call of this process where
// its answer dates it: once the estimate was measured with a burst this
// process learned.
func (d *discovery) exact() bool { return d.learned && !d.guess }

// counts returns the span's counts the measure reads: every one once the
// estimate was measured with a burst this process learned; else only those
// read from the row, a lease's calls each, which spread a clump over the
// time between two reads. Counted at each answer, a clump deeper than the
// bucket taken reads as a rate too high: a stored burst, or one learned
// from a start-up too short to tell, may be one call short of the
// provider's.
func (d *discovery) counts() []sample {
	if d.exact() {
		return d.samples
	}
	ss := make([]sample, 0, len(d.samples))
	for i, x := range d.samples {
		if i == 0 || !x.answer {
			ss = append(ss, x)
		}
	}
	return ss
}

// measure returns the provider's rate implied by the calls accepted since
// the last counted throttle up to the one at at: the smallest rate at which
// a bucket of the estimated burst (unbounded when unknown), holding less
// than a call at the last throttle, accepts them all. A call counted at its
// answer (see counts) takes its token when it was sent; the calls of a count
// read from the row are spread over the time since the one before. ok is
// false when the span is too short to tell.
func (d *discovery) measure(at time.Time) (float64, bool) {
	if len(d.samples) < 2 || at.Sub(d.last.at) < 200*time.Millisecond ||
		d.samples[len(d.samples)-1].accepted-d.samples[0].accepted < 2 {
		return 0, false
	}
	// A sample's count lacks up to late[i] calls other processes had
	// accepted by then, which later samples count as accepted after it,
	// and which the provider, at rate r, refilled at most r × lag of
	// meanwhile: the bucket is read to hold up to that many more than it
	// did. So the bucket, holding startLevel at the last throttle, may
	// read as holding that much more at its start, and at most B plus
	// that much at each sample.
	ss, exact := d.counts(), d.exact()
	late := d.lateCalls(ss)
	jitter, lag := d.latency.jitter().Seconds(), d.lag.Seconds()
	// The span's steps, read once: each replay of it (one per step of
	// the bisection) then only does arithmetic.
	type step struct {
		secs, calls float64
		own         bool // one call of this process, counted at its answer
	}
	steps := make([]step, len(ss))
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		steps[i] = step{secs: b.at.Sub(a.at).Seconds(), calls: float64(b.accepted - a.accepted)}
		steps[i].own = exact && b.answer && steps[i].calls <= 1
	}
	fits := func(r float64) bool {
		more := func(i int) float64 { return math.Min(late[i], r*lag) }
		slack := r * jitter
		level := d.startLevel + more(0)
		for i := 1; i < len(steps); i++ {
			refill, calls := r*steps[i].secs, steps[i].calls
			switch {
			case steps[i].own:
				// One call of this process, counted at its
				// answer: it took its token, when the answer
				// dates it, from a bucket refilled up to the
				// burst (and the calls of others the row hears
				// of later).
				level = math.Min(level+refill, d.burst+d.depth+more(i)) - calls
			case d.burst > 0:
				// Calls spread over the span: the bucket caps
				// what is left before it.
				level = math.Min(level, d.burst+more(i-1)) + refill - calls
			default:
				level += refill - calls
			}
			// A count dated by the median latency is off by up to
			// the answers' jitter: slack for as many calls as the
			// provider refills meanwhile.
			if level < -slack {
				return false
			}
		}
		return true
	}
	lo, hi := 0.0, math.Max(1, d.ceiling)
	for !fits(hi) {
		hi *= 2
		if hi > 1e9 {
			return 0, false
		}
	}
	// To a millionth: far finer than a measure's grain (a call in
	// the span, heldWithin at best), and each step replays the span.
	for hi-lo > 1e-6*hi {
		mid := (lo + hi) / 2
		if fits(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return math.Max(hi, minRate), true
}

// rate returns the rate to send at at now, or 0 when the discovery has no
// say (before the first throttle, without hints: the row's rate holds).
func (d *discovery) rate(now time.Time) float64 {
	if d.hintFresh(now) {
		return d.hintRate
	}
	switch d.phase {
	case phaseCold, phaseRefused:
		// The limit set is in force, at full rate.
		return d.ceiling
	case phaseCruise:
		if !now.Before(d.probeAt) {
			d.startProbe(now)
			return d.rate(now)
		}
		if now.Before(d.trialFrom) {
			// The first window after the pause holds what was
			// released at its end, set before the window was read.
			return d.fallback * cruiseShare
		}
		return d.estimate * cruiseShare
	case phaseProbe:
		r := d.probing(now)
		if d.probeLevel < -math.Max(2, 0.05*d.estimate) {
			d.phase, d.probeFrom, d.probeRate = phaseSurge, now, r
			d.record(now, causeProbe, r, fmt.Sprintf("probe outlived the 429 due at %s: the limit rose; the rate doubles every %s until a 429",
				human.Rate(d.estimate), human.Duration(surgeDoubling)))
		}
		return r
	default:
		return d.probeRate * math.Exp2(now.Sub(d.probeFrom).Seconds()/surgeDoubling.Seconds())
	}
}

// startProbe starts a probe at now. The bucket may have filled while
// cruising: the due 429 allows for a full one (of a window, what the
// cruise leaves of its quota). The level the span followed is a bucket's
// when the estimate and the burst measure one (not a guess, no window
// read this night), and worth spending first when it is more than the
// calls the leases and the answers keep in flight.
func (d *discovery) startProbe(now time.Time) {
	d.phase, d.probeFrom = phaseProbe, now
	followed := d.probeLevel
	d.probeLevel = d.kept()
	if d.burst == 0 {
		d.probeLevel = d.estimate
	}
	d.probeFill, d.probeSpent, d.probeSent = 0, now, d.probeSent[:0]
	if fill := math.Max(0, math.Min(followed, d.probeLevel)); !d.guess && !d.windowed && d.burst > 0 &&
		fill >= d.estimate*(d.lag+d.dated).Seconds() {
		d.probeFill, d.probeSpent = fill, time.Time{}
	}
	why := fmt.Sprintf("probe starts: the rate rises above the estimate of %s until a 429", human.Rate(d.estimate))
	if d.probeFill > 0 {
		why = fmt.Sprintf("probe starts: the %s calls the provider's bucket should hold are spent first, then the rate rises above the estimate of %s until a 429",
			human.Number(d.probeFill), human.Rate(d.estimate))
	}
	d.record(now, causeProbe, d.estimate*(1+probeStart), why)
}

// probing is a probe's rate at now: the estimate's first step and the
// ramp above it (probeSlope of the estimate and the kept level a second),
// which spends a full bucket with its 429 due within about 1.5 s. While the
// level the span followed to the probe's start (probeFill) is not spent,
// the rate above the first step is also held to what spends the rest of it
// within the leases' and the answers' delay, left / (lag + latency): it
// comes down as the level runs out, and the 429 that comes when it does
// finds the rate barely above the provider's. The calls the fleet sent
// above the provider's rate while that 429 was on its way are refused with
// it, about (rate − R) × latency of them: with the ramp still climbing
// there, a sizable share of the rate. Once the level is spent without a
// 429 (the provider holds more: its bucket or its rate is larger than
// measured), the ramp starts again from the first step, for the rest of a
// full bucket.
func (d *discovery) probing(now time.Time) float64 {
	first := d.estimate * (1 + probeStart)
	if d.probeSpent.IsZero() {
		if left := d.probeLeft(now); left >= 1 {
			e := math.Min(left/(d.lag+d.dated).Seconds(), d.ramp(d.kept(), now.Sub(d.probeFrom)))
			d.probeSent.add(now, e)
			return first + e
		}
		d.probeSpent = now
	}
	return first + d.ramp(d.kept()-d.probeFill, now.Sub(d.probeSpent))
}

// ramp is how far a probe's rate has risen above its first step t after it
// started from there with level to spend.
func (d *discovery) ramp(level float64, t time.Duration) float64 {
	return (level + probeSlope*d.estimate) * t.Seconds()
}

// probeLeft is what the level the span followed to the probe's start has
// left at now: less what the answers say the probe has spent since (the
// predicted level started from kept, which a bucket's probe does not
// change), and less what it sent since the calls they count (a latency
// before now, a lease more for the other processes' calls).
func (d *discovery) probeLeft(now time.Time) float64 {
	return d.probeFill - (d.kept() - d.probeLevel) - d.probeSent.since(d.sentBy(now).Add(-d.lag), now)
}

// rateStep is a rate in force from a time on.
type rateStep struct {
	at   time.Time
	rate float64
}

// rateSteps is a rate over time, each step in force until the next one.
type rateSteps []rateStep

// add sets the rate from at on.
func (s *rateSteps) add(at time.Time, rate float64) {
	*s = append(*s, rateStep{at, rate})
}

// since returns the calls the steps send from from to now.
func (s rateSteps) since(from, now time.Time) float64 {
	calls := 0.0
	for i, st := range s {
		until := now
		if i+1 < len(s) {
			until = s[i+1].at
		}
		if a := maxTime(st.at, from); until.After(a) {
			calls += st.rate * until.Sub(a).Seconds()
		}
	}
	return calls
}

// hintFresh reports whether a rate read from response headers paces the
// limiter at now.
func (d *discovery) hintFresh(now time.Time) bool {
	return !d.hintAt.IsZero() && now.Sub(d.hintAt) <= hintFresh
}

// refill returns how many tokens the provider's bucket gains during a pause
// of the given length, from the estimates (1 while they are unknown), less
// the room the cruise after them needs: the calls to spend at once when
// the pause ends. Released whole, they leave the provider's bucket empty,
// and the cruise's calls reach the provider as unevenly as their answers
// come back: calls sent on time but bunched by the answers' jitter (the
// spread of their latency) take up to the rate times the jitter more than
// the bucket has refilled, and each one too many is a 429. sent is when
// the refused call was sent: when it went while the last release was
// spent, the bucket is taken as what it held then (see releaseRefused).
// full reports whether the pause refills the whole bucket: only then does
// a 429 during the release say the bucket holds less.
func (d *discovery) refill(sent time.Time, pause time.Duration) (calls float64, full bool) {
	if d.burst == 0 || d.estimate == 0 || d.guess {
		return 1, false
	}
	kept := d.kept()
	if d.releaseRefused(sent) {
		last := d.last
		if len(d.samples) > 0 {
			last = d.samples[len(d.samples)-1]
		}
		kept = d.heldBucket(sent, last)
	}
	refilled := d.estimate * pause.Seconds()
	room := d.estimate * d.latency.jitter().Seconds()
	return math.Max(1, math.Floor(math.Min(kept, refilled)-room)), kept <= refilled
}

// releaseRefused reports whether a 429 of a call sent at sent came while
// the calls released at the last pause's end were spent, cruising under a
// bucket measured: the provider's bucket held fewer than were released.
// Only once in a row: a limit that fell refuses each release, and the
// second such 429 is taken for the fall.
func (d *discovery) releaseRefused(sent time.Time) bool {
	return d.phase == phaseCruise && !d.guess && d.read.window == 0 && d.shrunkFrom == 0 && d.inRelease(sent)
}

// heldBucket is the provider's bucket as a 429 of a call sent at sent
// during a release tells it, with last the count by then: what it held
// (see releaseHeld), at least a call less than taken, and at most by the
// decrease less. The count can read low: another process's calls reach
// the row up to a lease late, and a provider that counts in windows
// longer than the pause still holds calls from before it. A bucket taken
// too small would read every later count as a faster rate.
func (d *discovery) heldBucket(sent time.Time, last sample) float64 {
	held := math.Floor(d.releaseHeld(sent, last))
	return math.Max(1, math.Max(d.burst*d.decrease, math.Min(d.burst-1, held)))
}

// releaseHeld is how many calls the provider's bucket held at the last
// pause's end, from a 429 of a call sent at sent while the calls released
// then were spent, with last the count by then: the calls accepted since
// the resume, less what the provider refilled meanwhile at the estimate (a
// lower bound of its rate: the bucket read is an upper bound of what it
// held, by the difference's refill).
func (d *discovery) releaseHeld(sent time.Time, last sample) float64 {
	return d.sinceResume(last).calls - d.estimate*sent.Sub(d.resumeAt).Seconds()
}

// sinceResume is how many of the calls counted fleet-wide by last were
// sent after the last pause ended: those counted later than the last
// sample dated before it (the calls in flight when the fleet paused are
// answered after the 429 that paused it), and whether all are this
// process's.
func (d *discovery) sinceResume(last sample) span {
	base := d.last
	for _, s := range d.samples {
		if s.at.Before(d.resumeAt) && s.accepted >= base.accepted {
			base = s
		}
	}
	return span{calls: float64(last.accepted - base.accepted), own: last.own == base.own+(last.accepted-base.accepted)}
}

// inRelease reports whether a call sent at at went while the calls
// released at the last pause's end were being spent: from the resume
// until the last of them, give or take the answers' jitter. A bucket that
// holds what was released (and refills at least at the cruise) refuses
// none of them, nor any call after.
func (d *discovery) inRelease(at time.Time) bool {
	if d.released < 2 || d.burst == 0 || at.Before(d.resumeAt) {
		return false
	}
	// Each process spends the tokens it leased late one interval of the
	// cruise apart (see local.grantTime), alongside the cruise's slots;
	// a fleet that spends them at once is done sooner.
	sent := d.estimate * cruiseShare * at.Sub(d.resumeAt).Seconds()
	return sent <= d.released+d.estimate*d.latency.jitter().Seconds()
}

// record notes a change for the history.
func (d *discovery) record(at time.Time, cause string, rate float64, detail string) {
	if d.ceiling > 0 {
		rate = math.Min(rate, d.ceiling)
	}
	d.rateNow = rate
	if len(d.changes) >= maxSamples {
		return
	}
	d.changes = append(d.changes, change{at: at, cause: cause, rate: rate, estimate: d.estimate, burst: d.burst, detail: detail})
}

// takeChanges returns the changes not yet written and forgets them.
func (d *discovery) takeChanges() []change {
	c := d.changes
	d.changes = nil
	return c
}

// kept is the most of a pause's refill the provider keeps for the fleet to
// spend at once when the pause ends, and the room a probe spends above the
// estimate before its 429 is due: a bucket's burst; of a window, only what
// the cruise leaves unused of its quota, since a window that took a burst
// at the resume holds it for a whole window while the cruise goes on.
func (d *discovery) kept() float64 {
	if d.read.window == 0 {
		return d.burst
	}
	return math.Max(0, d.read.quota-d.estimate*cruiseShare*d.read.window.Seconds())
}
