package report

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/human"
)

// DB is what the queries need: a pool, a connection or a transaction.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// writeJSON writes v indented, with a final newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// fmtPercent renders a progress share with one decimal, rounded down until
// done, so that 2999 of 3000 reads 99.9%, never 100.0%.
func fmtPercent(p float64, done bool) string {
	if done {
		return "100.0%"
	}
	return fmt.Sprintf("%.1f%%", math.Floor(p*10)/10)
}

// fmtWaiting renders the age of the oldest available message, "-" when none
// is available (as `reconcile stats` prints it).
func fmtWaiting(q QueueStatus) string {
	if q.Available == 0 {
		return "-"
	}
	return human.Duration(time.Duration(q.OldestWaitingSeconds * float64(time.Second)))
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// WriteJSON writes the status as one indented JSON object. Field names are
// those of the struct tags; durations are in seconds, instants RFC 3339.
func (st Status) WriteJSON(w io.Writer) error { return writeJSON(w, st) }

// WriteText writes the status for a terminal.
func (st Status) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	l := st.Limiter
	fmt.Fprintf(bw, "limiter %s: configured %s (burst %d), effective %s, %s throttles",
		l.Name, human.Rate(l.ConfiguredRate), l.Burst, human.Rate(l.EffectiveRate), human.Count(l.Throttles))
	if l.PenaltyUntil != nil {
		fmt.Fprintf(bw, ", paused until %s", fmtTime(*l.PenaltyUntil))
	}
	bw.WriteString("\n")
	for _, c := range l.History {
		estimate := "unknown"
		if c.Estimate > 0 {
			estimate = human.Rate(c.Estimate)
		}
		fmt.Fprintf(bw, "  %s  %-9s  rate %s, provider estimated at %s: %s\n", fmtTime(c.At), c.Cause, human.Rate(c.Rate), estimate, c.Detail)
	}
	st.writeProviders(bw)
	if len(st.Runs) == 0 {
		bw.WriteString("no runs\n")
	}
	for _, r := range st.Runs {
		s := r.States
		fmt.Fprintf(bw, "\nrun %s (%s, generation %d, %s, source %s)\n  id        %s\n", r.ReconciliationID, r.BusinessDate, r.Generation, r.Trigger, r.Source, r.RunID)
		if r.CancelledAt != nil {
			fmt.Fprintf(bw, "  CANCELLED by %s at %s: %s\n", r.CancelledBy, fmtTime(*r.CancelledAt), r.CancelReason)
		}
		fmt.Fprintf(bw, "  items     %s: %s matched, %s mismatched, %s missing, %s dead-lettered, %s cancelled%s, %s queued, %s retry scheduled\n",
			count(r.Items), count(s.Matched), count(s.Mismatched), count(s.Missing), count(s.DeadLettered), count(s.Cancelled),
			UnexpectedCount(s.Unexpected), count(s.Queued), count(s.RetryScheduled))
		fmt.Fprintf(bw, "  progress  %s (%s of %s done)\n", fmtPercent(r.ProgressPercent, r.Open == 0), count(r.Items-r.Open), count(r.Items))
		fmt.Fprintf(bw, "  calls     %s provider calls, %s throttled%s\n", human.Count(r.ProviderCalls), human.Count(r.Throttles), checkedBy(r.CheckMode))
		writeProviderTotals(bw, "  ", r.Providers)
		q := r.Queue
		fmt.Fprintf(bw, "  queue     %s available, %s in flight, %s delayed, %s dead letters; oldest waiting %s\n",
			human.Count(q.Available), human.Count(q.InFlight), human.Count(q.Delayed), human.Count(q.DeadLettered), fmtWaiting(q))
		if r.Open > 0 && st.Consumers == 0 {
			fmt.Fprintf(bw, "  eta       none: no consumer seen in the last %s (start `reconcile consume`)\n",
				human.Duration(time.Duration(st.ConsumerWindowSeconds*float64(time.Second))))
		}
		if r.ETASeconds != nil {
			fmt.Fprintf(bw, "  eta       %s at the effective %s (configured %s): about %s\n",
				human.Duration(time.Duration(*r.ETASeconds)*time.Second), human.Rate(l.EffectiveRate), human.Rate(l.ConfiguredRate),
				fmtTime(*r.EstimatedCompletion))
		}
		fmt.Fprintf(bw, "  created   %s\n  completed %s\n", fmtTime(r.CreatedAt), fmtTimePtr(r.CompletedAt))
		if r.DeadlineAt != nil {
			fmt.Fprintf(bw, "  deadline  %s\n", fmtTime(*r.DeadlineAt))
		}
		writeAnnouncements(bw, r.Announcements)
	}
	if len(st.SchedulerFailures) > 0 {
		fmt.Fprintf(bw, "\nscheduler failures (latest %d):\n", len(st.SchedulerFailures))
		for _, f := range st.SchedulerFailures {
			state := "UNRESOLVED"
			if f.Resolved {
				state = "resolved"
			}
			fmt.Fprintf(bw, "  %s  %s tick for %s by %s (%s): %s\n", fmtTime(f.RecordedAt), fmtTime(f.ScheduledAt),
				f.BusinessDate, f.Scheduler, state, f.Error)
		}
	}
	for _, warn := range st.Warnings {
		fmt.Fprintf(bw, "\nWARNING: %s\n", warn)
	}
	return bw.Flush()
}

// writeAnnouncements writes a line per delivery of a run's announcements;
// one no webhook took up (no process runs with --notify) is left out, as it
// is of every run where nobody asked for announcements.
func writeAnnouncements(w io.Writer, as []Announcement) {
	label := "announced"
	for _, a := range as {
		what := a.Type
		if a.Round > 0 {
			what += fmt.Sprintf(" round %d", a.Round)
		}
		for _, d := range a.Deliveries {
			var state string
			switch d.State {
			case "delivered":
				state = fmt.Sprintf("delivered %s (%s)", fmtTimePtr(d.FinishedAt), plural(d.Attempts, "attempt"))
			case "failed":
				state = fmt.Sprintf("given up %s after %s: %s", fmtTimePtr(d.FinishedAt), plural(d.Attempts, "attempt"), d.LastError)
			default:
				state = fmt.Sprintf("pending, next attempt %s", fmtTimePtr(d.NextAttemptAt))
				if d.LastError != "" {
					state += fmt.Sprintf(" (%s so far, last: %s)", plural(d.Attempts, "attempt"), d.LastError)
				}
			}
			fmt.Fprintf(w, "  %-9s %s to %s: %s\n", label, what, d.Webhook, state)
			label = ""
		}
	}
}

// plural writes n and the word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// checkedBy says how a run's items are checked, after its calls; nothing
// before a consumer chose.
func checkedBy(mode string) string {
	switch mode {
	case "lookup":
		return "; checked by lookup (each item by its id)"
	case "list":
		return "; checked by list (the provider's list of the date first)"
	case "auto":
		return "; checked by list where the provider's profile has one, else by lookup"
	}
	return ""
}
