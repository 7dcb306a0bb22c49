package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/sample"
)

func cmdSample(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "sample", "--date YYYY-MM-DD [--count N] [--seed S] [--format csv|jsonl] [--tz ZONE] [--out FILE|-]",
		"Write a realistic, deterministic day of payments (the same flags always give the same bytes),\n"+
			"for trials and benchmarks. The format follows --out's extension unless --format is given;\n"+
			"standard output gets CSV by default.",
		"reconcile sample --date 2026-10-24 --count 18000 --out payments-2026-10-24.csv")
	date := fs.String("date", "", "business date the payments occur on, YYYY-MM-DD (required)")
	count := fs.Int("count", 18000, "number of payments")
	seed := fs.Uint64("seed", 1, "random seed; the same seed gives the same payments")
	format := fs.String("format", "auto", "output format: csv, jsonl, or auto (by --out's extension, else csv)")
	tz := fs.String("tz", "UTC", "IANA time zone of the business date")
	out := fs.String("out", "-", "output file, or - for standard output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *date == "" {
		return usageErrorf("sample: --date is required")
	}
	d, err := payments.ParseDate(*date)
	if err != nil {
		return usageErrorf("sample: --date: %w", err)
	}
	if *count <= 0 {
		return usageErrorf("sample: --count %d: want a positive number", *count)
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return usageErrorf("sample: --tz %q: unknown time zone", *tz)
	}
	f, err := payments.ParseFormat(*format)
	if err != nil {
		return usageErrorf("sample: --format: %w", err)
	}
	if f == payments.FormatAuto {
		f = payments.FormatFor(*out)
	}
	cfg := sample.Config{Date: d, Location: loc, Count: *count, Seed: *seed}
	if *out == "-" {
		return sample.Write(e.stdout, f, cfg)
	}
	file, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("create sample file: %w", err)
	}
	if err := sample.Write(file, f, cfg); err != nil {
		_ = file.Close()
		_ = os.Remove(*out)
		return err
	}
	if err := file.Close(); err != nil {
		_ = os.Remove(*out)
		return fmt.Errorf("close sample file %s: %w", *out, err)
	}
	return nil
}
