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
// The zero value knows no window. Not safe for concurrent use.
type resetBound struct {
	lo, hi time.Time // the reset is in (lo, hi]
}

// refine returns h with its Reset narrowed to the window's bound, after
// narrowing that with h's. An answer whose second does not overlap the
// bound starts a new window.
func (b *resetBound) refine(h Hints) Hints {
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
