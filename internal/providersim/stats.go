package providersim

import (
	"math"
	"time"
)

// Second is one second of the per-second series, counted from New: calls
// received, answered 2xx, answered 429, answered otherwise, the calls past
// the rate limit that were the first for their transaction, and the rate
// limit in force (0: unlimited).
type Second struct {
	Second     int64   `json:"second"`
	Calls      int64   `json:"calls"`
	OK         int64   `json:"ok"`
	Throttled  int64   `json:"throttled"`
	Failed     int64   `json:"failed"`
	FirstCalls int64   `json:"first_calls"`
	Limit      float64 `json:"limit"`
}

// Stats are the simulator's counters.
type Stats struct {
	// Calls counts every lookup request, throttled or not.
	Calls int64 `json:"calls"`
	// ListCalls counts the list's page requests (included in Calls).
	ListCalls int64 `json:"list_calls"`
	// Throttled counts 429 answers.
	Throttled int64 `json:"throttled"`
	// ByStatus counts answers by HTTP status.
	ByStatus map[int]int64 `json:"by_status"`
	// DistinctKeys is the number of distinct Idempotency-Keys seen;
	// MaxCallsPerKey the most calls made with one key.
	DistinctKeys   int `json:"distinct_keys"`
	MaxCallsPerKey int `json:"max_calls_per_key"`
	// CallsPerKey counts calls per Idempotency-Key (omitted from
	// /_sim/stats unless ?keys=1).
	CallsPerKey map[string]int `json:"calls_per_key,omitempty"`
	// Limit and Burst are the rate limit in force.
	Limit string `json:"limit"`
	Burst int    `json:"burst"`
	// Series is the per-second series, in order, without gaps.
	Series []Second `json:"series"`
}

// CallsForKey returns the number of lookups made with an Idempotency-Key.
func (s *Server) CallsForKey(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callsPerKey[key]
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Calls:        s.calls,
		ListCalls:    s.listCalls,
		Throttled:    s.throttled,
		ByStatus:     make(map[int]int64, len(s.byStatus)),
		DistinctKeys: len(s.callsPerKey),
		CallsPerKey:  make(map[string]int, len(s.callsPerKey)),
		Limit:        s.schedule.String(),
		Burst:        s.meter.Burst(),
	}
	for k, v := range s.byStatus {
		st.ByStatus[k] = v
	}
	for k, v := range s.callsPerKey {
		st.CallsPerKey[k] = v
		st.MaxCallsPerKey = max(st.MaxCallsPerKey, v)
	}
	if len(s.series) > 0 {
		lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
		for k := range s.series {
			lo, hi = min(lo, k), max(hi, k)
		}
		for sec := lo; sec <= hi; sec++ {
			if b, ok := s.series[sec]; ok {
				st.Series = append(st.Series, *b)
			} else {
				st.Series = append(st.Series, Second{Second: sec, Limit: s.limitAtLocked(s.start.Add(time.Duration(sec) * time.Second))})
			}
		}
	}
	return st
}

// secondLocked returns the series bucket of now.
func (s *Server) secondLocked(now time.Time) *Second {
	d := now.Sub(s.start)
	sec := int64(d / time.Second)
	if d < 0 {
		sec-- // floor
	}
	b, ok := s.series[sec]
	if !ok {
		b = &Second{Second: sec}
		s.series[sec] = b
	}
	b.Limit = s.limitAtLocked(now)
	return b
}

func (st Stats) limitView() map[string]any {
	return map[string]any{"limit": st.Limit, "burst": st.Burst}
}
