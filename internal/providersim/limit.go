package providersim

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// Algorithm is how the simulator counts calls against its rate limit: the
// shapes real providers' limits have.
type Algorithm int

// Algorithms.
const (
	// TokenBucket holds Burst tokens, refilled at the schedule's rate; a
	// call takes one, and is refused when none is left (Stripe, Square,
	// most gateways).
	TokenBucket Algorithm = iota
	// LeakyBucket holds at most Burst calls and leaks them at the
	// schedule's rate; a call that would overflow it is refused (Shopify's
	// REST limit). It is the token bucket's law counted the other way: the
	// room left is the tokens.
	LeakyBucket
	// SlidingLog allows at most rate×Window calls in any Window: a call is
	// refused while that many calls were accepted in the Window before it.
	SlidingLog
	// FixedWindow allows rate×Window calls in each Window counted from the
	// start (or the latest SetLimit), the rate taken at the window's start.
	FixedWindow
)

var algorithmNames = []string{"token-bucket", "leaky-bucket", "sliding-log", "fixed-window"}

// String returns the algorithm's name, as ParseAlgorithm reads it.
func (a Algorithm) String() string { return nameOf(a, algorithmNames, "Algorithm") }

// ParseAlgorithm parses token-bucket, leaky-bucket, sliding-log or
// fixed-window.
func ParseAlgorithm(name string) (Algorithm, error) {
	return parseName[Algorithm](name, algorithmNames, "rate-limit algorithm")
}

// windowed reports whether the algorithm counts calls in windows (and so
// needs a Window).
func (a Algorithm) windowed() bool { return a == SlidingLog || a == FixedWindow }

// RetryAfterStyle is how a 429 says when to call again.
type RetryAfterStyle int

// Retry-After styles.
const (
	// RetryAfterSeconds sends Retry-After in whole seconds: the wait until
	// a call would be accepted, rounded up, at least Config.RetryAfterMin.
	RetryAfterSeconds RetryAfterStyle = iota
	// RetryAfterExact sends that wait to the microsecond in
	// Retry-After-Ms (milliseconds, with decimals), as the OpenAI and
	// Anthropic APIs do, beside Retry-After in whole seconds rounded up.
	RetryAfterExact
	// RetryAfterAbsent sends no Retry-After: the client picks its pause.
	RetryAfterAbsent
)

var retryAfterNames = []string{"seconds", "exact", "absent"}

// String returns the style's name, as ParseRetryAfterStyle reads it.
func (r RetryAfterStyle) String() string { return nameOf(r, retryAfterNames, "RetryAfterStyle") }

// ParseRetryAfterStyle parses seconds, exact or absent.
func ParseRetryAfterStyle(name string) (RetryAfterStyle, error) {
	return parseName[RetryAfterStyle](name, retryAfterNames, "Retry-After style")
}

// Meter counts calls against a rate-limit schedule with one of the
// algorithms. Its times are offsets from the schedule's start, and must not
// go backwards. It is pure (no clock, no lock): the [Server] holds it under
// its mutex, and simulations drive it directly.
//
// The zero value is not usable; call NewMeter. Not safe for concurrent use.
type Meter struct {
	alg    Algorithm
	sched  Schedule
	burst  float64
	window time.Duration

	// TokenBucket: tokens; LeakyBucket: calls in the bucket; at the
	// offset at.
	level float64
	at    time.Duration
	// SlidingLog: the offsets of the calls accepted in the last window,
	// oldest first, from head on.
	log  []time.Duration
	head int
	// FixedWindow: the index of the current window and the calls counted
	// in it.
	index int64
	used  int64
}

// NewMeter returns a meter of the algorithm for sched, with a bucket of
// burst (the buckets; 0 means the schedule's highest rate, at least one
// call) or windows of window (the windowed ones, > 0). A bucket starts full
// of tokens, a log and a window empty.
func NewMeter(alg Algorithm, sched Schedule, burst int, window time.Duration) (*Meter, error) {
	if alg < TokenBucket || alg > FixedWindow {
		return nil, fmt.Errorf("rate-limit algorithm %d: unknown", alg)
	}
	if alg.windowed() != (window > 0) {
		if window > 0 {
			return nil, fmt.Errorf("rate-limit algorithm %v: a window of %v: only sliding-log and fixed-window count in windows", alg, window)
		}
		return nil, fmt.Errorf("rate-limit algorithm %v: needs a window", alg)
	}
	if burst < 0 {
		return nil, fmt.Errorf("rate-limit burst %d: want 0 or more", burst)
	}
	m := &Meter{alg: alg, sched: sched, window: window, burst: float64(burst)}
	if burst == 0 {
		m.burst = float64(defaultBurst(sched))
	}
	if alg == TokenBucket {
		m.level = m.burst
	}
	return m, nil
}

