package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/listing"
	"github.com/reconcile/reconcile/internal/metrics"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/progress"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/report"
)

// consumeFlags are the flags of `reconcile consume`, shared with
// `reconcile schedule --consume` and `reconcile demo`.
type consumeFlags struct {
	untilDone        bool
	concurrency      int
	mode             string
	listMargin       time.Duration
	rate             float64
	burst            int
	save             bool
	maxAttempts      int
	backoffBase      time.Duration
	backoffCap       time.Duration
	jitter           string
	throttleDeadline time.Duration
	visibility       time.Duration
	maxDeliveries    int
	grace            time.Duration
	providerURL      string
	profile          string
	timeout          time.Duration
	insecure         bool
	metricsAddr      string
	progress         string
	listenURL        string
	providersFile    string
	// limiterName selects the shared limiter's row (not a flag: `demo`
	// uses its own so it never touches the real provider's setting).
	// Empty means limiter.DefaultName.
	limiterName string
}

func (f *consumeFlags) register(fs *flag.FlagSet) {
	def := decision.Policy{}.WithDefaults()
	fs.BoolVar(&f.untilDone, "until-done", false, "exit 0 once every run is complete, printing a summary")
	fs.IntVar(&f.concurrency, "concurrency", consume.DefaultConcurrency, "workers calling the provider at once")
	fs.StringVar(&f.mode, "mode", "lookup", "lookup: one call per item; list: page through the provider's list of each run's date first, look up only what it lacks, report what the file lacks as unexpected; auto: list where the profile can")
	fs.DurationVar(&f.listMargin, "list-margin", listing.DefaultMargin, "list mode: widen the business date's window by this much on both sides")
	fs.Float64Var(&f.rate, "rate", 0, "shared provider rate limit (calls/s) when none is stored yet; a stored one is kept (a warning says so) unless --save")
	fs.IntVar(&f.burst, "burst", 0, "shared burst with --rate; 0: the rate, rounded up")
	fs.BoolVar(&f.save, "save", false, "with --rate: store it as the shared limit of every consumer, as reconcile limit set does")
	fs.IntVar(&f.maxAttempts, "max-attempts", def.MaxAttempts, "attempts for transient failures before an item is dead-lettered")
	fs.DurationVar(&f.backoffBase, "backoff-base", def.BackoffBase, "first retry delay; doubles per attempt")
	fs.DurationVar(&f.backoffCap, "backoff-cap", def.BackoffCap, "longest retry delay")
	fs.StringVar(&f.jitter, "jitter", def.Jitter.String(), "retry jitter: full or equal")
	fs.DurationVar(&f.throttleDeadline, "throttle-deadline", def.ThrottleDeadline, "dead-letter an item still throttled (429) this long after its first attempt")
	fs.DurationVar(&f.visibility, "visibility", queue.DefaultVisibility, "how long a claimed message stays invisible to other consumers")
	fs.IntVar(&f.maxDeliveries, "max-deliveries", queue.DefaultMaxDeliveries, "claims without a result before a message is dead-lettered as poison")
	fs.DurationVar(&f.grace, "grace", consume.DefaultGrace, "on SIGTERM/SIGINT, how long in-flight calls may take to finish")
	fs.StringVar(&f.providerURL, "provider-url", "", "provider base URL (default $RECONCILE_PROVIDER_URL, else the profile's)")
	fs.StringVar(&f.profile, "profile", "", "provider profile: reconcile, stripe, paypal, square or a profile file (default $RECONCILE_PROVIDER_PROFILE, else reconcile)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "overall timeout of one provider call")
	fs.BoolVar(&f.insecure, "insecure-skip-verify", false, "DANGEROUS: do not verify the provider's TLS certificate")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics (e.g. :9090); empty: off")
	fs.StringVar(&f.providersFile, "providers", "", "providers file: several providers, each with its profile, URL, credentials' variables and limit (default $RECONCILE_PROVIDERS; see docs/providers.md)")
	fs.StringVar(&f.progress, "progress", "auto", "progress: bar, log (a line every 10s), off, or auto (bar when stderr is a terminal, else log)")
	fs.StringVar(&f.listenURL, "listen-url", "", "direct database connection for LISTEN, when DATABASE_URL goes through a transaction pooler (default $RECONCILE_LISTEN_URL; without it idle consumers poll)")
}

// poolSize is the number of database connections a consumer needs: one per
// worker recording a result, plus the claimer, the queue listener, the
// limiter's lease and a spare for status queries.
func (f *consumeFlags) poolSize() int32 { return int32(f.concurrency + 4) }

// poolSizeFor is poolSize with a claimer and a queue listener more for each
// provider after the first.
func (f *consumeFlags) poolSizeFor(providers int) int32 {
	return f.poolSize() + 2*int32(max(providers-1, 0))
}

func (f *consumeFlags) policy() (decision.Policy, error) {
	jitter, err := decision.ParseJitter(f.jitter)
	if err != nil {
		return decision.Policy{}, usageErrorf("--jitter: %v", err)
	}
	p := decision.Policy{MaxAttempts: f.maxAttempts, BackoffBase: f.backoffBase, BackoffCap: f.backoffCap,
		Jitter: jitter, ThrottleDeadline: f.throttleDeadline}
	if err := p.Validate(); err != nil {
		return p, usageError(err)
	}
	return p, nil
}

func (f *consumeFlags) validate() error {
	switch {
	case f.concurrency < 1:
		return usageErrorf("--concurrency %d: want at least 1", f.concurrency)
	case f.rate < 0:
		return usageErrorf("--rate %g: want a positive rate", f.rate)
	case f.burst < 0:
		return usageErrorf("--burst %d: want at least 1", f.burst)
	case f.burst > 0 && f.rate == 0:
		return usageErrorf("--burst needs --rate")
	case f.save && f.rate == 0:
		return usageErrorf("--save needs --rate")
	case f.visibility < time.Second:
		return usageErrorf("--visibility %s: want at least 1s", f.visibility)
	case f.maxDeliveries < 1:
		return usageErrorf("--max-deliveries %d: want at least 1", f.maxDeliveries)
	case f.timeout <= 0:
		return usageErrorf("--timeout %s: want a positive duration", f.timeout)
	case f.listMargin < 0 || f.listMargin > 24*time.Hour:
		return usageErrorf("--list-margin %s: want 0 to 24h", f.listMargin)
	case f.progress != "auto" && f.progress != "bar" && f.progress != "log" && f.progress != "off":
		return usageErrorf("--progress %q: want auto, bar, log or off", f.progress)
	}
	if _, err := consume.ParseMode(f.mode); err != nil {
		return usageErrorf("--mode: %v", err)
	}
	_, err := f.policy()
	return err
}

// consumeConfig is the consumer's configuration from the flags.
func (f *consumeFlags) consumeConfig(policy decision.Policy, logger *slog.Logger) consume.Config {
	mode, _ := consume.ParseMode(f.mode) // validated
	return consume.Config{Concurrency: f.concurrency, Policy: policy, UntilDone: f.untilDone, Grace: f.grace,
		Logger: logger, Mode: mode, ListMargin: f.listMargin}
}

func cmdConsume(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "consume", "[flags]",
		"Claim queued messages, call the provider at the shared rate limit, and record every outcome.\n"+
			"Run as many consumers as you like, on any machines: the limiter is shared through Postgres.\n"+
			"SIGINT/SIGTERM stop claiming, let in-flight calls finish (--grace) and hand back the rest.",
		"RECONCILE_PROVIDER_URL=https://psp.example/api reconcile consume --until-done --concurrency 8\n"+
			"  reconcile consume --deadline 6h --notify https://hooks.slack.com/services/... --notify-format slack --console-url https://reconcile.example.com")
	var f consumeFlags
	f.register(fs)
	var nf notifyFlags
	nf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := f.validate(); err != nil {
		return err
	}
	if _, _, err := nf.notifierConfig(e); err != nil {
		return err
	}
	logger, err := e.logger()
	if err != nil {
		return err
	}
	n := 1
	if p, err := loadProvidersFile(e, f.providersFile); err != nil {
		return err
	} else if p != nil {
		n = len(p.List)
	}
	pool, err := e.connectN(ctx, logger, f.poolSizeFor(n))
	if err != nil {
		return err
	}
	defer pool.Close()
	stopNotifier, err := startNotifier(ctx, e, logger, nf)
	if err != nil {
		return err
	}
	err = runConsume(ctx, e, pool, logger, f, nil)
	stopNotifier(err == nil && f.untilDone)
	return err
}

