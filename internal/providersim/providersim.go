// Package providersim is a simulated payment provider for tests, benchmarks
// and trials: an [http.Handler] serving GET /v1/transactions/{id} from a
// dataset, with faults chosen deterministically per transaction id, a rate
// limit of its own that can change on a schedule, latency, and counters.
//
// Every transaction's correct final outcome is known ([Server.Truth]), so a
// run against the simulator can be checked item by item.
//
// Endpoints:
//
//	GET  /v1/transactions/{id}  the provider contract (bearer token, Idempotency-Key)
//	GET  /_sim/stats            counters as JSON (?keys=1 adds calls per idempotency key)
//	POST /_sim/config           change the limit, the transient rate, the token, or clear faults
//
// The /_sim endpoints need no token: bind the simulator to a loopback address.
package providersim

import (
	"cmp"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/provider"
)

// Fault is what the simulator does to one transaction.
type Fault int

// Faults.
const (
	// FaultNone serves the record as given.
	FaultNone Fault = iota
	// FaultMismatch serves the record with one field changed.
	FaultMismatch
	// FaultMissing answers 404.
	FaultMissing
	// FaultBadRequest answers 400 on every call.
	FaultBadRequest
	// FaultBadBody answers 200 with an unreadable body on every call.
	FaultBadBody
	// FaultTransient answers 503 to the first Config.TransientCalls calls,
	// then serves the record.
	FaultTransient
)

// String returns a short name: none, mismatch, missing, bad_request,
// bad_body, transient.
func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultMismatch:
		return "mismatch"
	case FaultMissing:
		return "missing"
	case FaultBadRequest:
		return "bad_request"
	case FaultBadBody:
		return "bad_body"
	case FaultTransient:
		return "transient"
	default:
		return "Fault(" + strconv.Itoa(int(f)) + ")"
	}
}

// Shares are the fractions of transactions given each fault, chosen
// deterministically per transaction id from Config.Seed. Their sum must not
// exceed 1.
type Shares struct {
	Mismatch   float64
	Missing    float64
	BadRequest float64
	BadBody    float64
	Transient  float64
}

func (s Shares) sum() float64 { return s.Mismatch + s.Missing + s.BadRequest + s.BadBody + s.Transient }

// Latency is how long the simulator takes to answer: Fixed plus a uniform
// random part in [0, Jitter).
type Latency struct {
	Fixed  time.Duration
	Jitter time.Duration
}

// Config configures a [Server].
type Config struct {
	// Records is the dataset: the correct record of every known transaction.
	// Ids must be unique. Defaults to Load's result.
	Records []provider.Record
	// Load, when Records is nil, is called once by New to get them.
	// Defaults to an empty dataset (every id is missing).
	Load func() ([]provider.Record, error)
	// Seed chooses the faulty transactions and drives the random parts
	// (transient rate, latency). Defaults to 0.
	Seed uint64
	// Shares are the fault shares. Defaults to no faults.
	Shares Shares
	// TransientCalls is how many calls of a FaultTransient transaction fail
	// before it succeeds. Defaults to 2.
	TransientCalls int
	// TransientRate is the probability that any call fails with a 503,
	// independently of the transaction. Defaults to 0.
	TransientRate float64
	// Limit is the rate limit schedule, its offsets counted from New (or
	// from the latest SetLimit). Defaults to unlimited.
	Limit Schedule
	// Burst is the token bucket's capacity. Defaults to the schedule's
	// highest rate, rounded up (at least 1).
	Burst int
	// RetryAfterDate sends Retry-After as an HTTP-date instead of seconds.
	// Defaults to false.
	RetryAfterDate bool
	// RateLimitHeaders adds RateLimit-Policy and RateLimit headers (IETF
	// draft) to every limited answer. Defaults to false.
	RateLimitHeaders bool
	// Latency delays every answer to a transaction lookup. The wait ends
	// early when the request's context does. Defaults to none.
	Latency Latency
	// Token, when set, is the bearer token required on lookups: 401 without
	// one, 403 for a wrong one. Defaults to no authentication.
	Token provider.Secret
	// Now is the clock of the limiter and the per-second series. Defaults to
	// time.Now.
	Now func() time.Time
	// Logger receives configuration changes. Defaults to discarding them.
	Logger *slog.Logger
}

// Expected is the correct final outcome of one transaction.
type Expected struct {
	// Outcome is the item's terminal state: ledger.Matched, Mismatched,
	// Missing or DeadLettered.
	Outcome ledger.State
	// Fault is the fault the transaction was given.
	Fault Fault
	// Fields lists the differing fields of a mismatch (amount_minor,
	// currency or status).
	Fields []string
	// Provider is the record the simulator serves (on success).
	Provider provider.Record
	// Reason is why a dead-lettered item is dead-lettered: http_400, or
	// max_attempts for an unreadable body. A transient transaction is
	// expected to succeed: Truth assumes the client allows more attempts
	// than Config.TransientCalls.
	Reason string
}

