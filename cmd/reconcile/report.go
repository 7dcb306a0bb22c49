package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/report"
)

func cmdReport(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "report", "--date YYYY-MM-DD [--generation N] [--format table|csv|json] [--all] [--out FILE]",
		"List what a run found: discrepancies (transaction, account, field, expected and provider value),\n"+
			"transactions missing at the provider, and dead letters with their reasons; --all adds every item\n"+
			"with its outcome and attempts. CSV and JSON are stable formats (reconcile-report/v1) documented\n"+
			"in docs/reports.md. An unknown date exits 2. --out writes the whole report or nothing.",
		"reconcile report --date 2026-10-24 --format csv --out discrepancies-2026-10-24.csv")
	date := fs.String("date", "", "business date of the run, YYYY-MM-DD (required)")
	generation := fs.Int("generation", 0, "generation of the date's run (default: the latest)")
	format := fs.String("format", "table", "output format: table, csv or json")
	all := fs.Bool("all", false, "also list every item with its outcome and attempts")
	out := fs.String("out", "", "write to this file instead of standard output (replaced atomically)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *date == "" {
		return usageErrorf("report: --date is required (YYYY-MM-DD)")
	}
	d, err := payments.ParseDate(*date)
	if err != nil {
		return usageErrorf("report: --date: %v", err)
	}
	if *generation < 0 {
		return usageErrorf("report: --generation %d: want 1 or more", *generation)
	}
	if *format != "table" && *format != "csv" && *format != "json" {
		return usageErrorf("report: --format %q: want table, csv or json", *format)
	}
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := report.Options{Date: d, Generation: *generation, All: *all}
	// CSV and JSON stream from the ledger, in bounded memory whatever the
	// run's size; the table is aligned over the whole report.
	write := func(w io.Writer) error { return report.Write(ctx, pool, opts, *format, w) }
	if *format == "table" {
		rep, err := report.Load(ctx, pool, opts)
		if err != nil {
			return reportErr(err)
		}
		write = rep.WriteTable
	}
	if *out == "" {
		return reportErr(write(e.stdout))
	}
	return reportErr(writeFileAtomic(*out, write))
}

// reportErr makes a date without a run bad input (exit 2).
func reportErr(err error) error {
	if errors.Is(err, report.ErrNoRun) {
		return usageError(fmt.Errorf("%w (see `reconcile status` for the dates that have runs)", err))
	}
	return err
}

// writeFileAtomic writes to a temporary file beside path and renames it over
// path, so readers see the old file or the whole new one, never a part.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("write report to %s: %w", path, err)
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write report to %s: %w", path, err)
	}
	return nil
}