// applyRate stores --rate and --burst as the shared limit when the limiter
// has none stored yet, or with --save. Otherwise the stored limit stands:
// one consumer's flag must not silently change the limit of every other
// process; a differing --rate is reported.
func applyRate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, f consumeFlags) error {
	if f.rate <= 0 {
		return nil
	}
	name := cmp.Or(f.limiterName, limiter.DefaultName)
	want := limiter.Settings{Rate: f.rate, Burst: f.burst}
	if want.Burst == 0 {
		want.Burst = max(1, int(f.rate+0.999))
	}
	st, err := limiter.LoadState(ctx, pool, name)
	if err != nil {
		return err
	}
	if st.Stored && !f.save {
		if st.Settings != want {
			logger.Warn("--rate and --burst ignored: the shared limit stays as stored; add --save to change it for every consumer, or use `reconcile limit set`",
				"stored_rate", st.Rate, "stored_burst", st.Burst, "rate", want.Rate, "burst", want.Burst)
		}
		return nil
	}
	by := limiter.SetBy{Actor: actorName(), Reason: "consume --rate"}
	if f.save {
		by.Reason = "consume --rate --save"
	}
	if err := limiter.SaveSettings(ctx, pool, name, want, by); err != nil {
		return usageError(err)
	}
	return nil
}

