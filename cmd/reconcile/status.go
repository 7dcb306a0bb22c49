package main

import (
	"context"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/report"
)

func cmdStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "status", "[--date YYYY-MM-DD] [--json] [--deadline TIME|DURATION]",
		"Show each run's progress: items by state, progress, configured and effective provider rate, ETA at\n"+
			"the effective rate, throttles, the oldest waiting message, dead letters and completion time, and\n"+
			"the latest scheduler failures. Without --date: every open run and the latest date's runs.\n"+
			"With --deadline, warns when a run will not finish in time.",
		"reconcile status --date 2026-10-24 --deadline 6h")
	date := fs.String("date", "", "show the runs of this business date, YYYY-MM-DD")
	asJSON := fs.Bool("json", false, "print JSON")
	deadline := fs.String("deadline", "", "warn when a run's ETA passes this instant (RFC 3339, e.g. 2026-10-25T06:00:00Z) or this long from now (e.g. 6h)")
	failures := fs.Int("failures", 5, "how many of the latest scheduler failures to show")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	now := time.Now()
	opts := report.StatusOptions{Now: now, Failures: *failures}
	if *date != "" {
		d, err := payments.ParseDate(*date)
		if err != nil {
			return usageErrorf("status: --date: %v", err)
		}
		opts.Date = d
	}
	if *deadline != "" {
		t, err := parseDeadline(*deadline, now)
		if err != nil {
			return err
		}
		opts.Deadline = t
	}
	if *failures < 1 {
		return usageErrorf("status: --failures %d: want at least 1", *failures)
	}
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := report.LoadStatus(ctx, pool, opts)
	if err != nil {
		return err
	}
	if *asJSON {
		return st.WriteJSON(e.stdout)
	}
	return st.WriteText(e.stdout)
}

// parseDeadline reads an RFC 3339 instant or a duration from now.
func parseDeadline(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && !strings.HasPrefix(s, "-") {
		return now.Add(d), nil
	}
	return time.Time{}, usageErrorf("status: --deadline %q: want an RFC 3339 instant (2026-10-25T06:00:00Z) or a duration (6h)", s)
}
