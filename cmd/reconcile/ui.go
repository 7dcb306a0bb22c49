package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/console"
	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/httpserve"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/metrics"
	"github.com/reconcile/reconcile/internal/queue"
)

// uiFlags are the flags of `reconcile ui`.
type uiFlags struct {
	addr             string
	users            string
	operators        string
	authHeader       string
	trustedProxies   string
	insecureLocal    bool
	limiter          string
	statementTimeout time.Duration
	maxExports       int
	metricsAddr      string
}

func cmdUI(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "ui", "--addr ADDR (--users FILE | --auth-header H --trusted-proxies CIDRS | --insecure-local) [--operators a,b]",
		`Serve the web console: runs, a run's progress and limit chart, discrepancies, dead letters,
a transaction's verified history and audit bundles; operators may also redrive, re-run and set
limits. Users log in with an htpasswd file of bcrypt entries (htpasswd -B), or a reverse proxy
passes them in a header from trusted addresses. The users named by --operators may act; every
other user is an auditor. Without authentication the console starts only on a loopback address
with --insecure-local, and then everyone is an operator.`,
		"reconcile ui --addr :8080 --users /etc/reconcile/htpasswd --operators alice,bob")
	var f uiFlags
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&f.users, "users", "", "htpasswd file of bcrypt entries (name:$2y$...)")
	fs.StringVar(&f.operators, "operators", "", "comma-separated users who may act (the others are auditors)")
	fs.StringVar(&f.authHeader, "auth-header", "", "request header with the user name set by a trusted reverse proxy, e.g. X-Forwarded-User")
	fs.StringVar(&f.trustedProxies, "trusted-proxies", "", "comma-separated CIDRs the --auth-header is accepted from; with --users, the proxies whose X-Forwarded-For names the client for the login limits")
	fs.BoolVar(&f.insecureLocal, "insecure-local", false, "no authentication (loopback --addr only): everyone is an operator")
	fs.StringVar(&f.limiter, "limiter", limiter.DefaultName, "limiter whose limits a run's chart shows")
	fs.DurationVar(&f.statementTimeout, "statement-timeout", 2*time.Second, "timeout of each statement of a page")
	fs.IntVar(&f.maxExports, "max-exports", 2, "exports, verifications and audit bundles at once (one per user), each on a database connection of its own")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve the database's metrics (runs, deadlines, queue, consumers' heartbeats, webhook deliveries) at http://ADDR/metrics; empty: off")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	auth, err := f.auth()
	if err != nil {
		return err
	}
	if f.maxExports < 1 {
		return usageErrorf("ui: --max-exports %d: want at least 1", f.maxExports)
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg := console.Config{Auth: auth, Limiter: f.limiter, StatementTimeout: f.statementTimeout, MaxExports: f.maxExports}
	if f.metricsAddr == "" {
		return serveConsole(ctx, e, logger, pool, f.addr, cfg)
	}
	return serveWithMetrics(ctx, logger, f.metricsAddr, metrics.Config{Queue: queue.New(pool, queue.Config{}), DB: pool, Logger: logger},
		func(ctx context.Context) error { return serveConsole(ctx, e, logger, pool, f.addr, cfg) })
}

// serveWithMetrics serves the metrics of cfg on addr while serve runs, and
// stops both when either ends: a console whose metrics cannot be served
// (the address is taken) does not start.
func serveWithMetrics(ctx context.Context, logger *slog.Logger, addr string, cfg metrics.Config, serve func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready, errc := make(chan net.Addr, 1), make(chan error, 1)
	go func() { errc <- metrics.Serve(ctx, addr, cfg, func(a net.Addr) { ready <- a }) }()
	select {
	case a := <-ready:
		logger.Info("serving metrics", "url", "http://"+a.String()+"/metrics")
	case err := <-errc:
		return usageErrorf("--metrics-addr: %v", err)
	}
	err := serve(ctx)
	cancel()
	if merr := <-errc; err == nil {
		err = merr
	}
	return err
}

// auth turns the flags into the console's authentication, refusing a
// console without any unless it listens on a loopback address.
func (f uiFlags) auth() (console.Auth, error) {
	var a console.Auth
	for _, o := range strings.Split(f.operators, ",") {
		if o = strings.TrimSpace(o); o != "" {
			a.Operators = append(a.Operators, o)
		}
	}
	modes := 0
	if f.users != "" {
		modes++
		file, err := os.Open(f.users)
		if err != nil {
			return a, usageErrorf("ui: --users: %v", err)
		}
		defer file.Close()
		if a.Users, err = console.ParseHtpasswd(file, f.users); err != nil {
			return a, usageErrorf("ui: --users: %v", err)
		}
	}
	if f.authHeader != "" {
		modes++
		a.Header = f.authHeader
		if f.trustedProxies == "" {
			return a, usageErrorf("ui: --auth-header needs --trusted-proxies (the proxies' CIDRs)")
		}
	}
	if f.trustedProxies != "" {
		if f.authHeader == "" && f.users == "" {
			return a, usageErrorf("ui: --trusted-proxies goes with --auth-header or --users")
		}
		for _, c := range strings.Split(f.trustedProxies, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(c))
			if err != nil {
				return a, usageErrorf("ui: --trusted-proxies %q: want CIDRs such as 10.0.0.0/8", c)
			}
			a.TrustedProxies = append(a.TrustedProxies, p)
		}
	}
	if f.insecureLocal {
		modes++
		a.Local = true
	}
	switch {
	case modes > 1:
		return a, usageErrorf("ui: give one of --users, --auth-header or --insecure-local")
	case modes == 0:
		return a, usageErrorf("ui: no authentication: give --users FILE or --auth-header with --trusted-proxies (or, on a loopback --addr, --insecure-local)")
	case a.Local && !console.LoopbackAddr(f.addr):
		return a, usageErrorf("ui: --insecure-local needs a loopback --addr such as 127.0.0.1:8080, not %q", f.addr)
	}
	return a, nil
}

// serveConsole serves the console on addr until ctx ends, printing its URL
// once it listens.
func serveConsole(ctx context.Context, e *env, logger *slog.Logger, pool *pgxpool.Pool, addr string, cfg console.Config) error {
	cfg.Pool, cfg.Logger = pool, logger
	h, err := console.New(cfg)
	if err != nil {
		return err
	}
	defer h.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return usageErrorf("ui: --addr %s: %v", addr, err)
	}
	return httpserve.Serve(ctx, h.NewServer(logger), ln, func(a net.Addr) {
		fmt.Fprintf(e.stdout, "console: http://%s/\n", a)
		logger.Info("console listening", "addr", a.String())
	})
}

// serveDemoConsole serves the console of a kept demo database on a free
// loopback port, without logins, until interrupted.
func serveDemoConsole(ctx context.Context, e *env, logger *slog.Logger, url, limiterName string) error {
	pool, err := dbconn.Open(ctx, dbconn.Config{URL: url, Logger: logger})
	if err != nil {
		return err
	}
	defer pool.Close()
	fmt.Fprintln(e.stdout, "\nThe console shows the demo's run; stop it with Ctrl-C (the database stays).")
	return serveConsole(ctx, e, logger, pool, "127.0.0.1:0", console.Config{Auth: console.Auth{Local: true}, Limiter: limiterName})
}
