package limiter

import "time"

// resetBound narrows the reset of a quota window that headers give in whole
// seconds (`t=3`: the reset is in (2 s, 3 s], the draft's delay-seconds
// rounded up): each answer bounds it to one second, and the answers of one
// window together bound it to the latest of their lower ends and the
// earliest of their upper ends. Pacing to the earliest upper end instead of
// the latest answer's loses less of each window to the rounding; it is
// still no earlier than the reset, so the quota never runs out before it.
//
// A window of a second or two is not narrowed that way (every answer says
// t=1), but the count left says when it began: when an answer's Remaining
// is above that of the answer to the call sent before it, the window
// restarted between the two sends, and (the policy giving the window's
// length) it ends that length after them. That bound is as narrow as the
// calls are dense.
//
// The zero value knows no window. Not safe for concurrent use.
type resetBound struct {
	lo, hi time.Time // the reset is in (lo, hi]
	// last is the latest-sent call whose answer gave a count left, and
	// remaining that count.
	last      time.Time
	remaining int64
}

// refine returns h with its Reset narrowed to the window's bound, after
// narrowing that with h's. An answer whose second does not overlap the
// bound starts a new window, as does one whose count left went up (without
// the latter, answers on both sides of a restart that overlap would be
// taken for one window's, and the bound put before the real reset).
func (b *resetBound) refine(h Hints) Hints {
	if h.HasRemaining && !h.Sent.IsZero() && !h.Sent.Before(b.last) {
		if !b.last.IsZero() && h.Sent.After(b.last) && h.Remaining > b.remaining && h.Window > 0 {
			b.lo, b.hi = b.last.Add(h.Window), h.Sent.Add(h.Window)
		}
		b.last, b.remaining = h.Sent, h.Remaining
	}
	if h.Reset.IsZero() {
		return h
	}
	lo, hi := h.Reset.Add(-time.Second), h.Reset
	if b.hi.IsZero() || !lo.Before(b.hi) || !b.lo.Before(hi) {
		b.lo, b.hi = lo, hi
	} else {
		b.lo, b.hi = maxTime(b.lo, lo), minTime(b.hi, hi)
	}
	h.Reset = b.hi
	return h
}
