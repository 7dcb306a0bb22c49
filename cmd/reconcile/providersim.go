package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

func cmdProviderSim(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "provider-sim", "[--addr HOST:PORT] [--source FILE|-] [--limit SCHEDULE] [fault flags]",
		`Run a simulated payment provider for trials: GET /v1/transactions/{id} answers from
the payments in --source, with chosen shares of faults (picked per transaction id from
--seed), its own rate limit (a schedule: RATE@OFFSET,... counted from start-up; 0 or
"none" for unlimited) counted as a token bucket, a leaky bucket, a sliding log or fixed
windows and answered with 429 and Retry-After (whole seconds, exact or absent), and
latency.

GET /_sim/stats returns its counters as JSON; POST /_sim/config with
{"limit":"10@0s","burst":5,"clear_faults":true,"transient_rate":0,"token":"..."}
changes it while it runs. Bind it to a loopback address: those endpoints are open.

The bearer token required is --token, else RECONCILE_PROVIDER_TOKEN, else none.
--profile stripe|paypal|square speaks that provider's API instead (the paths, bodies,
status words and error bodies the built-in profile of that name reads), with each row
of --source at its kind's endpoint (refunds and disputes apart from payments, by the
file's kind column or the profile's id prefixes) and, for stripe, a row whose account_id
is a connected account (acct_...) only to requests with that Stripe-Account; paypal also
serves POST /v1/oauth2/token for the client credentials --client-id and --client-secret
(default RECONCILE_PROVIDER_CLIENT_ID and RECONCILE_PROVIDER_CLIENT_SECRET).
Runs until interrupted.`,
		"reconcile provider-sim --addr 127.0.0.1:8080 --source payments.csv --limit 20@0s,10@30s,30@60s --burst 10 --mismatch 0.02 --missing 0.01")
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (port 0 picks a free port)")
	source := fs.String("source", "", "payment file (CSV or JSON Lines, - for standard input); without it every id is missing")
	limit := fs.String("limit", "none", "rate limit schedule RATE@OFFSET,... (calls per second; 0 or none: unlimited)")
	algorithm := fs.String("algorithm", "token-bucket", "how calls count against --limit: token-bucket, leaky-bucket, sliding-log or fixed-window")
	burst := fs.Int("burst", 0, "capacity of a token or leaky bucket (0: the schedule's highest rate)")
	window := fs.Duration("window", 0, "window of a sliding-log or fixed-window limit, which allows the rate × window calls per window")
	retryAfter := fs.String("retry-after", "seconds", "how a 429 says when to call again: seconds (whole, rounded up), exact (Retry-After-Ms too) or absent")
	retryAfterMin := fs.Duration("retry-after-min", time.Second, "shortest Retry-After in whole seconds")
	seed := fs.Uint64("seed", 1, "seed choosing the faulty transactions and the random parts")
	mismatch := fs.Float64("mismatch", 0, "share of transactions answered with one field changed")
	missing := fs.Float64("missing", 0, "share of transactions answered 404")
	badRequest := fs.Float64("bad-request", 0, "share of transactions answered 400 on every call")
	badBody := fs.Float64("bad-body", 0, "share of transactions answered 200 with an unreadable body on every call")
	transient := fs.Float64("transient", 0, "share of transactions answered 503 on their first --transient-calls calls")
	transientCalls := fs.Int("transient-calls", 2, "failing calls of a --transient transaction before it succeeds")
	transientRate := fs.Float64("transient-rate", 0, "probability that any call fails with 503")
	latency := fs.Duration("latency", 0, "fixed latency of every answer")
	latencyJitter := fs.Duration("latency-jitter", 0, "random latency added, uniform in [0, this)")
	retryAfterDate := fs.Bool("retry-after-date", false, "send Retry-After as an HTTP-date instead of seconds")
	rateLimitHeaders := fs.Bool("ratelimit-headers", false, "send the IETF RateLimit-Policy and RateLimit fields")
	token := fs.String("token", "", "bearer token to require (default RECONCILE_PROVIDER_TOKEN; empty: none)")
	shapeName := fs.String("profile", "reconcile", "API to speak: reconcile, stripe, paypal or square")
	clientID := fs.String("client-id", "", "OAuth2 client id of --profile paypal (default RECONCILE_PROVIDER_CLIENT_ID)")
	clientSecret := fs.String("client-secret", "", "OAuth2 client secret of --profile paypal (default RECONCILE_PROVIDER_CLIENT_SECRET)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := e.logger()
	if err != nil {
		return err
	}
	sched, err := providersim.ParseSchedule(*limit)
	if err != nil {
		return usageErrorf("--limit: %v", err)
	}
	alg, err := providersim.ParseAlgorithm(*algorithm)
	if err != nil {
		return usageErrorf("--algorithm: %v", err)
	}
	raStyle, err := providersim.ParseRetryAfterStyle(*retryAfter)
	if err != nil {
		return usageErrorf("--retry-after: %v", err)
	}
	tok := *token
	if tok == "" {
		tok = e.getenv("RECONCILE_PROVIDER_TOKEN")
	}
	cfg := providersim.Config{
		Seed: *seed,
		Shares: providersim.Shares{Mismatch: *mismatch, Missing: *missing, BadRequest: *badRequest,
			BadBody: *badBody, Transient: *transient},
		TransientCalls:   *transientCalls,
		TransientRate:    *transientRate,
		Limit:            sched,
		Algorithm:        alg,
		Burst:            *burst,
		Window:           *window,
		RetryAfter:       raStyle,
		RetryAfterMin:    *retryAfterMin,
		RetryAfterDate:   *retryAfterDate,
		RateLimitHeaders: *rateLimitHeaders,
		Latency:          providersim.Latency{Fixed: *latency, Jitter: *latencyJitter},
		Token:            provider.Secret(tok),
		Logger:           logger,
	}
	shape, err := providersim.ParseShape(*shapeName)
	if err != nil {
		return usageErrorf("--profile: %v", err)
	}
	if *source != "" {
		if err := loadSimRecords(e, *source, shape, &cfg); err != nil {
			return err
		}
	}
	sim, err := providersim.New(cfg)
	if err != nil {
		return usageError(err)
	}
	h, err := providersim.Shaped(sim, shape, providersim.ShapeConfig{
		ClientID:     provider.Secret(cmp.Or(*clientID, e.getenv("RECONCILE_PROVIDER_CLIENT_ID"))),
		ClientSecret: provider.Secret(cmp.Or(*clientSecret, e.getenv("RECONCILE_PROVIDER_CLIENT_SECRET")))})
	if err != nil && shape == providersim.ShapePayPal {
		return usageErrorf("--profile: %v (set --client-id and --client-secret)", err)
	}
	if err != nil {
		return usageErrorf("--profile: %v", err)
	}
	err = providersim.ServeHandler(ctx, h, *addr, func(a net.Addr) {
		logger.Info("provider simulator listening", "url", "http://"+a.String(), "profile", shape.String(), "records", len(sim.Records()),
			"limit", sched.String(), "algorithm", alg.String(), "burst", sim.Stats().Burst, "window", *window, "retry_after", raStyle.String(), "seed", *seed, "token_required", tok != "")
	})
	if err != nil {
		return err
	}
	st := sim.Stats()
	logger.Info("provider simulator stopped", "calls", st.Calls, "throttled", st.Throttled, "distinct_keys", st.DistinctKeys)
	return nil
}

