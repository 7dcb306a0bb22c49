// Package consume is the worker loop of reconcile: it claims queue messages,
// paces provider calls with the shared limiter, decides what each answer
// means, and records the outcome, the transition and the message's fate in
// one transaction.
//
// A Consumer plays three roles, each in its own file: one claimer goroutine
// per provider claims batches of that provider's messages sized to the free
// worker slots (claim.go), so the number of leased but unstarted messages
// stays small, and idle claimers sleep on the queue's LISTEN/NOTIFY
// listener; workers take each message to its outcome (work.go), judging the
// provider's answer (judge.go); one recorder writes the outcomes in batches
// (record.go). One value, the outcome (outcome.go), carries a message from
// the worker to the recorder and the counters. Run starts the three and
// shuts them down in a stated order (run.go). Each provider's circuit and
// its warnings are in lane.go, the row `status` reads in circuitrow.go, the
// counters in stats.go, the heartbeat in heartbeat.go.
//
// Every time the package reads comes from Config.Now.
package consume

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/circuit"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/logthrottle"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// ErrProviderAuth is returned when the provider refuses the credentials (401
// or 403). Consuming stops and every message stays queued: a bad key must not
// dead-letter a whole run.
var ErrProviderAuth = errors.New("provider refused the credentials")

// The defaults of Config's zero fields.
const (
	// DefaultConcurrency is Config.Concurrency's default.
	DefaultConcurrency = 4
	// DefaultGrace is Config.Grace's default.
	DefaultGrace = 10 * time.Second
	// DefaultIdleWait is Config.IdleWait's default.
	DefaultIdleWait = 2 * time.Second
	// DefaultRecordBatch is Config.RecordBatch's default.
	DefaultRecordBatch = 64
	// DefaultLeaseRenewalsPerVisibility is how many times per visibility
	// timeout a running call's lease is renewed when Config.LeaseRenewal is
	// zero: the default renewal interval is the queue's visibility timeout
	// divided by it, so two renewals may fail before the lease runs out.
	DefaultLeaseRenewalsPerVisibility = 3
)

// Config configures a Consumer.
type Config struct {
	// Concurrency is the number of workers calling the provider at once.
	// Defaults to DefaultConcurrency (4).
	Concurrency int
	// Policy decides retries, backoff and dead letters. Zero fields take
	// decision's defaults.
	Policy decision.Policy
	// UntilDone makes Run return once every run in the ledger is complete.
	// Defaults to false: consume until the context ends.
	UntilDone bool
	// Grace is how long in-flight calls may take to finish once claiming
	// stops (the context ended, every run is complete, or the provider
	// refused the credentials); what is left is handed back to the queue.
	// Defaults to DefaultGrace (10s).
	Grace time.Duration
	// IdleWait is the longest an idle claimer sleeps before looking at the
	// queue again when no notification arrives. Defaults to
	// DefaultIdleWait (2s).
	IdleWait time.Duration
	// Actor names this process in transitions and completions. Defaults to
	// host:pid.
	Actor string
	// Logger receives progress and problems. Defaults to discarding them.
	Logger *slog.Logger
	// Now is the clock used for retry times and decisions. Defaults to
	// time.Now.
	Now func() time.Time
	// Seed seeds the jitter. Defaults to a random seed.
	Seed uint64
	// RecordBatch is the most results recorded in one transaction. Workers
	// hand their results to one recorder, which writes whatever has
	// gathered while the previous transaction committed, so a busy consumer
	// pays one commit (one WAL flush) per batch instead of per item, and
	// acks the batch's messages in one statement. 1 records each result in
	// its own transaction. Defaults to DefaultRecordBatch (64).
	RecordBatch int
	// Circuit configures each provider's circuit breaker: how many
	// failures across distinct items open it and how probes back off. Zero
	// fields take circuit's defaults (5 unreachable items, 10 items with a
	// 5xx, probes from 1s doubling to 30s), and NotFoundRun the provider
	// profile's stop_after_not_found (20 unless the profile says).
	Circuit circuit.Config
	// WarnEvery is the least time between two warnings about an open
	// circuit (the first comes at once). Defaults to
	// logthrottle.DefaultInterval (30s).
	WarnEvery time.Duration
	// LeaseRenewal is how often the lease of a message whose call is still
	// running is extended, so a slow call is not redelivered elsewhere. It
	// must be shorter than the queue's visibility timeout. Defaults to the
	// visibility timeout divided by DefaultLeaseRenewalsPerVisibility (a
	// third of it); negative turns renewal off (then a call slower than the
	// visibility timeout is redelivered, which tests use to provoke
	// duplicate deliveries).
	LeaseRenewal time.Duration
	// Mode is how items are checked: looked up one by one, or from the
	// provider's list of each run's date first. Defaults to ModeLookup.
	Mode Mode
	// ListMargin widens a listed run's business date on both sides.
	// Defaults to listing.DefaultMargin (1h).
	ListMargin time.Duration
}

