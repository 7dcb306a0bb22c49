package providersim

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
)

const lookupPrefix = "/v1/transactions/"

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	switch {
	case path == "/_sim/stats":
		s.serveStats(w, r)
	case path == "/_sim/config":
		s.serveConfig(w, r)
	case path == listPath:
		s.serveList(w, r)
	case strings.HasPrefix(path, lookupPrefix) && !strings.Contains(path[len(lookupPrefix):], "/"):
		id, err := url.PathUnescape(path[len(lookupPrefix):])
		if err != nil || id == "" {
			writeJSON(w, http.StatusNotFound, errorBody("not_found", "no such route"))
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeJSON(w, http.StatusMethodNotAllowed, errorBody("method_not_allowed", "use GET"))
			return
		}
		s.serveLookup(w, r, id)
	default:
		writeJSON(w, http.StatusNotFound, errorBody("not_found", "no such route"))
	}
}

func errorBody(code, msg string) map[string]string {
	return map[string]string{"error": code, "message": msg}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// answer is what serveLookup decided, written after the latency.
type answer struct {
	status int
	body   any    // JSON-encoded
	raw    string // written as is when body is nil
}

func (s *Server) serveLookup(w http.ResponseWriter, r *http.Request, id string) {
	now := s.now()
	a, latency := s.decide(w.Header(), r, id, nil, now)
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	if a.body != nil {
		writeJSON(w, a.status, a.body)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_, _ = w.Write([]byte(a.raw))
}

// decide does the bookkeeping of one lookup under the lock and chooses the
// answer and the latency. sees, when not nil, says whether the endpoint
// and account asked can see record id (a refund is not found at the
// PaymentIntents endpoint, nor another account's object); nil sees all.
func (s *Server) decide(h http.Header, r *http.Request, id string, sees func(id string) bool, now time.Time) (answer, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	sec := s.secondLocked(now)
	sec.Calls++
	a := s.answerLocked(h, r, id, sees, now)
	s.byStatus[a.status]++
	switch {
	case a.status == http.StatusTooManyRequests:
		s.throttled++
		sec.Throttled++
	case a.status >= 200 && a.status < 300:
		sec.OK++
	default:
		sec.Failed++
	}
	lat := s.cfg.Latency.Fixed
	if s.cfg.Latency.Jitter > 0 {
		lat += time.Duration(s.rng.Int64N(int64(s.cfg.Latency.Jitter)))
	}
	return a, lat
}

func (s *Server) answerLocked(h http.Header, r *http.Request, id string, sees func(string) bool, now time.Time) answer {
	if a := s.authLocked(h, r); a != nil {
		return *a
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return answer{status: http.StatusBadRequest, body: errorBody("idempotency_key_required", "the Idempotency-Key header is required")}
	}
	s.callsPerKey[key]++
	if a := s.limitLocked(h, now); a != nil {
		return *a
	}

	s.callsPerID[id]++
	if s.callsPerID[id] == 1 {
		s.secondLocked(now).FirstCalls++
	}
	if s.transientRate > 0 && s.rng.Float64() < s.transientRate {
		return answer{status: http.StatusServiceUnavailable, body: errorBody("unavailable", "try again")}
	}
	rec, known := s.records[id]
	if !known || sees != nil && !sees(id) {
		return answer{status: http.StatusNotFound, body: errorBody("not_found", "no such transaction")}
	}
	f := FaultNone
	if !s.faultsCleared {
		f = s.fault(id)
	}
	switch f {
	case FaultMismatch:
		rec, _ = s.mismatch(rec)
	case FaultMissing:
		return answer{status: http.StatusNotFound, body: errorBody("not_found", "no such transaction")}
	case FaultBadRequest:
		return answer{status: http.StatusBadRequest, body: errorBody("invalid_request", "transaction "+id+" cannot be looked up")}
	case FaultBadBody:
		return answer{status: http.StatusOK, raw: `{"id": "` + jsonEscape(id) + `", "amount_minor": 12` + "\x00\xff<html>"}
	case FaultTransient:
		if s.callsPerID[id] <= s.cfg.TransientCalls {
			return answer{status: http.StatusServiceUnavailable, body: errorBody("unavailable", "try again")}
		}
	}
	return answer{status: http.StatusOK, body: rec}
}

// authLocked checks the bearer token, when one is required; a non-nil
// answer refuses the call.
func (s *Server) authLocked(h http.Header, r *http.Request) *answer {
	if s.token == "" {
		return nil
	}
	auth := r.Header.Get("Authorization")
	given, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || given == "" {
		h.Set("WWW-Authenticate", `Bearer realm="provider-sim"`)
		return &answer{status: http.StatusUnauthorized, body: errorBody("unauthorized", "a bearer token is required")}
	}
	if subtle.ConstantTimeCompare([]byte(given), []byte(s.token.Reveal())) != 1 {
		return &answer{status: http.StatusForbidden, body: errorBody("forbidden", "the token is not valid")}
	}
	return nil
}

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func (s *Server) serveStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody("method_not_allowed", "use GET"))
		return
	}
	st := s.Stats()
	if r.URL.Query().Get("keys") == "" {
		st.CallsPerKey = nil
	}
	writeJSON(w, http.StatusOK, st)
}

// ConfigChange is the body of POST /_sim/config; absent fields are left
// alone.
type ConfigChange struct {
	// Limit is a schedule in ParseSchedule's form, its offsets counted from
	// the change.
	Limit *string `json:"limit,omitempty"`
	// Burst is the new burst; 0 means the schedule's highest rate. Absent
	// keeps the current burst.
	Burst *int `json:"burst,omitempty"`
	// ClearFaults, when true, calls ClearFaults.
	ClearFaults bool `json:"clear_faults,omitempty"`
	// TransientRate replaces Config.TransientRate.
	TransientRate *float64 `json:"transient_rate,omitempty"`
	// Token replaces the required bearer token ("" turns authentication off).
	Token *string `json:"token,omitempty"`
}

func (s *Server) serveConfig(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody("method_not_allowed", "use POST"))
		return
	}
	var c ConfigChange
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody("invalid_config", err.Error()))
		return
	}
	if err := s.Apply(c); err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody("invalid_config", err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, s.Stats().limitView())
}

// Apply applies a configuration change, as POST /_sim/config does.
func (s *Server) Apply(c ConfigChange) error {
	if c.TransientRate != nil && (*c.TransientRate < 0 || *c.TransientRate > 1 || math.IsNaN(*c.TransientRate)) {
		return fmt.Errorf("apply simulator config: transient_rate %v: want a share in [0, 1]", *c.TransientRate)
	}
	if c.Burst != nil && *c.Burst < 0 {
		return fmt.Errorf("apply simulator config: burst %d: want 0 or more", *c.Burst)
	}
	if c.Limit != nil || c.Burst != nil {
		s.mu.Lock()
		sched, burst := s.schedule, s.meter.Burst()
		s.mu.Unlock()
		if c.Limit != nil {
			var err error
			if sched, err = ParseSchedule(*c.Limit); err != nil {
				return fmt.Errorf("apply simulator config: %w", err)
			}
		}
		if c.Burst != nil {
			burst = *c.Burst
		}
		s.SetLimit(sched, burst)
	}
	if c.ClearFaults {
		s.ClearFaults()
	}
	s.mu.Lock()
	if c.TransientRate != nil {
		s.transientRate = *c.TransientRate
	}
	if c.Token != nil {
		s.token = provider.Secret(*c.Token)
	}
	s.mu.Unlock()
	return nil
}
