// Package providersim is a simulated payment provider for tests, benchmarks
// and trials: an [http.Handler] serving GET /v1/transactions/{id} from a
// dataset, with faults chosen deterministically per transaction id, a rate
// limit of its own that can change on a schedule (counted as a token
// bucket, a leaky bucket, a sliding log or fixed windows: [Meter], which
// simulations also drive directly; 429s with Retry-After in whole seconds,
// exact or absent), latency, and counters.
//
// Every transaction's correct final outcome is known ([Server.Truth]), so a
// run against the simulator can be checked item by item.
//
// Endpoints:
//
//	GET  /v1/transactions/{id}  the provider contract (bearer token, Idempotency-Key)
//	GET  /v1/transactions?from=&to=&cursor=&limit=  the list of a time window, by pages
//	GET  /_sim/stats            counters as JSON (?keys=1 adds calls per idempotency key)
//	POST /_sim/config           change the limit, the transient rate, the token, or clear faults
//
// The /_sim endpoints need no token: bind the simulator to a loopback address.
package providersim

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/provider"
)

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
	// Kinds gives the kind of the records that are not payments
	// (payments.KindRefund, payments.KindDispute), by transaction id: a
	// provider-shaped handler serves each record only at its kind's
	// endpoint, a refund's money as the positive amount the provider
	// writes. Defaults to payments only.
	Kinds map[string]string
	// Accounts gives the connected account (Stripe Connect) a record
	// belongs to, by transaction id: the Stripe shape serves it only to a
	// request whose Stripe-Account header names that account, and a
	// record without one only to requests without the header, as Stripe
	// keeps each account's objects apart. Defaults to none.
	Accounts map[string]string
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
	// Algorithm is how calls are counted against Limit (see limit.go).
	// Defaults to TokenBucket.
	Algorithm Algorithm
	// Burst is the capacity of a TokenBucket or LeakyBucket. Defaults to
	// the schedule's highest rate, rounded up (at least 1).
	Burst int
	// Window is the window of a SlidingLog or FixedWindow, which allow the
	// schedule's rate times Window calls per window; required by them,
	// refused by the buckets.
	Window time.Duration
	// RetryAfter is how a 429 says when to call again. Defaults to
	// RetryAfterSeconds.
	RetryAfter RetryAfterStyle
	// RetryAfterMin is the shortest Retry-After of RetryAfterSeconds,
	// rounded up to whole seconds: a provider that always asks for 2 s
	// sets 2s. Defaults to 1s.
	RetryAfterMin time.Duration
	// RetryAfterDate sends Retry-After as an HTTP-date instead of seconds.
	// Defaults to false.
	RetryAfterDate bool
	// RateLimitHeaders adds the IETF RateLimit-Policy and RateLimit fields
	// (draft-ietf-httpapi-ratelimit-headers-11) to every limited answer:
	// the quota per window, the quota left and the seconds until it is
	// whole again (see Meter.Quota). Defaults to false.
	RateLimitHeaders bool
	// Latency delays every answer to a transaction lookup. The wait ends
	// early when the request's context does. Defaults to none.
	Latency Latency
	// List configures the list of transactions (GET /v1/transactions).
	List ListConfig
	// Token, when set, is the bearer token required on lookups: 401 without
	// one, 403 for a wrong one. Defaults to no authentication.
	Token provider.Secret
	// Now is the clock of the limiter and the per-second series. Defaults to
	// time.Now.
	Now func() time.Time
	// Logger receives configuration changes. Defaults to discarding them.
	Logger *slog.Logger
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
	meter         *Meter
	callsPerID    map[string]int
	callsPerKey   map[string]int
	byStatus      map[int]int64
	calls         int64
	throttled     int64
	series        map[int64]*Second
	// The list: its order (by time, then id), pages answered 200 by
	// window and cursor, list calls, and the faults between pages served.
	listOrder   []string
	listed      listedWindow
	pagesServed map[string]int
	listCalls   int64
	listFaults  int
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
	if cfg.TransientCalls < 0 || cfg.Burst < 0 || cfg.Window < 0 || cfg.Latency.Fixed < 0 || cfg.Latency.Jitter < 0 || cfg.RetryAfterMin < 0 {
		return nil, fmt.Errorf("simulator config: TransientCalls, Burst, Window, RetryAfterMin and Latency must not be negative")
	}
	if cfg.RetryAfter < RetryAfterSeconds || cfg.RetryAfter > RetryAfterAbsent {
		return nil, fmt.Errorf("simulator config: RetryAfter %d: unknown", cfg.RetryAfter)
	}
	cfg.TransientCalls = cmp.Or(cfg.TransientCalls, 2)
	cfg.RetryAfterMin = cmp.Or(cfg.RetryAfterMin, time.Second)
	meter, err := NewMeter(cfg.Algorithm, cfg.Limit, cfg.Burst, cfg.Window)
	if err != nil {
		return nil, fmt.Errorf("simulator config: %w", err)
	}
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
		meter:         meter,
		callsPerID:    make(map[string]int),
		callsPerKey:   make(map[string]int),
		byStatus:      make(map[int]int64),
		series:        make(map[int64]*Second),
		pagesServed:   make(map[string]int),
	}
	for id, kind := range cfg.Kinds {
		if !payments.IsKind(kind) {
			return nil, fmt.Errorf("simulator dataset: transaction %q: kind %q: want one of %v", id, kind, payments.Kinds())
		}
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
	s.schedule, s.scheduleStart = slices.Clone(cfg.Limit), s.start
	return s, nil
}

// kindOf returns the kind of record id: payments.KindPayment unless
// Config.Kinds says otherwise.
func (s *Server) kindOf(id string) string {
	if k := s.cfg.Kinds[id]; k != "" {
		return k
	}
	return payments.KindPayment
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
