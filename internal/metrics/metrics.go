// Package metrics exposes reconcile's state as Prometheus metrics: provider
// calls, throttles, the limiter's configured and effective rate, the queue,
// the ledger's items by state and run completion times.
//
// A Collector reads everything at scrape time: the consumer's and the
// limiter's in-process snapshots, and a few cheap queries (bounded by
// Config.Timeout) for the queue and the ledger. Nothing is registered
// globally: NewRegistry returns a registry of its own.
//
// Metric names (all prefixed reconcile_):
//
//	provider_calls_total{class}              counter  calls by answer: 1xx..5xx, error (no answer)
//	provider_throttles_total                 counter  calls answered 429
//	consumer_decisions_total{decision}       counter  acked, retried, dead_lettered
//	consumer_outcomes_total{outcome}         counter  terminal outcomes recorded by this process
//	limiter_configured_rate{limiter}         gauge    calls/s ceiling (reconcile limit set)
//	limiter_effective_rate{limiter}          gauge    adaptive calls/s in force
//	limiter_burst{limiter}                   gauge    configured burst
//	limiter_penalty_seconds{limiter}         gauge    time left in the current 429 penalty
//	limiter_throttles_total{limiter}         counter  throttles reported by every process
//	limiter_estimated_rate{limiter}          gauge    provider's rate as measured between 429s (0: unknown)
//	limiter_estimated_burst{limiter}         gauge    provider's burst as measured at start-up (0: unknown)
//	limiter_accepted_total{limiter}          counter  calls the provider accepted, reported by every process
//	provider_circuit_open{provider}          gauge    1 while the provider's circuit is open (calls stopped), else 0
//	queue_messages{state}                    gauge    available, in_flight, delayed, dead_lettered
//	queue_oldest_message_age_seconds         gauge    age of the oldest available message
//	items{reconciliation_id,state}           gauge    items of open and recent runs by state
//	run_duration_seconds{reconciliation_id}  gauge    completed_at - created_at of recent runs
//	run_completed_timestamp_seconds{reconciliation_id} gauge  when a recent run completed
//	run_open{reconciliation_id}              gauge    1 while the run has open items, else 0 (open and recent runs)
//	run_enqueued_timestamp_seconds{reconciliation_id} gauge  when the run was enqueued
//	run_deadline_timestamp_seconds{reconciliation_id} gauge  the run's deadline (runs with one; see --deadline)
//	consumers                                gauge    consumers whose heartbeat is at most 30 s old
//	consumer_heartbeat_age_seconds           gauge    age of the latest heartbeat of any consumer (+Inf: never)
//	dead_letters{reason}                     gauge    dead-lettered queue messages by reason
//	notification_deliveries{state}           gauge    webhook deliveries: pending, delivered, failed
//	notification_oldest_pending_age_seconds  gauge    age of the oldest pending webhook delivery (0: none)
//	metrics_read_errors_total{source}        counter  failed reads at scrape time (queue, ledger)
package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/httpserve"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/queue"
)

// Config configures a Collector. Every source is optional; the series of a
// missing one are left out.
type Config struct {
	// Consumer returns the consumer's counters. Defaults to none.
	Consumer func() consume.Snapshot
	// Limiter returns the shared limiter's state. Defaults to none.
	Limiter func() limiter.Snapshot
	// MoreLimiters return the states of the other providers' limiters,
	// for a consumer of several providers. Defaults to none.
	MoreLimiters []func() limiter.Snapshot
	// Circuits returns the state of each provider's circuit. Defaults to
	// none.
	Circuits func() []consume.CircuitState
	// Queue is read for message counts at scrape time. Defaults to none.
	Queue *queue.Queue
	// DB is read at scrape time for items by state, run times and
	// deadlines, consumers' heartbeats and webhook deliveries. Defaults to
	// none.
	DB ledger.Querier
	// Timeout bounds the database reads of one scrape. Defaults to 5s.
	Timeout time.Duration
	// Recent is how long a completed run keeps being reported (items by
	// state, duration, completion time). Defaults to 48h.
	Recent time.Duration
	// Now is the clock (penalty left, the recent-runs window). Defaults to
	// time.Now.
	Now func() time.Time
	// Logger receives scrape errors. Defaults to discarding them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, 5*time.Second)
	c.Recent = cmp.Or(c.Recent, 48*time.Hour)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

const ns = "reconcile"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
}

// Collector is a prometheus.Collector reading reconcile's state at scrape
// time. It is safe for concurrent use.
type Collector struct {
	cfg Config

	calls, throttles, decisions, outcomes                     *prometheus.Desc
	limRate, limEffective, limBurst, limPenalty, limThrottles *prometheus.Desc
	limEstimate, limEstimatedBurst, limAccepted               *prometheus.Desc
	queueMessages, queueOldest                                *prometheus.Desc
	items, runDuration, runCompleted, readErrors              *prometheus.Desc
	circuitOpen                                               *prometheus.Desc
	ops                                                       opsDescs
	queueErrors, ledgerErrors                                 atomic.Int64
}

