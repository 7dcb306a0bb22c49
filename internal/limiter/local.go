package limiter

import (
	"math"
	"slices"
	"time"
)

// local is one process's side of a Shared limiter, in the shape of
// golang.org/x/time/rate's Limiter: the token slots it leased from the row
// and has not handed out, when it may lease again, the latest penalty it
// knows, the pacing of slots used late, the demand that sizes the next lease
// and what it has to tell the row with that lease. Its methods take the time
// (and what they need of the row: the effective rate, the burst) and do no
// I/O; Shared holds its mutex around them and carries out their answer.
//
// The zero value is not usable; call newLocal. Not safe for concurrent use.
type local struct {
	window time.Duration // LeaseWindow

	slots     []time.Time // leased, unclaimed token slots, earliest first
	retryAt   time.Time   // no lease before this: the row said wait
	penalty   time.Time   // latest penalty known here
	lastGrant time.Time   // latest time a caller used a slot at, so late slots are paced after it
	reserved  []time.Time // the times of the grants reserved and not yet used or returned
	// Demand: grants in the current and the previous window, so a lease
	// covers what callers took lately, not only who waits now.
	demandStart time.Time
	demandNow   int
	demandPrev  int
	expired     int64  // leased slots that expired unused
	pending     report // for the row, with the next lease
	// reported counts the accepted answers handed to the row's
	// statements (less those given back), for the discovery to tell this
	// process's calls from the fleet's.
	reported int64
}

// newLocal returns the local state of a limiter whose leased slots expire
// window after their time.
func newLocal(window time.Duration) *local {
	return &local{window: window}
}

// report is what a process learned since its last lease that the row must
// hear: it travels with the next lease.
type report struct {
	success  bool      // an answer that was not a throttle
	accepted int64     // answers that were not throttles, for the row's count
	hintRate float64   // rate implied by the latest answer's headers; 0 none
	hintAt   time.Time // when the call that answer is of was sent
	hintStop time.Time // quota exhausted until this, not yet written to the row
}

// merge adds what o says to r: a failed round trip keeps its report for the
// next one, together with whatever arrived meanwhile.
func (r *report) merge(o report) {
	r.success = r.success || o.success
	r.accepted += o.accepted
	if o.hintRate > 0 && (r.hintRate == 0 || !o.hintAt.Before(r.hintAt)) {
		r.hintRate, r.hintAt = o.hintRate, o.hintAt
	}
	r.hintStop = maxTime(r.hintStop, o.hintStop)
}

// action is what a caller of Wait does next.
type action int

const (
	// actGrant: use the reserved slot at the reservation's time.
	actGrant action = iota
	// actSleep: no lease before the reservation's time; ask again then.
	actSleep
	// actAwait: another caller's lease is in flight; ask again when it
	// returns.
	actAwait
	// actLease: lease a batch from the row, then ask again.
	actLease
)

// reservation is local's answer to a caller of Wait.
type reservation struct {
	act  action
	at   time.Time // actGrant: when to act; actSleep: when to ask again
	slot time.Time // actGrant: the slot reserved, for cancel
}

// advance drops the slots that can no longer be used at now: during a
// penalty those before its end (and no lease before it ends), and those
// more than window old. A slot after the penalty's end was leased from a
// bucket whose level the penalty left alone (the row resets only a level
// dated before the penalty's end), so it is still the fleet's to use.
func (s *local) advance(now time.Time) {
	if now.Before(s.penalty) {
		s.dropBefore(s.penalty)
		s.retryAt = maxTime(s.retryAt, s.penalty)
	}
	for len(s.slots) > 0 && now.Sub(s.slots[0]) > s.window {
		s.slots = s.slots[1:]
		s.expired++
	}
}

