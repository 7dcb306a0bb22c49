package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/queue"
)

// countsJSON is the JSON form of queue.Counts, with the age in seconds.
// Acked and Total are absent where they were not counted (a run's, without
// --exact); AckedEstimated says when the total's are estimates.
type countsJSON struct {
	Total                     *int64  `json:"total,omitempty"`
	Available                 int64   `json:"available"`
	InFlight                  int64   `json:"in_flight"`
	Delayed                   int64   `json:"delayed"`
	DeadLettered              int64   `json:"dead_lettered"`
	Acked                     *int64  `json:"acked,omitempty"`
	AckedEstimated            bool    `json:"acked_estimated,omitempty"`
	OldestAvailableAgeSeconds float64 `json:"oldest_available_age_seconds"`
}

func countsToJSON(c queue.Counts, acked bool) countsJSON {
	out := countsJSON{Available: c.Available, InFlight: c.InFlight, Delayed: c.Delayed, DeadLettered: c.DeadLettered,
		AckedEstimated: c.Estimated, OldestAvailableAgeSeconds: c.OldestAvailableAge.Seconds()}
	if acked {
		out.Total, out.Acked = &c.Total, &c.Acked
	}
	return out
}

func cmdStats(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "stats", "[--exact] [--json]",
		"Show the queue: messages available now, in flight (claimed, within their visibility timeout),\n"+
			"delayed (waiting for a retry time), dead-lettered and acked, the age of the oldest available\n"+
			"message, in total and for each run with open messages. The open messages are counted; the\n"+
			"acked ones, kept for the retention period, are estimated from the table's statistics (marked ~)\n"+
			"unless --exact counts them, in total and per run, with a scan of every message kept.",
		"reconcile stats --json")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	exact := fs.Bool("exact", false, "count the acked messages, in total and per run (reads every message kept)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := queue.New(pool, queue.Config{Logger: logger})
	stats := q.Stats
	if *exact {
		stats = q.ExactStats
	}
	s, err := stats(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		type runJSON struct {
			RunID            uuid.UUID `json:"run_id"`
			ReconciliationID string    `json:"reconciliation_id"`
			countsJSON
		}
		out := struct {
			countsJSON
			Runs []runJSON `json:"runs"`
		}{countsJSON: countsToJSON(s.Counts, true), Runs: []runJSON{}}
		for _, r := range s.Runs {
			out.Runs = append(out.Runs, runJSON{r.RunID, r.ReconciliationID, countsToJSON(r.Counts, s.RunsAcked)})
		}
		return writeJSON(e.stdout, out)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tavailable\tin flight\tdelayed\tdead-lettered\tacked\ttotal\toldest available\t")
	row := func(name string, c queue.Counts, acked bool) {
		ackedCell, totalCell := "-", "-"
		if acked {
			mark := ""
			if c.Estimated {
				mark = "~"
			}
			ackedCell, totalCell = mark+strconv.FormatInt(c.Acked, 10), mark+strconv.FormatInt(c.Total, 10)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", name, c.Available, c.InFlight, c.Delayed,
			c.DeadLettered, ackedCell, totalCell, age(c.OldestAvailableAge))
	}
	for _, r := range s.Runs {
		row(r.ReconciliationID, r.Counts, s.RunsAcked)
	}
	row("all", s.Counts, true)
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	if s.Estimated {
		notes = append(notes, "~ an estimate from the table's statistics")
	}
	if !s.RunsAcked && len(s.Runs) > 0 {
		notes = append(notes, "- not counted per run")
	}
	if len(notes) > 0 {
		fmt.Fprintf(e.stdout, "acked: %s; `reconcile stats --exact` counts them (it reads every message kept)\n", strings.Join(notes, ", "))
	}
	return nil
}

func cmdDLQList(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "dlq list", "[--run ID] [--json] [--cancelled]",
		"List dead-lettered messages in message id order (the order they were enqueued): message id,\n"+
			"run, transaction, reason, delivery count, provider attempts (the ledger's count, as in the\n"+
			"report), how long ago it was dead-lettered and the last error. The messages of cancelled runs\n"+
			"(reason cancelled) are not redriven, so they are left out and counted; --cancelled lists them.",
		"reconcile dlq list --run nightly-2026-10-24")
	run := fs.String("run", "", "list only the dead letters of this run (UUID or reconciliation id)")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	cancelled := fs.Bool("cancelled", false, "list the messages of cancelled runs too (they are never redriven)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	var f queue.Filter
	if f.RunID, err = resolveRun(ctx, pool, "dlq list", *run); err != nil {
		return err
	}
	dls, err := queue.New(pool, queue.Config{Logger: logger}).DeadLetters(ctx, f)
	if err != nil {
		return err
	}
	withdrawn := 0
	if !*cancelled {
		n := len(dls)
		dls = slices.DeleteFunc(dls, func(d queue.DeadLetter) bool { return d.Reason == queue.ReasonCancelled })
		withdrawn = n - len(dls)
	}
	attempts, err := itemAttempts(ctx, pool, dls)
	if err != nil {
		return err
	}
	if *asJSON {
		type dlJSON struct {
			ID               int64     `json:"id"`
			RunID            uuid.UUID `json:"run_id"`
			ReconciliationID string    `json:"reconciliation_id"`
			TransactionID    string    `json:"transaction_id"`
			IdempotencyKey   string    `json:"idempotency_key"`
			Reason           string    `json:"reason"`
			LastError        string    `json:"last_error"`
			Deliveries       int       `json:"deliveries"`
			Attempt          int       `json:"attempt"`
			Attempts         int       `json:"attempts"`
			EnqueuedAt       time.Time `json:"enqueued_at"`
			DeadAt           time.Time `json:"dead_lettered_at"`
			AgeSeconds       float64   `json:"age_seconds"`
		}
		out := make([]dlJSON, 0, len(dls))
		for _, d := range dls {
			out = append(out, dlJSON{d.ID, d.RunID, d.ReconciliationID, d.TransactionID, d.IdempotencyKey, d.Reason,
				d.LastError, d.Deliveries, d.Attempt, attempts[d.IdempotencyKey], d.EnqueuedAt, d.DeadAt, d.Age.Seconds()})
		}
		return writeJSON(e.stdout, out)
	}
	note := ""
	if withdrawn > 0 {
		note = fmt.Sprintf(" (and %s of cancelled runs, not redriven: --cancelled lists them)", human.Count(int64(withdrawn)))
	}
	if len(dls) == 0 {
		fmt.Fprintf(e.stdout, "no dead letters%s\n", note)
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRUN\tTRANSACTION\tREASON\tDELIVERIES\tATTEMPTS\tAGE\tLAST ERROR")
	for _, d := range dls {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", d.ID, d.ReconciliationID, d.TransactionID, d.Reason,
			d.Deliveries, attempts[d.IdempotencyKey], age(d.Age), excerpt(d.LastError, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s dead letter(s)%s; send them back with `reconcile dlq redrive`\n", human.Count(int64(len(dls))), note)
	return nil
}

// itemAttempts returns the ledger's attempt count (provider calls) of the
// items of dls, by idempotency key: the figure the report shows, where the
// message's own attempt counts only the failures of its current round.
func itemAttempts(ctx context.Context, pool *pgxpool.Pool, dls []queue.DeadLetter) (map[string]int, error) {
	keys := make([]ledger.Key, len(dls))
	for i, d := range dls {
		keys[i] = ledger.Key{RunID: d.RunID, TransactionID: d.TransactionID}
	}
	items, err := ledger.Items(ctx, pool, keys)
	if err != nil {
		return nil, fmt.Errorf("read attempts of dead-lettered items: %w", err)
	}
	out := make(map[string]int, len(items))
	for _, it := range items {
		out[it.IdempotencyKey] = it.Attempts
	}
	return out, nil
}

// age renders a duration for a table (human.Duration), "-" for none.
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return human.Duration(d)
}

// excerpt cuts s to at most n runes, on one line.
func excerpt(s string, n int) string {
	r := []rune(s)
	for i, c := range r {
		if c == '\n' || c == '\r' || c == '\t' {
			r[i] = ' '
		}
	}
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return string(r)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