// NewCollector returns a Collector for cfg.
func NewCollector(cfg Config) *Collector {
	return &Collector{
		cfg:          cfg.withDefaults(),
		calls:        desc("provider_calls_total", "Provider calls made by this process, by answer class (1xx..5xx, error for no answer).", "class"),
		throttles:    desc("provider_throttles_total", "Provider calls made by this process that were answered 429."),
		decisions:    desc("consumer_decisions_total", "Decisions recorded by this process: acked, retried, dead_lettered.", "decision"),
		outcomes:     desc("consumer_outcomes_total", "Terminal item outcomes recorded by this process.", "outcome"),
		limRate:      desc("limiter_configured_rate", "Configured provider rate limit (ceiling), calls per second.", "limiter"),
		limEffective: desc("limiter_effective_rate", "Adaptive provider rate in force, calls per second.", "limiter"),
		limBurst:     desc("limiter_burst", "Configured burst of the provider rate limit.", "limiter"),
		limPenalty:   desc("limiter_penalty_seconds", "Time left in the current throttle penalty, seconds (0: none).", "limiter"),
		limThrottles: desc("limiter_throttles_total", "Throttles reported to the shared limiter by every process.", "limiter"),
		limEstimate: desc("limiter_estimated_rate",
			"Provider's rate as the limit discovery measured it between two throttles, calls per second (0: unknown).", "limiter"),
		limEstimatedBurst: desc("limiter_estimated_burst",
			"Provider's burst as the limit discovery measured it at start-up, calls (0: unknown).", "limiter"),
		limAccepted:   desc("limiter_accepted_total", "Calls the provider accepted, reported to the shared limiter by every process.", "limiter"),
		queueMessages: desc("queue_messages", "Queue messages by state: available, in_flight, delayed, dead_lettered.", "state"),
		queueOldest:   desc("queue_oldest_message_age_seconds", "Age of the oldest available queue message since it was first published, seconds (0: none available)."),
		items:         desc("items", "Ledger items of open and recently completed runs, by state.", "reconciliation_id", "state"),
		runDuration:   desc("run_duration_seconds", "Time from enqueue to completion of a recently completed run, seconds.", "reconciliation_id"),
		runCompleted:  desc("run_completed_timestamp_seconds", "When a recently completed run completed, Unix seconds.", "reconciliation_id"),
		circuitOpen:   desc("provider_circuit_open", "1 while the provider's circuit is open: calls stopped but for a probe at a backed-off interval; else 0.", "provider"),
		readErrors:    desc("metrics_read_errors_total", "Reads that failed while collecting metrics, by source (queue, ledger).", "source"),
		ops:           newOpsDescs(),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.calls, c.throttles, c.decisions, c.outcomes, c.limRate, c.limEffective,
		c.limBurst, c.limPenalty, c.limThrottles, c.limEstimate, c.limEstimatedBurst, c.limAccepted, c.queueMessages, c.queueOldest,
		c.items, c.runDuration, c.runCompleted, c.readErrors, c.circuitOpen} {
		ch <- d
	}
	c.ops.describe(ch)
}

// Collect implements prometheus.Collector: it reads the snapshots and runs
// the database reads, each bounded by Config.Timeout.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.cfg.Consumer != nil {
		c.collectConsumer(ch, c.cfg.Consumer())
	}
	if c.cfg.Limiter != nil {
		c.collectLimiter(ch, c.cfg.Limiter())
	}
	for _, l := range c.cfg.MoreLimiters {
		c.collectLimiter(ch, l())
	}
	if c.cfg.Circuits != nil {
		for _, st := range c.cfg.Circuits() {
			open := 0.0
			if st.Open {
				open = 1
			}
			ch <- prometheus.MustNewConstMetric(c.circuitOpen, prometheus.GaugeValue, open, cmp.Or(st.Provider, "default"))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	if c.cfg.Queue != nil {
		if err := errors.Join(c.collectQueue(ctx, ch), c.collectDeadLetters(ctx, ch)); err != nil {
			c.queueErrors.Add(1)
			c.cfg.Logger.Warn("metrics: queue not read", "err", err)
			ch <- prometheus.NewInvalidMetric(c.queueMessages, err)
		}
		ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(c.queueErrors.Load()), "queue")
	}
	if c.cfg.DB != nil {
		if err := errors.Join(c.collectLedger(ctx, ch), c.collectOperations(ctx, ch)); err != nil {
			c.ledgerErrors.Add(1)
			c.cfg.Logger.Warn("metrics: ledger not read", "err", err)
			ch <- prometheus.NewInvalidMetric(c.items, err)
		}
		ch <- prometheus.MustNewConstMetric(c.readErrors, prometheus.CounterValue, float64(c.ledgerErrors.Load()), "ledger")
	}
}

