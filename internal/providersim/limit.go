package providersim

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"
)

// defaultBurst is the schedule's highest rate rounded up, at least 1.
func defaultBurst(sched Schedule) int {
	m := 0.0
	for _, st := range sched {
		m = max(m, st.Rate)
	}
	return max(1, int(math.Ceil(m)))
}

// setLimitLocked installs a schedule starting at now; s.mu must be held (or
// s not yet shared).
func (s *Server) setLimitLocked(sched Schedule, burst int, now time.Time) {
	if burst <= 0 {
		burst = defaultBurst(sched)
	}
	if s.burst == 0 || len(s.schedule) == 0 {
		s.tokens = float64(burst) // a fresh or previously unlimited bucket starts full
	}
	s.schedule, s.scheduleStart, s.burst, s.refilled = slices.Clone(sched), now, float64(burst), now
	s.tokens = min(s.tokens, s.burst)
}

// SetLimit replaces the rate limit; the schedule's offsets count from now.
// burst 0 means the schedule's highest rate. Tokens in the bucket are kept,
// up to the new burst.
func (s *Server) SetLimit(sched Schedule, burst int) {
	s.mu.Lock()
	s.refillLocked(s.now())
	s.setLimitLocked(sched, burst, s.now())
	s.mu.Unlock()
	s.logger.Info("simulator limit changed", "limit", sched.String(), "burst", burst)
}

// refillLocked adds the tokens earned since the last refill.
func (s *Server) refillLocked(now time.Time) {
	if !now.After(s.refilled) {
		return
	}
	earned, unlimited := s.schedule.accrue(s.refilled.Sub(s.scheduleStart), now.Sub(s.scheduleStart))
	if unlimited {
		s.tokens = s.burst
	} else {
		s.tokens = min(s.burst, s.tokens+earned)
	}
	s.refilled = now
}

// takeLocked takes a token at now; the caller holds s.mu. When none is left
// it returns the wait until one is.
func (s *Server) takeLocked(now time.Time) (ok bool, wait time.Duration, rate float64) {
	s.refillLocked(now)
	rate = s.schedule.RateAt(now.Sub(s.scheduleStart))
	if rate == 0 {
		return true, 0, 0
	}
	if s.tokens >= 1 {
		s.tokens--
		return true, 0, rate
	}
	return false, time.Duration((1 - s.tokens) / rate * float64(time.Second)), rate
}

func (s *Server) limitAtLocked(t time.Time) float64 {
	return s.schedule.RateAt(t.Sub(s.scheduleStart))
}

// rateLimitHeadersLocked sets the IETF draft headers: the policy (burst per
// window of burst/rate seconds) and the remaining quota with the seconds
// until the bucket is full again.
func (s *Server) rateLimitHeadersLocked(h http.Header, rate float64) {
	window := max(1, int64(math.Ceil(s.burst/rate)))
	reset := max(0, int64(math.Ceil((s.burst-s.tokens)/rate)))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, int64(s.burst), window))
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, max(0, int64(math.Floor(s.tokens))), reset))
}