// runConsume wires the consumer's parts and runs it. started, when not nil,
// receives the consumer once it runs (for progress reporting).
func runConsume(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, f consumeFlags, started func(*consume.Consumer)) error {
	policy, err := f.policy()
	if err != nil {
		return err
	}
	providers, err := loadProvidersFile(e, f.providersFile)
	if err != nil {
		return err
	}
	if providers != nil {
		return runConsumeProviders(ctx, e, pool, logger, f, policy, providers, started)
	}
	prof, err := loadProfile(e, f.profile)
	if err != nil {
		return err
	}
	pcfg := providerConfig(e, prof, f.providerURL, f.timeout, f.insecure)
	if pcfg.BaseURL == "" && prof.BaseURL == "" {
		return usageErrorf("consume: no provider: set RECONCILE_PROVIDER_URL or --provider-url")
	}
	if f.insecure {
		logger.Warn("TLS certificate verification of the provider is OFF (--insecure-skip-verify): anyone on the network path can impersonate it")
	}
	client, err := provider.New(pcfg)
	if err != nil {
		return usageError(fmt.Errorf("consume: provider: %w", err))
	}
	if err := applyRate(ctx, pool, logger, f); err != nil {
		return err
	}
	lim, err := limiter.Open(ctx, pool, limiter.Config{Name: f.limiterName, Logger: logger})
	if err != nil {
		return err
	}
	defer lim.Close()
	q := queue.New(pool, queue.Config{Visibility: f.visibility, MaxDeliveries: f.maxDeliveries, Logger: logger,
		ListenURL: cmp.Or(f.listenURL, e.getenv("RECONCILE_LISTEN_URL"))})
	if err := checkQueuedProviders(ctx, q, nil); err != nil {
		return err
	}
	c, err := consume.New(pool, q, lim, client, f.consumeConfig(policy, logger))
	if err != nil {
		return err
	}
	logger.Info("consuming", "provider", client.BaseURL(), "profile", prof.Name, "concurrency", f.concurrency, "until_done", f.untilDone)
	return runConsumer(ctx, e, pool, logger, f, c, []*limiter.Shared{lim}, q, started)
}