// loadSimRecords reads the simulator's dataset from a payment file into
// cfg: the records, the kind of each row (the file's kind, else the shape's
// profile's id prefixes) and, for rows whose account_id is one the shape's
// profile sends as the provider's account (a Stripe acct_ id), that
// account. Any problem with the file is bad input.
func loadSimRecords(e *env, name string, shape providersim.Shape, cfg *providersim.Config) error {
	var src io.Reader = e.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return usageErrorf("open payments %s: %v", name, err)
		}
		defer f.Close()
		src = f
	}
	r, err := payments.NewReader(src, name, payments.Options{AllowOutsideDate: true})
	if err != nil {
		return err
	}
	prof, _ := profile.Builtin(shape.String())
	cfg.Records, cfg.Kinds, cfg.Accounts = []provider.Record{}, map[string]string{}, map[string]string{}
	for {
		p, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read payments %s: %w", name, err)
		}
		cfg.Records = append(cfg.Records, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
		if kind := prof.KindOf(p.TransactionID, p.Kind); kind != payments.KindPayment {
			cfg.Kinds[p.TransactionID] = kind
		}
		if account, _ := prof.Account.Resolve(p.AccountID); account != "" {
			cfg.Accounts[p.TransactionID] = account
		}
	}
	if problems := r.Problems(); !problems.Empty() {
		return usageError(problems)
	}
	return nil
}