func (c *Collector) collectConsumer(ch chan<- prometheus.Metric, s consume.Snapshot) {
	for _, class := range []string{"error", "1xx", "2xx", "3xx", "4xx", "5xx"} {
		ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(s.ByClass[class]), class)
	}
	ch <- prometheus.MustNewConstMetric(c.throttles, prometheus.CounterValue, float64(s.Throttles))
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(s.Acked), "acked")
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(s.Retried), "retried")
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(s.DeadLettered), "dead_lettered")
	for _, o := range ledger.TerminalStates() {
		ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(s.Outcomes[string(o)]), string(o))
	}
}

func (c *Collector) collectLimiter(ch chan<- prometheus.Metric, s limiter.Snapshot) {
	penalty := max(0, s.PenaltyUntil.Sub(c.cfg.Now()).Seconds())
	if s.PenaltyUntil.IsZero() {
		penalty = 0
	}
	ch <- prometheus.MustNewConstMetric(c.limRate, prometheus.GaugeValue, s.Rate, s.Name)
	ch <- prometheus.MustNewConstMetric(c.limEffective, prometheus.GaugeValue, s.EffectiveRate, s.Name)
	ch <- prometheus.MustNewConstMetric(c.limBurst, prometheus.GaugeValue, float64(s.Burst), s.Name)
	ch <- prometheus.MustNewConstMetric(c.limPenalty, prometheus.GaugeValue, penalty, s.Name)
	ch <- prometheus.MustNewConstMetric(c.limThrottles, prometheus.CounterValue, float64(s.Throttles), s.Name)
	ch <- prometheus.MustNewConstMetric(c.limEstimate, prometheus.GaugeValue, s.Estimate, s.Name)
	ch <- prometheus.MustNewConstMetric(c.limEstimatedBurst, prometheus.GaugeValue, s.ProviderBurst, s.Name)
	ch <- prometheus.MustNewConstMetric(c.limAccepted, prometheus.CounterValue, float64(s.Accepted), s.Name)
}

func (c *Collector) collectQueue(ctx context.Context, ch chan<- prometheus.Metric) error {
	st, err := c.cfg.Queue.Stats(ctx)
	if err != nil {
		return err
	}
	for state, v := range map[string]int64{"available": st.Available, "in_flight": st.InFlight,
		"delayed": st.Delayed, "dead_lettered": st.DeadLettered} {
		ch <- prometheus.MustNewConstMetric(c.queueMessages, prometheus.GaugeValue, float64(v), state)
	}
	ch <- prometheus.MustNewConstMetric(c.queueOldest, prometheus.GaugeValue, st.OldestAvailableAge.Seconds())
	return nil
}

// collectLedger reads the items by state of open and recent runs, and the
// completion times of recent runs: their summaries, from their counters.
func (c *Collector) collectLedger(ctx context.Context, ch chan<- prometheus.Metric) error {
	runs, err := ledger.Summaries(ctx, c.cfg.DB, ledger.RunFilter{CompletedSince: c.cfg.Now().Add(-c.cfg.Recent)})
	if err != nil {
		return fmt.Errorf("count items by state: %w", err)
	}
	for _, r := range runs {
		byState := map[ledger.State]int64{ledger.Queued: r.Queued, ledger.RetryScheduled: r.RetryScheduled,
			ledger.Matched: r.Matched, ledger.Mismatched: r.Mismatched, ledger.Missing: r.Missing,
			ledger.DeadLettered: r.DeadLettered, ledger.Cancelled: r.Cancelled}
		for _, s := range ledger.States() {
			ch <- prometheus.MustNewConstMetric(c.items, prometheus.GaugeValue, float64(byState[s]), r.ReconciliationID, string(s))
		}
		if r.CompletedAt != nil {
			ch <- prometheus.MustNewConstMetric(c.runDuration, prometheus.GaugeValue, r.CompletedAt.Sub(r.CreatedAt).Seconds(), r.ReconciliationID)
			ch <- prometheus.MustNewConstMetric(c.runCompleted, prometheus.GaugeValue, float64(r.CompletedAt.UnixMicro())/1e6, r.ReconciliationID)
		}
	}
	return nil
}

// NewRegistry returns a registry of its own holding a Collector for cfg and
// the Go runtime and process collectors.
func NewRegistry(cfg Config) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(cfg), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg in the Prometheus exposition formats. A failed read
// leaves its series out (and counts in metrics_read_errors_total) instead
// of failing the whole scrape.
func Handler(reg *prometheus.Registry, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		ErrorLog:            slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		MaxRequestsInFlight: 4,
		Timeout:             30 * time.Second,
	})
}

// Serve serves /metrics for cfg on addr (host:port; port 0 picks a free
// one) until ctx ends. ready, when not nil, is called with the listening
// address once connections are accepted.
func Serve(ctx context.Context, addr string, cfg Config, ready func(net.Addr)) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", Handler(NewRegistry(cfg), cfg.Logger))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("reconcile metrics: /metrics\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := httpserve.Serve(ctx, srv, ln, ready); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