// runConsumeProviders is runConsume with a providers file: bad input (an
// unset variable, queued items of providers not in the file) stops it
// before anything is claimed.
func runConsumeProviders(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, f consumeFlags,
	policy decision.Policy, p *profile.Providers, started func(*consume.Consumer)) error {
	if f.providerURL != "" || f.profile != "" || f.rate > 0 {
		return usageErrorf("consume: --providers gives each provider's URL, profile and rate; drop --provider-url, --profile and --rate (or use limit set --provider)")
	}
	if err := checkProviderEnv(e, p); err != nil {
		return err
	}
	if f.insecure {
		logger.Warn("TLS certificate verification of the providers is OFF (--insecure-skip-verify): anyone on the network path can impersonate them")
	}
	q := queue.New(pool, queue.Config{Visibility: f.visibility, MaxDeliveries: f.maxDeliveries, Logger: logger,
		ListenURL: cmp.Or(f.listenURL, e.getenv("RECONCILE_LISTEN_URL"))})
	if err := checkQueuedProviders(ctx, q, p); err != nil {
		return err
	}
	providers, closeAll, err := openProviders(ctx, e, pool, logger, p, f)
	if err != nil {
		return err
	}
	defer closeAll()
	c, err := consume.NewWithProviders(pool, q, providers, f.consumeConfig(policy, logger))
	if err != nil {
		return err
	}
	lims := make([]*limiter.Shared, len(providers))
	for i, pr := range providers {
		lims[i] = pr.Limiter
		logger.Info("provider", "provider", pr.Name, "url", pr.Client.BaseURL(), "profile", pr.Client.Profile().Name,
			"limiter", providerLimiter(pr.Name), "default", pr.Name == p.Default)
	}
	logger.Info("consuming", "providers", p.File, "concurrency", f.concurrency, "until_done", f.untilDone)
	return runConsumer(ctx, e, pool, logger, f, c, lims, q, started)
}

// runConsumer runs a built consumer with its progress and metrics, and
// prints the completions with --until-done.
func runConsumer(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, f consumeFlags,
	c *consume.Consumer, lims []*limiter.Shared, q *queue.Queue, started func(*consume.Consumer)) error {
	if started != nil {
		started(c)
	}
	stopWatching, err := watchConsumer(ctx, e, pool, logger, f, c, lims, q)
	if err != nil {
		return err
	}
	start := time.Now()
	err = c.Run(ctx)
	stopWatching()
	s := c.Snapshot()
	logger.Info("consumer stopped", "calls", s.Calls, "throttles", s.Throttles, "acked", s.Acked,
		"retried", s.Retried, "dead_lettered", s.DeadLettered, "elapsed", time.Since(start).Round(time.Millisecond))
	if errors.Is(err, consume.ErrProviderAuth) {
		return err
	}
	if err != nil {
		return err
	}
	if f.untilDone {
		return printCompletions(ctx, e.stdout, pool, start)
	}
	return nil
}

// watchConsumer starts what watches a running consumer: the progress bar or
// log lines, and the metrics server with --metrics-addr. stop ends both
// (the progress reporter after one last report).
func watchConsumer(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, f consumeFlags,
	c *consume.Consumer, lims []*limiter.Shared, q *queue.Queue) (stop func(), err error) {
	watchCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() { cancel(); wg.Wait() }
	if f.metricsAddr != "" {
		ready, errc := make(chan net.Addr, 1), make(chan error, 1)
		cfg := metrics.Config{Consumer: c.Snapshot, Limiter: lims[0].Snapshot, Queue: q, DB: pool, Logger: logger,
			Circuits: c.Circuits}
		for _, l := range lims[1:] {
			cfg.MoreLimiters = append(cfg.MoreLimiters, l.Snapshot)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := metrics.Serve(watchCtx, f.metricsAddr, cfg, func(a net.Addr) { ready <- a }); err != nil {
				errc <- err
			}
		}()
		select {
		case a := <-ready:
			logger.Info("serving metrics", "url", "http://"+a.String()+"/metrics")
		case err := <-errc:
			stop()
			return nil, usageErrorf("--metrics-addr: %v", err)
		}
	}
	mode := f.progress
	if mode == "auto" {
		mode = "log"
		if isTerminal(e.stderr) {
			mode = "bar"
		}
	}
	if mode != "off" {
		since := time.Now().Add(-time.Second)
		r, err := progress.New(progress.Config{
			Poll: func(ctx context.Context) (progress.Counts, error) {
				p, err := ledger.RunProgress(ctx, pool, since)
				return progress.Counts{Done: p.Done, Total: p.Items, Throttles: c.Snapshot().Throttles}, err
			},
			Bar: mode == "bar", Out: e.stderr, Logger: logger,
		})
		if err != nil {
			stop()
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.Run(watchCtx)
		}()
	}
	return stop, nil
}