// reserve says what a caller of Wait does at now, rate being the effective
// rate and leasing whether a lease is in flight: use the earliest slot (it
// is reserved; cancel returns it), sleep until the row allows a lease, wait
// for the lease in flight, or lease. An exhausted quota seen here leases at
// once, before the slots kept for after the reset and the retry time: the
// row must hear of it now, not after the pause it causes.
func (s *local) reserve(now time.Time, rate float64, leasing bool) reservation {
	s.advance(now)
	switch {
	case !leasing && !s.pending.hintStop.IsZero():
		return reservation{act: actLease}
	case len(s.slots) > 0:
		slot := s.slots[0]
		s.slots = s.slots[1:]
		return reservation{act: actGrant, at: s.grantTime(slot, now, rate), slot: slot}
	case now.Before(s.retryAt):
		return reservation{act: actSleep, at: s.retryAt}
	case leasing:
		return reservation{act: actAwait}
	}
	return reservation{act: actLease}
}

// grantTime is when a leased slot may be used: at the slot, or, for a slot
// already past, no sooner than one interval at the effective rate after the
// previous grant. Spending late slots at once would squeeze calls closer
// together than the row spaced them, and a provider whose bucket is no
// larger than ours would answer 429; paced, lateness becomes headroom at the
// provider instead. The previous grant is the latest used or still
// reserved: one given up (cancel) paces nothing. It reserves the time it
// returns.
func (s *local) grantTime(slot, now time.Time, rate float64) time.Time {
	at := slot
	if now.After(slot) {
		at = now
		if rate > 0 {
			last := s.lastGrant
			for _, t := range s.reserved {
				last = maxTime(last, t)
			}
			at = maxTime(at, last.Add(time.Duration(float64(time.Second)/rate)))
		}
	}
	s.reserved = append(s.reserved, at)
	return at
}

// settle forgets the reserved grant time of r: it was used, given up or
// voided.
func (s *local) settle(r reservation) {
	if i := slices.IndexFunc(s.reserved, r.at.Equal); i >= 0 {
		s.reserved = slices.Delete(s.reserved, i, i+1)
	}
}

// cancel returns the slot of an actGrant reservation whose caller gave up
// before using it, in its place among the others (callers give up in any
// order). Its grant time no longer paces the next ones: a call not made
// leaves the provider's bucket as it was.
func (s *local) cancel(r reservation) {
	s.settle(r)
	i, _ := slices.BinarySearchFunc(s.slots, r.slot, time.Time.Compare)
	s.slots = slices.Insert(s.slots, i, r.slot)
}

// commit is called when the caller of the actGrant reservation r acts, at
// now. It counts the grant for the demand estimate and the pacing and
// reports true, or reports false when a penalty arrived meanwhile: the slot
// is void, ask again.
func (s *local) commit(now time.Time, r reservation) bool {
	s.settle(r)
	if now.Before(s.penalty) {
		return false
	}
	s.lastGrant = maxTime(s.lastGrant, r.at)
	s.demand(now)
	s.demandNow++
	return true
}

// demand returns the grants of the last full window or the current one,
// whichever is larger, rolling the windows forward to now.
func (s *local) demand(now time.Time) int {
	if elapsed := now.Sub(s.demandStart); elapsed >= s.window {
		s.demandPrev = s.demandNow
		if elapsed >= 2*s.window {
			s.demandPrev = 0
		}
		s.demandNow = 0
		s.demandStart = now
	}
	return max(s.demandNow, s.demandPrev)
}

// leaseSize returns how many tokens to lease at now, for waiters callers
// inside Wait, at effective rate rate and with burst: as many as wait or
// were taken lately, at most window of the rate and burst, at least one.
func (s *local) leaseSize(now time.Time, waiters int, rate float64, burst int) int {
	most := int(math.Floor(rate * s.window.Seconds()))
	return max(1, min(max(waiters, s.demand(now)), most, burst))
}

// takeReport returns the report for a lease and starts a new one. If the
// lease fails, restore gives it back.
func (s *local) takeReport() report {
	r := s.pending
	s.pending = report{}
	s.reported += r.accepted
	return r
}

// restore gives back the report of a lease that failed.
func (s *local) restore(r report) {
	s.reported -= r.accepted
	s.pending.merge(r)
}

