package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// providerLimiterPrefix starts the name of each providers-file provider's
// limiter row: provider:stripe, provider:paypal. The single provider of a
// consumer without a providers file keeps limiter.DefaultName.
const providerLimiterPrefix = "provider:"

// providerLimiter names the shared limiter row of a providers-file
// provider.
func providerLimiter(name string) string { return providerLimiterPrefix + name }

// loadProvidersFile reads the providers file named by the flag, else by
// RECONCILE_PROVIDERS; nil when neither names one. A bad file, or an
// environment variable it names that is not set, is bad input: the error
// names the file, the line, the key and the variable, never a value.
func loadProvidersFile(e *env, flagValue string) (*profile.Providers, error) {
	file := flagValue
	if file == "" {
		file = e.getenv("RECONCILE_PROVIDERS")
	}
	if file == "" {
		return nil, nil
	}
	p, err := profile.LoadProviders(file)
	if err != nil {
		return nil, usageError(err)
	}
	return p, nil
}

// checkProviderEnv reports the first environment variable a providers file
// names that is not set.
func checkProviderEnv(e *env, p *profile.Providers) error {
	for _, entry := range p.List {
		for _, name := range entry.Profile.Auth.Env() {
			if e.getenv(name) == "" {
				return usageErrorf("%s:%d: %s: environment variable %s is not set", p.File, entry.Line, entry.EnvKeys[name], name)
			}
		}
	}
	return nil
}

// openProviders builds a consumer's providers from a providers file: each
// provider's client with its credentials from the variables it names, and
// its shared limiter, seeded with the file's rate and burst when its row
// does not exist yet. The default provider comes first. close closes the
// limiters opened.
func openProviders(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, p *profile.Providers, f consumeFlags) (_ []consume.Provider, closeAll func(), err error) {
	var opened []*limiter.Shared
	closeAll = func() {
		for _, l := range opened {
			_ = l.Close()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	order := slices.Clone(p.List)
	slices.SortStableFunc(order, func(a, b profile.ProviderEntry) int {
		switch {
		case a.Name == p.Default:
			return -1
		case b.Name == p.Default:
			return 1
		}
		return 0
	})
	var out []consume.Provider
	for _, entry := range order {
		pcfg := providerConfig(e, entry.Profile, entry.URL, f.timeout, f.insecure)
		pcfg.BaseURL = entry.URL // never RECONCILE_PROVIDER_URL: the file says
		client, err := provider.New(pcfg)
		if err != nil {
			return nil, nil, usageErrorf("%s:%d: providers.%s: %v", p.File, entry.Line, entry.Name, err)
		}
		name := providerLimiter(entry.Name)
		if entry.Rate > 0 {
			st, err := limiter.LoadState(ctx, pool, name)
			if err != nil {
				return nil, nil, err
			}
			burst := entry.Burst
			if burst == 0 {
				burst = max(1, int(entry.Rate+0.999))
			}
			if !st.Stored {
				if err := limiter.SaveSettings(ctx, pool, name, limiter.Settings{Rate: entry.Rate, Burst: burst},
					limiter.SetBy{Actor: actorName(), Reason: "seeded from the providers file"}); err != nil {
					return nil, nil, err
				}
			} else if st.Rate != entry.Rate || st.Burst != burst {
				logger.Info("provider limit kept as stored; the providers file only seeds a new one (change it with limit set --provider)",
					"provider", entry.Name, "rate", st.Rate, "burst", st.Burst, "file_rate", entry.Rate, "file_burst", burst)
			}
		}
		lim, err := limiter.Open(ctx, pool, limiter.Config{Name: name, Logger: logger})
		if err != nil {
			return nil, nil, err
		}
		opened = append(opened, lim)
		out = append(out, consume.Provider{Name: entry.Name, Client: client, Limiter: lim})
	}
	return out, closeAll, nil
}

// checkQueuedProviders refuses to consume when queued items name providers
// the consumer does not call (with a providers file: those not in it;
// without: any name at all), naming each with its count.
func checkQueuedProviders(ctx context.Context, q *queue.Queue, p *profile.Providers) error {
	counts, err := q.ReadyByProvider(ctx)
	if err != nil {
		return err
	}
	var unknown []string
	for name, n := range counts {
		if name == "" {
			continue
		}
		if p != nil {
			if _, ok := p.Lookup(name); ok {
				continue
			}
		}
		unknown = append(unknown, fmt.Sprintf("%s (%d items)", name, n))
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	if p == nil {
		return usageErrorf("consume: queued items name providers and no providers file was given (--providers or RECONCILE_PROVIDERS): %s; nothing claimed",
			strings.Join(unknown, ", "))
	}
	return usageErrorf("consume: queued items name providers that are not in %s: %s; add them to the file (nothing claimed)",
		p.File, strings.Join(unknown, ", "))
}