// Second is one second of the per-second series, counted from New: calls
// received, answered 2xx, answered 429, answered otherwise, and the rate
// limit in force (0: unlimited).
type Second struct {
	Second    int64   `json:"second"`
	Calls     int64   `json:"calls"`
	OK        int64   `json:"ok"`
	Throttled int64   `json:"throttled"`
	Failed    int64   `json:"failed"`
	Limit     float64 `json:"limit"`
}

// Stats are the simulator's counters.
type Stats struct {
	// Calls counts every lookup request, throttled or not.
	Calls int64 `json:"calls"`
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

// Server is the simulated provider. It is safe for concurrent use.
type Server struct {
	cfg     Config
	now     func() time.Time
	logger  *slog.Logger
	records map[string]provider.Record
	start   time.Time

	mu            sync.Mutex
	rng           *rand.Rand
	token         provider.Secret
	faultsCleared bool
	transientRate float64
	schedule      Schedule
	scheduleStart time.Time
	burst         float64
	tokens        float64
	refilled      time.Time
	callsPerID    map[string]int
	callsPerKey   map[string]int
	byStatus      map[int]int64
	calls         int64
	throttled     int64
	series        map[int64]*Second
}

// New returns a simulator for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Records == nil && cfg.Load != nil {
		recs, err := cfg.Load()
		if err != nil {
			return nil, fmt.Errorf("load simulator dataset: %w", err)
		}
		cfg.Records = recs
	}
	sh := cfg.Shares
	for name, v := range map[string]float64{"Mismatch": sh.Mismatch, "Missing": sh.Missing, "BadRequest": sh.BadRequest,
		"BadBody": sh.BadBody, "Transient": sh.Transient, "TransientRate": cfg.TransientRate} {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return nil, fmt.Errorf("simulator config: %s %v: want a share in [0, 1]", name, v)
		}
	}
	if sh.sum() > 1+1e-9 {
		return nil, fmt.Errorf("simulator config: Shares add up to %v: want at most 1", sh.sum())
	}
	if cfg.TransientCalls < 0 || cfg.Burst < 0 || cfg.Latency.Fixed < 0 || cfg.Latency.Jitter < 0 {
		return nil, fmt.Errorf("simulator config: TransientCalls, Burst and Latency must not be negative")
	}
	cfg.TransientCalls = cmp.Or(cfg.TransientCalls, 2)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:           cfg,
		now:           cfg.Now,
		logger:        logger,
		records:       make(map[string]provider.Record, len(cfg.Records)),
		rng:           rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		token:         cfg.Token,
		transientRate: cfg.TransientRate,
		callsPerID:    make(map[string]int),
		callsPerKey:   make(map[string]int),
		byStatus:      make(map[int]int64),
		series:        make(map[int64]*Second),
	}
	for i, r := range cfg.Records {
		if r.ID == "" {
			return nil, fmt.Errorf("simulator dataset: record %d has no id", i+1)
		}
		if _, dup := s.records[r.ID]; dup {
			return nil, fmt.Errorf("simulator dataset: duplicate transaction id %q", r.ID)
		}
		s.records[r.ID] = r
	}
	s.start = s.now()
	s.setLimitLocked(cfg.Limit, cfg.Burst, s.start)
	return s, nil
}

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

// ClearFaults makes every known transaction answer its correct record from
// now on (and unknown ones 404); the transient rate drops to 0. Truth
// changes accordingly.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.faultsCleared, s.transientRate = true, 0
	s.mu.Unlock()
	s.logger.Info("simulator faults cleared")
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

// fault returns the fault of id (before ClearFaults), from a hash of the
// seed and the id, independent of the dataset's order.
func (s *Server) fault(id string) Fault {
	u := unit(s.hash(id, 0))
	sh := s.cfg.Shares
	for _, f := range []struct {
		share float64
		fault Fault
	}{{sh.Mismatch, FaultMismatch}, {sh.Missing, FaultMissing}, {sh.BadRequest, FaultBadRequest}, {sh.BadBody, FaultBadBody}, {sh.Transient, FaultTransient}} {
		if u < f.share {
			return f.fault
		}
		u -= f.share
	}
	return FaultNone
}

func (s *Server) hash(id string, salt uint64) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], s.cfg.Seed)
	binary.LittleEndian.PutUint64(b[8:], salt)
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	return mix(h.Sum64())
}

// mix is splitmix64's finaliser: spreads FNV's weak low bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

var currencies = []string{"EUR", "USD", "GBP", "JPY", "SEK", "CHF"}