// defaultBurst is the schedule's highest rate rounded up, at least 1.
func defaultBurst(sched Schedule) int {
	m := 0.0
	for _, st := range sched {
		m = max(m, st.Rate)
	}
	return max(1, int(math.Ceil(m)))
}

// Burst returns the bucket's capacity (the windowed algorithms: 0).
func (m *Meter) Burst() int {
	if m.alg.windowed() {
		return 0
	}
	return int(m.burst)
}

// Rate returns the schedule's rate at offset d; 0 is unlimited.
func (m *Meter) Rate(d time.Duration) float64 { return m.sched.RateAt(d) }

// quota is a window's allowance at rate: rate×Window calls, at least one.
func (m *Meter) quota(rate float64) int64 {
	return max(1, int64(math.Floor(rate*m.window.Seconds()+1e-9)))
}

// advance brings a bucket to offset d.
func (m *Meter) advance(d time.Duration) {
	if d <= m.at {
		return
	}
	earned, unlimited := m.sched.accrue(m.at, d)
	switch {
	case m.alg == TokenBucket && unlimited:
		m.level = m.burst
	case m.alg == TokenBucket:
		m.level = min(m.burst, m.level+earned)
	case unlimited:
		m.level = 0
	default:
		m.level = max(0, m.level-earned)
	}
	m.at = d
}

// Take counts a call at offset d against the limit. ok reports whether it
// is accepted; when it is not, wait is how long until a call would be.
// rate is the schedule's rate at d (0: unlimited, every call accepted and
// nothing counted).
func (m *Meter) Take(d time.Duration) (ok bool, wait time.Duration, rate float64) {
	rate = m.sched.RateAt(d)
	switch m.alg {
	case TokenBucket, LeakyBucket:
		m.advance(d)
		if rate == 0 {
			return true, 0, 0
		}
		room := m.level
		if m.alg == LeakyBucket {
			room = m.burst - m.level
		}
		// The level is refilled by adding float rates over many short
		// spans, which can leave a whole token a few ulps short: a
		// call paced exactly at the rate would be refused for the
		// rounding, which no real provider does.
		if room >= 1-1e-9 {
			if m.alg == TokenBucket {
				m.level--
			} else {
				m.level++
			}
			return true, 0, rate
		}
		return false, durationCeil((1 - room) / rate), rate
	case SlidingLog:
		if rate == 0 {
			return true, 0, 0
		}
		for m.head < len(m.log) && m.log[m.head] <= d-m.window {
			m.head++
		}
		if m.head > 1024 && m.head > len(m.log)/2 {
			m.log = append(m.log[:0], m.log[m.head:]...)
			m.head = 0
		}
		n, q := int64(len(m.log)-m.head), m.quota(rate)
		if n < q {
			m.log = append(m.log, d)
			return true, 0, rate
		}
		// The call that must leave the window for one more to fit.
		return false, m.log[m.head+int(n-q)] + m.window - d, rate
	default: // FixedWindow
		if rate == 0 {
			return true, 0, 0
		}
		start := m.windowAt(d)
		if m.used < m.quota(m.sched.RateAt(start)) {
			m.used++
			return true, 0, rate
		}
		return false, start + m.window - d, rate
	}
}

// windowAt rolls the fixed window over to the one holding d and returns its
// start.
func (m *Meter) windowAt(d time.Duration) time.Duration {
	if i := int64(max(d, 0) / m.window); i != m.index {
		m.index, m.used = i, 0
	}
	return time.Duration(m.index) * m.window
}