// leased records the answer to a lease of want tokens made at now: the
// granted slots, or, when none was granted or kept, when to come back.
func (s *local) leased(now time.Time, want int, res leaseResult) {
	rate := res.row.EffectiveRate
	// The row grants only the tokens due within the window at the rate it
	// sets, which spaces the slots, so they fall within it (but for the
	// rounding of a slot's time up to the nanosecond). A slot beyond it
	// all the same is dropped, its token expired unused: a process holds
	// at most a window of slots, and hears of another's pause at its next
	// lease, within the window, not when it polls.
	last := maxTime(now, res.t0).Add(s.window)
	kept := 0
	for i := 1; i <= res.n; i++ {
		slot := res.t0.Add(durationOf((float64(i) - res.avail) / rate))
		if slot.After(last) {
			s.expired += int64(res.n - i + 1)
			break
		}
		s.slots = append(s.slots, slot)
		kept++
	}
	if kept > 0 {
		return
	}
	retry := res.penaltyUntil
	if !res.penalised {
		// Come back when the row's next token (after the n granted) is
		// due within the window, as a process whose callers are busy
		// does: each slot it uses sends a caller back to lease the token
		// that has just come due. Waiting for a whole batch instead, this
		// process would find each token taken by that one before the
		// batch came due, and starve while it calls at full rate. Leasing
		// again at once, it would find the same debt.
		need := (float64(res.n) + 1 - res.avail) / rate
		retry = res.t0.Add(durationOf(need) - s.window)
	}
	s.retryAt = maxTime(retry, now.Add(time.Millisecond))
}

// penalised records a penalty until then, as the row says: slots are
// dropped when Wait next asks during it.
func (s *local) penalised(until time.Time) {
	s.penalty = maxTime(s.penalty, until)
}

// stop records a penalty until then seen by this process (a throttle or an
// exhausted quota) and drops every slot at once.
func (s *local) stop(until time.Time) {
	s.penalised(until)
	s.slots = nil
}

// resettle drops every slot: they were leased under settings that changed
// and may be too dense now.
func (s *local) resettle() { s.slots = nil }

// succeeded records an answer that was not a throttle.
func (s *local) succeeded() {
	s.pending.success = true
	s.pending.accepted++
}

// answered is this process's accepted answers, reported or not.
func (s *local) answered() int64 { return s.reported + s.pending.accepted }

// takeAccepted returns the accepted answers not yet reported, for a penalty
// statement, and forgets them; restore gives them back if it fails.
func (s *local) takeAccepted() int64 {
	n := s.pending.accepted
	s.pending.accepted = 0
	s.reported += n
	return n
}

// hinted records a rate implied by the headers of the answer to a call sent
// at sent: the latest such answer's caps the row's rate with the next
// lease. The latest and not the lowest: a window's answers each give its
// rate from what is left of it, and the later the answer the more a reset
// known only to the second weighs in it, so the lowest of several is the
// most wrong, not the most cautious.
func (s *local) hinted(rate float64, sent time.Time) {
	s.pending.merge(report{hintRate: math.Max(rate, minRate), hintAt: sent})
}

// exhausted records a quota exhausted until then: this process stops at
// once, and the next lease writes the penalty to the row. With paced, the
// fleet was paced within the quota, and the slots leased for after the
// reset are kept: their tokens are spent in the row, and dropped they were
// lost, a call of every other window when the fleet paces at the quota (a
// fixed window of 20 a second: 97.5%). Slots leased at the pace the count
// left implies are dropped: that pace spikes near a reset, and its slots
// after it come in a clump.
func (s *local) exhausted(until time.Time, paced bool) {
	s.pending.merge(report{hintStop: until})
	if !paced {
		s.stop(until)
		return
	}
	s.penalised(until)
	s.dropBefore(until)
}

// dropBefore drops the slots before t.
func (s *local) dropBefore(t time.Time) {
	i := 0
	for i < len(s.slots) && s.slots[i].Before(t) {
		i++
	}
	s.slots = s.slots[i:]
}

// minRate is the smallest rate a hint sets: one token a day.
const minRate = 1.0 / 86400

// durationOf converts seconds to a Duration, rounding up so a caller never
// wakes before its token exists.
func durationOf(seconds float64) time.Duration {
	if seconds <= 0 {
		return 0
	}
	if seconds >= math.MaxInt64/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(seconds * float64(time.Second)))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