// printCompletions prints one line per run this consumer saw complete
// (completed at or after since) with its latest completion's totals, and
// for those whose items name providers, a line per provider.
func printCompletions(ctx context.Context, w io.Writer, pool *pgxpool.Pool, since time.Time) error {
	cs, err := ledger.Completions(ctx, pool, since)
	if err != nil {
		return err
	}
	for _, c := range cs {
		ls, err := listing.ProgressOf(ctx, pool, c.RunID)
		if err != nil {
			return err
		}
		calls := c.ProviderCalls
		for _, l := range ls {
			calls += int64(l.Calls)
		}
		fmt.Fprintln(w, completionLine(c, calls))
		for _, l := range ls {
			fmt.Fprintf(w, "  listed %s: %s, %s pages, %s records, %s page calls%s\n", cmp.Or(l.Provider, "the provider"), l.State,
				count(l.Pages), count(l.Records), count(l.Calls), reasonSuffix(l.Reason))
		}
		totals, err := ledger.ProviderTotals(ctx, pool, c.RunID)
		if err != nil {
			return err
		}
		if len(totals) == 1 && totals[0].Provider == "" {
			continue
		}
		for _, p := range totals {
			fmt.Fprintf(w, "  provider %s: %s items: %s matched, %s mismatched, %s missing, %s dead-lettered%s; %s provider calls, %s throttled\n",
				cmp.Or(p.Provider, "(default)"), count(p.Items), count(p.Matched), count(p.Mismatched), count(p.Missing),
				count(p.DeadLettered), report.UnexpectedCount(p.Unexpected), human.Count(p.ProviderCalls), human.Count(p.Throttles))
		}
	}
	return nil
}

// reasonSuffix is ": reason" for a non-empty reason.
func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

// completionLine says how a run ended: complete (the round after a
// redrive), or cancelled with who and why, with its totals; calls is every
// provider call the run took, the list pages of a listed run included.
func completionLine(c ledger.Completion, calls int64) string {
	how := "complete"
	switch {
	case c.CancelledBy != "":
		how = fmt.Sprintf("cancelled by %s (%s)", c.CancelledBy, c.CancelReason)
	case c.Round > 1:
		how = fmt.Sprintf("complete again (round %d, after a redrive)", c.Round)
	}
	outcomes := fmt.Sprintf("%s matched, %s mismatched, %s missing, %s dead-lettered", count(c.Matched), count(c.Mismatched),
		count(c.Missing), count(c.DeadLettered))
	if c.Cancelled > 0 {
		outcomes += ", " + count(c.Cancelled) + " cancelled"
	}
	outcomes += report.UnexpectedCount(c.Unexpected)
	return fmt.Sprintf("%s %s: %s items: %s; %s provider calls (%s per item), %s throttled; %s after enqueue",
		c.ReconciliationID, how, count(c.Items), outcomes, human.Count(calls),
		human.Number(float64(calls)/float64(max(c.Items, 1))), human.Count(c.Throttles), human.Duration(c.Took))
}

// count writes an item count for people.
func count(n int) string { return human.Count(int64(n)) }
