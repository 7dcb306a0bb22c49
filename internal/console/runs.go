package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
)

// runRow is one run with its totals, as the ledger summarises it from its
// completion counters (a fixed number of rows per run, whatever its size),
// with what the pages derive from them.
type runRow struct {
	ledger.Summary
}

// State is empty, running, cancelled (withdrawn with items still open) or
// complete.
func (r runRow) State() string {
	switch {
	case r.Items == 0:
		return "empty"
	case r.Open > 0:
		return "running"
	case r.CancelledAt != nil:
		return "cancelled"
	}
	return "complete"
}

// Progress is the share of items done, 0 to 100.
func (r runRow) Progress() float64 {
	if r.Items == 0 {
		return 100
	}
	return 100 * float64(r.Done()) / float64(r.Items)
}

// Duration is how long the run took (or has taken until now).
func (r runRow) Duration(now time.Time) time.Duration {
	if r.CompletedAt != nil {
		return r.CompletedAt.Sub(r.CreatedAt)
	}
	return now.Sub(r.CreatedAt)
}

// loadRuns reads the summaries of the runs f selects.
func loadRuns(ctx context.Context, rd *reader, f ledger.RunFilter) ([]runRow, error) {
	ss, err := ledger.Summaries(ctx, rd, f)
	if err != nil {
		return nil, err
	}
	out := make([]runRow, len(ss))
	for i, s := range ss {
		out[i] = runRow{s}
	}
	return out, nil
}

// loadRun reads one run; a 404 error when it does not exist.
func loadRun(ctx context.Context, rd *reader, id uuid.UUID) (runRow, error) {
	s, err := ledger.FindSummary(ctx, rd, ledger.RunFilter{RunID: id})
	if errors.Is(err, ledger.ErrNotFound) {
		return runRow{}, notFound("no run %s", id)
	}
	if err != nil {
		return runRow{}, fmt.Errorf("read run %s: %w", id, err)
	}
	return runRow{s}, nil
}

// runParam parses the {run} path value.
func runParam(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("run"))
	if err != nil {
		return uuid.Nil, notFound("%q is not a run id", r.PathValue("run"))
	}
	return id, nil
}

// parseRunsCursor reads the key of the runs page: runs strictly older than
// (date, generation), newest first, written date.generation.
func parseRunsCursor(s string) (*ledger.RunKey, error) {
	if s == "" {
		return nil, nil
	}
	d, g, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(g, 10, 32)
	date, valid := parseDay(d)
	if !ok || err != nil || n < 1 || !valid {
		return nil, badRequest("before=%q: want YYYY-MM-DD.generation (a generation from 1)", s)
	}
	return &ledger.RunKey{Date: date, Generation: int(n)}, nil
}

// runsCursor writes the key of the runs page after run.
func runsCursor(run runRow) string {
	return run.BusinessDate.String() + "." + strconv.Itoa(run.Generation)
}

// parseDay reads a day written YYYY-MM-DD; false unless PostgreSQL's date
// type holds it too (year 0000 parses in Go but not there).
func parseDay(s string) (payments.Date, bool) {
	d, err := payments.ParseDate(s)
	return d, err == nil && d.Year >= 1
}

type runsData struct {
	Runs []runRow
	// Breakdowns holds each listed run's amounts at stake.
	Breakdowns map[uuid.UUID]*breakdown
	// Total counts the runs, up to CountCap.
	Total capped
	Now   time.Time
	// Next is the cursor of the next page; empty on the last.
	Next string
	Date string
}

// AnyRunning reports whether a listed run has open items.
func (d runsData) AnyRunning() bool {
	for _, r := range d.Runs {
		if r.Open > 0 {
			return true
		}
	}
	return false
}

// runsPage lists runs newest first, PageSize at a time, by key.
func (h *Handler) runsPage(w http.ResponseWriter, r *http.Request, u User) error {
	q := r.URL.Query()
	cur, err := parseRunsCursor(q.Get("before"))
	if err != nil {
		return err
	}
	f := ledger.RunFilter{Before: cur, NewestFirst: true, Limit: h.cfg.PageSize + 1}
	date := q.Get("date")
	if date != "" {
		var valid bool
		if f.Date, valid = parseDay(date); !valid {
			return badRequest("date=%q: want YYYY-MM-DD", date)
		}
	}
	d := runsData{Now: h.cfg.Now(), Date: date}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Runs, err = loadRuns(r.Context(), rd, f); err != nil {
			return err
		}
		if len(d.Runs) > h.cfg.PageSize {
			d.Runs = d.Runs[:h.cfg.PageSize]
			d.Next = runsCursor(d.Runs[h.cfg.PageSize-1])
		}
		ids := make([]uuid.UUID, len(d.Runs))
		for i, run := range d.Runs {
			ids[i] = run.RunID
		}
		if d.Breakdowns, err = loadBreakdowns(r.Context(), rd, ids); err != nil {
			return err
		}
		n, err := ledger.CountRuns(r.Context(), rd, h.cfg.CountCap)
		d.Total = capped{N: n, Cap: int64(h.cfg.CountCap)}
		return err
	})
	if err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "runs", view{Title: "Runs", User: &u, Data: d})
	return nil
}

// queryString builds "?k=v&..." from pairs, leaving out empty values.
func queryString(pairs ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// txLink is the page of one transaction of a run: /runs/ID/tx/TXID, or
// /runs/ID/tx?id=TXID for the ids . and .., which a browser resolves as
// dot segments however they are escaped (the URL Standard reads %2E as a
// dot there too).
func txLink(runID fmt.Stringer, transactionID string) string {
	if transactionID == "." || transactionID == ".." {
		return "/runs/" + runID.String() + "/tx" + queryString("id", transactionID)
	}
	return "/runs/" + runID.String() + "/tx/" + url.PathEscape(transactionID)
}
