package providersim

import (
	"fmt"
	"math"
	"net/http"
	"time"
)

// The fixed-window limit (Config.Window): each window of Window, counted
// from New (or the latest SetLimit), allows the schedule's rate at its start
// times Window calls, and every answer advertises the quota left in the
// IETF fields of draft-ietf-httpapi-ratelimit-headers-11:
// `RateLimit-Policy: "default";q=<quota>;w=<window seconds>` and
// `RateLimit: "default";r=<remaining>;t=<seconds to the reset, rounded up>`.

// windowLocked returns the start of the window at now and its quota,
// rolling the count over when a new window began; s.mu must be held.
func (s *Server) windowLocked(now time.Time) (start time.Time, quota int64) {
	w := s.cfg.Window
	n := max(0, now.Sub(s.scheduleStart)/w)
	start = s.scheduleStart.Add(n * w)
	if !start.Equal(s.windowStart) {
		s.windowStart, s.windowUsed = start, 0
	}
	rate := s.schedule.RateAt(start.Sub(s.scheduleStart))
	return start, int64(math.Floor(rate * w.Seconds()))
}

// takeWindowLocked takes one call of the window's quota at now, or returns
// the wait until the next window; rate is the schedule's rate (0:
// unlimited, nothing counted).
func (s *Server) takeWindowLocked(now time.Time) (ok bool, wait time.Duration, rate float64) {
	rate = s.limitAtLocked(now)
	if rate == 0 {
		return true, 0, 0
	}
	start, quota := s.windowLocked(now)
	if s.windowUsed < quota {
		s.windowUsed++
		return true, 0, rate
	}
	return false, start.Add(s.cfg.Window).Sub(now), rate
}

// windowHeadersLocked sets the IETF fields of the window at now.
func (s *Server) windowHeadersLocked(h http.Header, now time.Time) {
	start, quota := s.windowLocked(now)
	reset := max(1, int64(math.Ceil(start.Add(s.cfg.Window).Sub(now).Seconds())))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, quota, int64(math.Ceil(s.cfg.Window.Seconds()))))
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, max(0, quota-s.windowUsed), reset))
}
