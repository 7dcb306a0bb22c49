package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/queue"
)

func cmdEnqueue(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "enqueue", "--date YYYY-MM-DD [--source FILE|-] [flags]",
		"Turn one day's payments into a reconciliation run: a run, one ledger item and one queue message per\n"+
			"payment, in one transaction. Enqueuing a date that has a run already from the same input is a\n"+
			"no-op that reports it; from another input (its SHA-256 differs) it is refused: use --rerun all\n"+
			"or `reconcile cancel`. --rerun all withdraws the unfinished items of the generation it replaces.\n"+
			"Bad input is reported with file:line and nothing is written (exit 2).",
		"reconcile enqueue --date 2026-10-24 --source payments-2026-10-24.csv\n"+
			"  reconcile enqueue --date yesterday --tz Europe/Berlin --trigger cron --source '/data/payments-{date}.csv'")
	date := fs.String("date", "", "business date to reconcile, YYYY-MM-DD, or yesterday or today in --tz (required)")
	source := fs.String("source", "", "payment file (CSV with header, or JSON Lines), - for standard input (required unless --rerun failed); {date} in it is replaced by the date")
	format := fs.String("format", "auto", "input format: csv, jsonl or auto (by extension; by content for -)")
	tz := fs.String("tz", "UTC", "IANA time zone in which the business date is read")
	allowOutside := fs.Bool("allow-outside-date", false, "accept payments whose occurred_at falls outside the business date")
	trigger := fs.String("trigger", "manual", "what started this run: manual or cron")
	rerun := fs.String("rerun", "", "re-run a date: failed (requeue its dead letters) or all (a new generation)")
	providersFile := fs.String("providers", "", "providers file: a payment naming a provider not in it is bad input (default $RECONCILE_PROVIDERS)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	req, err := enqueueRequest(e, *date, *source, *format, *tz, *trigger, *rerun, *allowOutside)
	if err != nil {
		return err
	}
	providers, err := loadProvidersFile(e, *providersFile)
	if err != nil {
		return err
	}
	if providers != nil {
		req.Providers, req.ProvidersSource, req.DefaultProvider = providers.Names(), providers.File, providers.Default
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	res, err := runEnqueue(ctx, pool, logger, actorName(), req)
	if err != nil {
		return err
	}
	return printEnqueueSummary(ctx, e.stdout, pool, providers, req, res)
}

// enqueueRequest validates the flags of an enqueue into a request.
func enqueueRequest(e *env, date, source, format, tz, trigger, rerun string, allowOutside bool) (enqueue.Request, error) {
	var req enqueue.Request
	if date == "" {
		return req, usageErrorf("enqueue: --date is required (YYYY-MM-DD, yesterday or today)")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return req, usageErrorf("enqueue: --tz %q: unknown time zone", tz)
	}
	d, err := businessDate(date, time.Now().In(loc))
	if err != nil {
		return req, usageErrorf("enqueue: --date: %v", err)
	}
	source = strings.ReplaceAll(source, "{date}", d.String())
	f, err := payments.ParseFormat(format)
	if err != nil {
		return req, usageErrorf("enqueue: --format: %v", err)
	}
	mode, err := enqueue.ParseRerun(rerun)
	if err != nil {
		return req, usageErrorf("enqueue: --rerun: %v", err)
	}
	if trigger != string(enqueue.Manual) && trigger != string(enqueue.Cron) {
		return req, usageErrorf("enqueue: --trigger %q: want manual or cron", trigger)
	}
	if source == "" && mode != enqueue.RerunFailed {
		return req, usageErrorf("enqueue: --source is required (a file, or - for standard input)")
	}
	if f == payments.FormatAuto {
		f = payments.FormatFor(source)
	}
	req = enqueue.Request{Date: d, Location: loc, Source: source, Format: f, AllowOutsideDate: allowOutside,
		Trigger: enqueue.Trigger(trigger), Rerun: mode}
	req.Open = func() (io.ReadCloser, error) {
		if source == "-" {
			return io.NopCloser(e.stdin), nil
		}
		file, err := os.Open(source)
		if err != nil {
			return nil, usageErrorf("enqueue: --source: %v", err)
		}
		return file, nil
	}
	return req, nil
}

// runEnqueue performs one enqueue; bad input becomes a usage error (exit 2).
func runEnqueue(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, actor string, req enqueue.Request) (enqueue.Result, error) {
	enq, err := enqueue.New(pool, enqueue.Config{Queue: queue.New(pool, queue.Config{}), Actor: actor, Logger: logger})
	if err != nil {
		return enqueue.Result{}, err
	}
	res, err := enq.Enqueue(ctx, req)
	var problems payments.ProblemList
	switch {
	case errors.As(err, &problems):
		return res, usageError(fmt.Errorf("%s: nothing enqueued:\n%w", req.Source, err))
	case errors.Is(err, enqueue.ErrNoRun):
		return res, usageError(err)
	}
	return res, err
}

func printEnqueueSummary(ctx context.Context, w io.Writer, pool *pgxpool.Pool, providers *profile.Providers, req enqueue.Request, res enqueue.Result) error {
	switch {
	case res.Existing:
		_, err := fmt.Fprintf(w, "run %s (%s, generation %d) exists already with %d items: nothing enqueued\n",
			res.RunID, res.ReconciliationID, res.Generation, res.Items)
		return err
	case req.Rerun == enqueue.RerunAll && res.SupersededItems > 0:
		if _, err := fmt.Fprintf(w, "run %s: %d unfinished items cancelled (superseded by generation %d)\n",
			res.Superseded.ReconciliationID, res.SupersededItems, res.Generation); err != nil {
			return err
		}
	case req.Rerun == enqueue.RerunFailed:
		_, err := fmt.Fprintf(w, "run %s (%s, generation %d): %d dead-lettered items requeued in %s\n",
			res.RunID, res.ReconciliationID, res.Generation, res.Requeued, res.Elapsed.Round(time.Millisecond))
		return err
	}
	eta := "unknown"
	if paces, err := loadPaces(ctx, pool, providers, res.RunID); err == nil {
		eta = estimateConsumers(paces)
	}
	_, err := fmt.Fprintln(w, enqueuedLine(res, eta))
	return err
}

// enqueuedLine is the line a new run's enqueue ends with: the run, its
// items, how fast they were written and eta, the consumers' estimate.
func enqueuedLine(res enqueue.Result, eta string) string {
	rate := float64(res.Items) / res.Elapsed.Seconds()
	return fmt.Sprintf("run %s (%s, generation %d): %s items enqueued in %s (%s rows/s); %s",
		res.RunID, res.ReconciliationID, res.Generation, human.Count(int64(res.Items)), human.Duration(res.Elapsed),
		human.Number(rate), eta)
}

// providerPace is one provider's part of a run: its items and the rate its
// limiter will let consumers call it at.
type providerPace struct {
	provider string // the providers file's name; empty: the default provider
	items    int
	rate     float64
	// from says where the rate comes from: stored (limit set, or seeded
	// by an earlier consumer), the providers file, or the default.
	from string
}

func (p providerPace) need() time.Duration {
	return time.Duration(float64(p.items) / p.rate * float64(time.Second))
}

// loadPaces reads a run's items per provider and the rate each provider's
// limiter will allow: its stored settings, else the providers file's rate
// (which a consumer seeds the limiter with), else the default.
func loadPaces(ctx context.Context, pool *pgxpool.Pool, providers *profile.Providers, runID uuid.UUID) ([]providerPace, error) {
	totals, err := ledger.ProviderTotals(ctx, pool, runID)
	if err != nil {
		return nil, err
	}
	var paces []providerPace
	for _, t := range totals {
		name := limiter.DefaultName
		if t.Provider != "" {
			name = providerLimiter(t.Provider)
		}
		st, err := limiter.LoadState(ctx, pool, name)
		if err != nil {
			return nil, err
		}
		p := providerPace{provider: t.Provider, items: t.Items, rate: st.Rate, from: "the configured"}
		if !st.Stored {
			p.from = "the default"
			if entry, ok := lookupProvider(providers, t.Provider); ok && entry.Rate > 0 {
				p.rate, p.from = entry.Rate, "the providers file's"
			}
		}
		if p.rate > 0 {
			paces = append(paces, p)
		}
	}
	return paces, nil
}

// lookupProvider finds a provider in a providers file; none without one.
func lookupProvider(p *profile.Providers, name string) (profile.ProviderEntry, bool) {
	if p == nil {
		return profile.ProviderEntry{}, false
	}
	return p.Lookup(name)
}

// estimateConsumers says how long consumers need for paces: each provider
// has a limiter of its own and they are called side by side, so the
// slowest provider sets the time.
func estimateConsumers(paces []providerPace) string {
	switch len(paces) {
	case 0:
		return "a consumer needs an unknown time"
	case 1:
		p := paces[0]
		return fmt.Sprintf("a consumer needs %s at %s %s", human.Duration(p.need()), p.from, human.Rate(p.rate))
	}
	slices.SortStableFunc(paces, func(a, b providerPace) int { return cmp.Compare(b.need(), a.need()) })
	parts := make([]string, len(paces))
	for i, p := range paces {
		parts[i] = fmt.Sprintf("%s %s items at %s %s (%s)", cmp.Or(p.provider, "(default)"), human.Count(int64(p.items)),
			p.from, human.Rate(p.rate), human.Duration(p.need()))
	}
	return fmt.Sprintf("consumers need %s, the slowest provider's time: %s", human.Duration(paces[0].need()), strings.Join(parts, ", "))
}

// actorName identifies the person or process enqueuing: user@host.
func actorName() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// businessDate reads --date: YYYY-MM-DD, or yesterday or today as of now
// (in the zone of --tz), for a cron job or timer that has no shell to work
// the date out.
func businessDate(s string, now time.Time) (payments.Date, error) {
	switch s {
	case "today", "yesterday":
		if s == "yesterday" {
			now = now.AddDate(0, 0, -1)
		}
		return payments.Date{Year: now.Year(), Month: now.Month(), Day: now.Day()}, nil
	}
	return payments.ParseDate(s)
}