// withDefaults returns c with its zero fields set to their defaults, for a
// queue whose visibility timeout is visibility.
func (c Config) withDefaults(visibility time.Duration) Config {
	c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
	c.Policy = c.Policy.WithDefaults()
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.IdleWait = cmp.Or(c.IdleWait, DefaultIdleWait)
	c.RecordBatch = cmp.Or(c.RecordBatch, DefaultRecordBatch)
	c.LeaseRenewal = cmp.Or(c.LeaseRenewal, visibility/DefaultLeaseRenewalsPerVisibility)
	c.Circuit = c.Circuit.WithDefaults()
	c.WarnEvery = cmp.Or(c.WarnEvery, logthrottle.DefaultInterval)
	if c.Actor == "" {
		host, _ := os.Hostname()
		c.Actor = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// validate checks c, with its defaults applied, for a queue whose
// visibility timeout is visibility.
func (c Config) validate(visibility time.Duration) error {
	if err := c.Policy.Validate(); err != nil {
		return err
	}
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("consume: Concurrency %d: want at least 1", c.Concurrency)
	case c.RecordBatch < 1:
		return fmt.Errorf("consume: RecordBatch %d: want at least 1", c.RecordBatch)
	case c.IdleWait < 0:
		return fmt.Errorf("consume: IdleWait %v: want more than 0", c.IdleWait)
	case c.LeaseRenewal >= visibility:
		return fmt.Errorf("consume: LeaseRenewal %v: want shorter than the queue's visibility timeout %v (or negative: no renewal)",
			c.LeaseRenewal, visibility)
	}
	return nil
}

// Consumer processes queue messages until its context ends, the ledger's runs
// are all complete (UntilDone), or the provider refuses the credentials.
type Consumer struct {
	pool  *pgxpool.Pool
	queue *queue.Queue
	lanes []*lane // one per provider; the first is the default one
	cfg   Config
	stats Stats
	// dbWarn logs the database failures of claiming, recording and
	// releasing: one line per kind at once, then one every 30 s with a
	// count, and the recovery once.
	dbWarn *logthrottle.Logger

	rndMu sync.Mutex
	rnd   *rand.Rand

	// after times the stages of a shutdown: time.After, but in tests.
	after func(time.Duration) <-chan time.Time
	// signals tell tests where Run is; their channels are nil otherwise.
	signals runSignals
}

// New returns a Consumer of one provider. The queue, limiter and client are
// shared with the caller, who closes them. cfg's zero fields take their
// defaults; New fails on a config that does not fit the queue's visibility
// timeout.
func New(pool *pgxpool.Pool, q *queue.Queue, lim *limiter.Shared, client *provider.Client, cfg Config) (*Consumer, error) {
	return NewWithProviders(pool, q, []Provider{{Client: client, Limiter: lim}}, cfg)
}

// NewWithProviders returns a Consumer of several providers: each item goes
// to the provider it names, the first provider takes the items that name
// none, and each provider's messages are claimed, paced and cut off by its
// circuit on their own, so a paused, slow or unreachable provider holds up
// only its own items. Workers are shared: Concurrency calls at most are in
// flight, whatever their providers, and a worker waiting for a provider's
// token holds no call slot. Names must be distinct; with one provider the
// name may be empty.
func NewWithProviders(pool *pgxpool.Pool, q *queue.Queue, providers []Provider, cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults(q.Visibility())
	if err := cfg.validate(q.Visibility()); err != nil {
		return nil, err
	}
	if len(providers) == 0 {
		return nil, errors.New("consume: no provider")
	}
	c := &Consumer{pool: pool, queue: q, cfg: cfg, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1)),
		dbWarn: logthrottle.New(cfg.Logger, logthrottle.Config{Interval: cfg.WarnEvery}), after: time.After}
	seen := map[string]bool{}
	for i, p := range providers {
		switch {
		case seen[p.Name]:
			return nil, fmt.Errorf("consume: provider %q given twice", p.Name)
		case p.Name == "" && len(providers) > 1:
			return nil, errors.New("consume: every provider needs a name when there are several")
		}
		seen[p.Name] = true
		cc := cfg.Circuit
		if cc.NotFoundRun == 0 && p.Client != nil {
			cc.NotFoundRun = p.Client.Profile().StopAfterNotFound
		}
		b, err := circuit.New(cc)
		if err != nil {
			return nil, fmt.Errorf("consume: %w", err)
		}
		l := &lane{Provider: p, breaker: b, warnEvery: cfg.WarnEvery, logger: cfg.Logger, claim: []string{p.Name}}
		if i == 0 && p.Name != "" {
			l.claim = append(l.claim, "")
		}
		if p.Name != "" {
			l.logger = cfg.Logger.With("provider", p.Name)
		}
		if l.lister, err = c.newLister(p); err != nil {
			return nil, err
		}
		l.settled, l.listsRun = map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
		c.lanes = append(c.lanes, l)
	}
	return c, nil
}

// backoffDB is the wait before retrying a database operation: 100ms doubling
// to 2s. The cap bounds how long after a database comes back (a restart, a
// promoted standby) the consumer resumes; a retry every 2 s costs an
// unreachable database nothing.
func backoffDB(failures int) time.Duration {
	return min(100*time.Millisecond<<min(failures-1, 5), 2*time.Second)
}
