package main

import (
	"context"
	"flag"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/notify"
	"github.com/reconcile/reconcile/internal/provider"
)

// notifyFlags are the flags of the morning message, on `consume` and
// `schedule`.
type notifyFlags struct {
	urls       stringList
	format     string
	consoleURL string
	deadline   time.Duration
	timeout    time.Duration
}

func (f *notifyFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.urls, "notify", "POST an event to this webhook when a run completes (each completion round) or misses --deadline; repeatable (default $RECONCILE_NOTIFY_URL, URLs separated by spaces); signed with $RECONCILE_NOTIFY_SECRET")
	fs.StringVar(&f.format, "notify-format", notify.Standard, "body of the --notify events: standard (Standard Webhooks JSON) or slack (text and blocks)")
	fs.StringVar(&f.consoleURL, "console-url", "", "the console's base URL (https://reconcile.example.com): events link the run's page")
	fs.DurationVar(&f.timeout, "notify-timeout", notify.DefaultTimeout, "how long one POST to a webhook may take; a crashed attempt is retried this long and 5s after it started")
	fs.DurationVar(&f.deadline, "deadline", 0, "a run should be complete this long after its enqueue (e.g. 6h): it is given that deadline, shown in metrics and status, and announced once when missed; 0: none")
}

// notifierConfig turns the flags and the environment into a Notifier's
// configuration; ok is false when there is nothing to announce or keep.
// The secret and the URLs' paths never appear in an error.
func (f *notifyFlags) notifierConfig(e *env) (cfg notify.Config, ok bool, err error) {
	raw := []string(f.urls)
	if len(raw) == 0 {
		raw = strings.Fields(e.getenv("RECONCILE_NOTIFY_URL"))
	}
	for _, u := range raw {
		w, err := notify.ParseWebhook(u, f.format)
		if err != nil {
			return cfg, false, usageErrorf("--notify: %v", err)
		}
		cfg.Webhooks = append(cfg.Webhooks, w)
	}
	if f.format != notify.Standard && f.format != notify.Slack {
		return cfg, false, usageErrorf("--notify-format %q: want standard or slack", f.format)
	}
	if f.consoleURL != "" {
		if u, err := url.Parse(f.consoleURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, false, usageErrorf("--console-url %s: want an absolute http or https URL", notify.Redact(f.consoleURL))
		}
	}
	if f.timeout <= 0 {
		return cfg, false, usageErrorf("--notify-timeout %s: want a positive duration", f.timeout)
	}
	if f.deadline < 0 {
		return cfg, false, usageErrorf("--deadline %s: want a positive duration", f.deadline)
	}
	if s := e.getenv("RECONCILE_NOTIFY_SECRET"); s != "" {
		key, err := notify.ParseSecret(s)
		if err != nil {
			return cfg, false, usageErrorf("RECONCILE_NOTIFY_SECRET: %v", err)
		}
		cfg.Secret = key
	}
	cfg.ConsoleURL, cfg.Deadline, cfg.Timeout = f.consoleURL, f.deadline, f.timeout
	return cfg, len(cfg.Webhooks) > 0 || cfg.Deadline > 0, nil
}

// notifyPoolSize is the notifier's own pool: it never takes a connection
// the consumer needs, and waits for a webhook holding none.
const notifyPoolSize = 2

// startNotifier runs a Notifier beside a consumer or a scheduler until
// stop is called; stop drains what is due first when drain is true (a
// consumer leaving with --until-done). It starts nothing when the flags
// ask for nothing. Call f.notifierConfig first to refuse bad flags before
// anything else starts.
func startNotifier(ctx context.Context, e *env, logger *slog.Logger, f notifyFlags) (stop func(drain bool), err error) {
	cfg, ok, err := f.notifierConfig(e)
	if err != nil || !ok {
		return func(bool) {}, err
	}
	pool, err := dbconn.Open(ctx, dbconn.Config{URL: e.getenv("DATABASE_URL"), MaxConns: notifyPoolSize,
		ApplicationName: "reconcile-notify", Logger: logger})
	if err != nil {
		return nil, err
	}
	cfg.Pool, cfg.Logger = pool, logger.With("component", "notify")
	n, err := notify.New(cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	targets := make([]string, len(cfg.Webhooks))
	for i, w := range cfg.Webhooks {
		targets[i] = w.Target()
	}
	logger.Info("announcing runs", "webhooks", targets, "format", f.format, "signed", cfg.Secret != provider.Secret(""),
		"deadline", cfg.Deadline)
	if len(cfg.Webhooks) > 0 && cfg.Secret == "" && f.format == notify.Standard {
		logger.Warn("RECONCILE_NOTIFY_SECRET is not set: the events are not signed, and a receiver cannot tell them from forgeries")
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = n.Run(runCtx) })
	return func(drain bool) {
		cancel()
		wg.Wait()
		if drain && len(cfg.Webhooks) > 0 {
			// The last completions' announcements leave before the process
			// does, within a webhook timeout and its margin.
			if err := n.Drain(context.WithoutCancel(ctx), 2*cfg.Timeout); err != nil {
				logger.Warn("announcements not all delivered before exit; the next process with the webhook delivers them", "err", err)
			}
		}
		pool.Close()
	}, nil
}