// mismatch returns r with one field changed, chosen from the id's hash.
func (s *Server) mismatch(r provider.Record) (provider.Record, string) {
	h := s.hash(r.ID, 1)
	switch h % 3 {
	case 0:
		delta := int64(1 + (h>>8)%999)
		if r.AmountMinor > math.MaxInt64-delta {
			delta = -delta
		}
		r.AmountMinor += delta
		return r, "amount_minor"
	case 1:
		for i := range currencies {
			if c := currencies[(int(h>>8%uint64(len(currencies)))+i)%len(currencies)]; c != r.Currency {
				r.Currency = c
				break
			}
		}
		return r, "currency"
	default:
		if r.Status == "succeeded" {
			r.Status = "refunded"
		} else {
			r.Status = "succeeded"
		}
		return r, "status"
	}
}

// Truth returns the correct final outcome of id under the current
// configuration (see ClearFaults).
func (s *Server) Truth(id string) Expected {
	rec, known := s.records[id]
	s.mu.Lock()
	cleared := s.faultsCleared
	s.mu.Unlock()
	if !known {
		return Expected{Outcome: ledger.Missing, Fault: FaultMissing}
	}
	f := s.fault(id)
	if cleared {
		f = FaultNone
	}
	e := Expected{Fault: f, Provider: rec, Outcome: ledger.Matched}
	switch f {
	case FaultMismatch:
		var field string
		e.Provider, field = s.mismatch(rec)
		e.Outcome, e.Fields = ledger.Mismatched, []string{field}
	case FaultMissing:
		e = Expected{Outcome: ledger.Missing, Fault: f}
	case FaultBadRequest:
		e = Expected{Outcome: ledger.DeadLettered, Fault: f, Reason: "http_400"}
	case FaultBadBody:
		e = Expected{Outcome: ledger.DeadLettered, Fault: f, Reason: "max_attempts"}
	}
	return e
}

// Records returns the dataset's transaction ids, sorted.
func (s *Server) Records() []string {
	ids := make([]string, 0, len(s.records))
	for id := range s.records {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
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
		Throttled:    s.throttled,
		ByStatus:     make(map[int]int64, len(s.byStatus)),
		DistinctKeys: len(s.callsPerKey),
		CallsPerKey:  make(map[string]int, len(s.callsPerKey)),
		Limit:        s.schedule.String(),
		Burst:        int(s.burst),
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

func (s *Server) limitAtLocked(t time.Time) float64 {
	return s.schedule.RateAt(t.Sub(s.scheduleStart))
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

const lookupPrefix = "/v1/transactions/"

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	switch {
	case path == "/_sim/stats":
		s.serveStats(w, r)
	case path == "/_sim/config":
		s.serveConfig(w, r)
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
	a, latency := s.decide(w.Header(), r, id, now)
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
// answer and the latency.
func (s *Server) decide(h http.Header, r *http.Request, id string, now time.Time) (answer, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	sec := s.secondLocked(now)
	sec.Calls++
	a := s.answerLocked(h, r, id, now)
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

func (s *Server) answerLocked(h http.Header, r *http.Request, id string, now time.Time) answer {
	if s.token != "" {
		auth := r.Header.Get("Authorization")
		given, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok || given == "" {
			h.Set("WWW-Authenticate", `Bearer realm="provider-sim"`)
			return answer{status: http.StatusUnauthorized, body: errorBody("unauthorized", "a bearer token is required")}
		}
		if subtle.ConstantTimeCompare([]byte(given), []byte(s.token.Reveal())) != 1 {
			return answer{status: http.StatusForbidden, body: errorBody("forbidden", "the token is not valid")}
		}
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" {
		return answer{status: http.StatusBadRequest, body: errorBody("idempotency_key_required", "the Idempotency-Key header is required")}
	}
	s.callsPerKey[key]++

	ok, wait, rate := s.takeLocked(now)
	if rate > 0 && s.cfg.RateLimitHeaders {
		s.rateLimitHeadersLocked(h, rate)
	}
	if !ok {
		secs := max(1, int64(math.Ceil(wait.Seconds())))
		if s.cfg.RetryAfterDate {
			h.Set("Retry-After", now.Add(time.Duration(secs)*time.Second).UTC().Format(http.TimeFormat))
		} else {
			h.Set("Retry-After", strconv.FormatInt(secs, 10))
		}
		return answer{status: http.StatusTooManyRequests, body: errorBody("rate_limited", "too many requests")}
	}

	s.callsPerID[id]++
	if s.transientRate > 0 && s.rng.Float64() < s.transientRate {
		return answer{status: http.StatusServiceUnavailable, body: errorBody("unavailable", "try again")}
	}
	rec, known := s.records[id]
	if !known {
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

func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
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

func (st Stats) limitView() map[string]any {
	return map[string]any{"limit": st.Limit, "burst": st.Burst}
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
		sched, burst := s.schedule, int(s.burst)
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
