package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
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
	return printEnqueueSummary(ctx, e.stdout, pool, req, res)
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

func printEnqueueSummary(ctx context.Context, w io.Writer, pool *pgxpool.Pool, req enqueue.Request, res enqueue.Result) error {
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
	if s, err := limiter.LoadSettings(ctx, pool, limiter.DefaultName); err == nil && s.Rate > 0 {
		eta = (time.Duration(float64(res.Items) / s.Rate * float64(time.Second))).Round(time.Second).String() +
			fmt.Sprintf(" at the configured %g/s", s.Rate)
	}
	rate := float64(res.Items) / res.Elapsed.Seconds()
	_, err := fmt.Fprintf(w, "run %s (%s, generation %d): %d items enqueued in %s (%.0f rows/s); a consumer needs %s\n",
		res.RunID, res.ReconciliationID, res.Generation, res.Items, res.Elapsed.Round(time.Millisecond), rate, eta)
	return err
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