// Quota is what the meter tells a client about its limit at offset d, in
// the terms of the IETF RateLimit fields: the calls allowed per window, the
// calls left now, and when the quota is whole again (the windows: at the
// next window; the buckets: their size per the time they take to refill,
// and the time until they are full).
func (m *Meter) Quota(d time.Duration) (quota, remaining int64, window, reset time.Duration) {
	rate := m.sched.RateAt(d)
	if rate == 0 {
		return 0, 0, 0, 0
	}
	switch m.alg {
	case TokenBucket, LeakyBucket:
		m.advance(d)
		room := m.level
		if m.alg == LeakyBucket {
			room = m.burst - m.level
		}
		window = time.Duration(max(1, math.Ceil(m.burst/rate))) * time.Second
		return int64(m.burst), max(0, int64(math.Floor(room))), window, durationCeil((m.burst - room) / rate)
	case SlidingLog:
		for m.head < len(m.log) && m.log[m.head] <= d-m.window {
			m.head++
		}
		q := m.quota(rate)
		if n := len(m.log) - m.head; n > 0 {
			reset = m.log[len(m.log)-1] + m.window - d
		}
		return q, max(0, q-int64(len(m.log)-m.head)), m.window, reset
	default:
		start := m.windowAt(d)
		q := m.quota(m.sched.RateAt(start))
		return q, max(0, q-m.used), m.window, start + m.window - d
	}
}

// rebase restarts the meter's offsets at offset d (a new schedule starts
// there) with sched and burst (0: the schedule's highest rate): a bucket
// keeps its level up to the new size (an unlimited one starts full), a log
// its calls, a fixed window starts afresh.
func (m *Meter) rebase(d time.Duration, sched Schedule, burst int) {
	wasUnlimited := len(m.sched) == 0
	m.advance(d)
	for i := m.head; i < len(m.log); i++ {
		m.log[i] -= d
	}
	m.sched, m.at, m.index, m.used = sched, 0, 0, 0
	if burst <= 0 {
		burst = defaultBurst(sched)
	}
	m.burst = float64(burst)
	switch {
	case m.alg == TokenBucket && wasUnlimited:
		m.level = m.burst
	case m.alg == TokenBucket:
		m.level = min(m.level, m.burst)
	case m.alg == LeakyBucket:
		m.level = min(m.level, m.burst)
	}
}

// durationCeil converts seconds to a Duration, rounded up to the
// microsecond, so a client that waits it finds the call accepted.
func durationCeil(seconds float64) time.Duration {
	return time.Duration(math.Ceil(seconds*1e6-1e-6)) * time.Microsecond
}

// SetLimit replaces the rate limit; the schedule's offsets count from now.
// burst 0 means the schedule's highest rate. Tokens in the bucket are kept,
// up to the new burst; a log keeps its calls; a fixed window starts afresh.
func (s *Server) SetLimit(sched Schedule, burst int) {
	sched = slices.Clone(sched)
	s.mu.Lock()
	now := s.now()
	s.meter.rebase(now.Sub(s.scheduleStart), sched, burst)
	s.schedule, s.scheduleStart = sched, now
	s.mu.Unlock()
	s.logger.Info("simulator limit changed", "limit", sched.String(), "burst", burst)
}

func (s *Server) limitAtLocked(t time.Time) float64 {
	return s.schedule.RateAt(t.Sub(s.scheduleStart))
}

// limitLocked counts a call at now against the rate limit and writes the
// limit's headers: the IETF RateLimit fields when Config.RateLimitHeaders,
// and on a refusal Retry-After in the configured style. A non-nil answer is
// the 429 of a call past the limit; s.mu must be held.
func (s *Server) limitLocked(h http.Header, now time.Time) *answer {
	d := now.Sub(s.scheduleStart)
	ok, wait, rate := s.meter.Take(d)
	if rate == 0 {
		return nil
	}
	if s.cfg.RateLimitHeaders {
		q, r, w, reset := s.meter.Quota(d)
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, q, int64(math.Ceil(w.Seconds()))))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, r, int64(math.Ceil(reset.Seconds()))))
	}
	if ok {
		return nil
	}
	refused := &answer{status: http.StatusTooManyRequests, body: errorBody("rate_limited", "too many requests")}
	secs := int64(math.Ceil(wait.Seconds()))
	switch s.cfg.RetryAfter {
	case RetryAfterAbsent:
		return refused
	case RetryAfterExact:
		h.Set("Retry-After-Ms", strconv.FormatFloat(float64(wait.Microseconds())/1000, 'f', -1, 64))
	default:
		secs = max(secs, int64(math.Ceil(s.cfg.RetryAfterMin.Seconds())))
	}
	if s.cfg.RetryAfterDate {
		h.Set("Retry-After", now.Add(time.Duration(secs)*time.Second).UTC().Format(http.TimeFormat))
	} else {
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	return refused
}
