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
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/payments"
)

// runRow is one run with its totals, read from the completion counters
// (a fixed number of rows per run, whatever its size).
type runRow struct {
	RunID            uuid.UUID
	ReconciliationID string
	BusinessDate     string
	Generation       int
	Trigger          string
	TriggeredBy      string
	Source           string
	SourceSHA256     string
	TimeZone         string
	Items            int64
	CreatedAt        time.Time
	CompletedAt      *time.Time
	Open             int64
	Matched          int64
	Mismatched       int64
	Missing          int64
	DeadLettered     int64
	Calls            int64
	Throttles        int64
	// Unexpected counts the records the provider listed that the file
	// lacks (list mode).
	Unexpected int64
	// Completion is the run's completion record; nil before the first.
	Completion *completion
}

// completion is a row of run_completions or account_completions.
type completion struct {
	Round        int
	Items        int64
	Matched      int64
	Mismatched   int64
	Missing      int64
	DeadLettered int64
	Calls        int64
	Throttles    int64
	CompletedAt  time.Time
	CompletedBy  string
}

// State is open, complete or empty.
func (r runRow) State() string {
	switch {
	case r.Items == 0:
		return "empty"
	case r.Open > 0:
		return "running"
	}
	return "complete"
}

// Done is the number of items in a terminal state.
func (r runRow) Done() int64 { return r.Items - r.Open }

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

// runColumns selects a runRow from runs r; the totals come from the run's
// shard counters and the completion from run_completions c.
const runColumns = `r.run_id, r.reconciliation_id, r.business_date::text, r.generation, r.trigger, r.triggered_by,
       r.source, r.source_sha256, r.time_zone, r.item_count, r.created_at, r.completed_at,
       coalesce(s.open, 0), coalesce(s.matched, 0), coalesce(s.mismatched, 0), coalesce(s.missing, 0),
       coalesce(s.dead_lettered, 0), coalesce(s.calls, 0), coalesce(s.throttles, 0),
       c.round, c.items, c.matched, c.mismatched, c.missing, c.dead_lettered, c.provider_calls, c.throttles,
       c.completed_at, c.completed_by, coalesce(s.unexpected, 0)
  FROM runs r
  LEFT JOIN LATERAL (
        SELECT sum(remaining) AS open, sum(matched) AS matched, sum(mismatched) AS mismatched,
               sum(missing) AS missing, sum(dead_lettered) AS dead_lettered,
               sum(provider_calls) AS calls, sum(throttles) AS throttles, sum(unexpected) AS unexpected
          FROM run_shards WHERE run_id = r.run_id) s ON true
  LEFT JOIN run_completions c ON c.run_id = r.run_id`

func scanRun(row pgx.Row) (runRow, error) {
	var r runRow
	var round *int
	var c completion
	var cItems, cMatched, cMismatched, cMissing, cDead, cCalls, cThrottles *int64
	var cAt *time.Time
	var cBy *string
	err := row.Scan(&r.RunID, &r.ReconciliationID, &r.BusinessDate, &r.Generation, &r.Trigger, &r.TriggeredBy,
		&r.Source, &r.SourceSHA256, &r.TimeZone, &r.Items, &r.CreatedAt, &r.CompletedAt,
		&r.Open, &r.Matched, &r.Mismatched, &r.Missing, &r.DeadLettered, &r.Calls, &r.Throttles,
		&round, &cItems, &cMatched, &cMismatched, &cMissing, &cDead, &cCalls, &cThrottles, &cAt, &cBy, &r.Unexpected)
	if err != nil {
		return r, err
	}
	if round != nil {
		c.Round = *round
		c.Items, c.Matched, c.Mismatched, c.Missing, c.DeadLettered = *cItems, *cMatched, *cMismatched, *cMissing, *cDead
		c.Calls, c.Throttles, c.CompletedAt, c.CompletedBy = *cCalls, *cThrottles, *cAt, *cBy
		r.Completion = &c
	}
	return r, nil
}

// loadRun reads one run; a 404 error when it does not exist.
func loadRun(ctx context.Context, rd *reader, id uuid.UUID) (runRow, error) {
	r, err := scanRun(rd.QueryRow(ctx, `SELECT `+runColumns+` WHERE r.run_id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, notFound("no run %s", id)
	}
	if err != nil {
		return r, fmt.Errorf("read run %s: %w", id, err)
	}
	return r, nil
}

// runParam parses the {run} path value.
func runParam(r *http.Request) (uuid.UUID, error) {
	id, err := uuid.Parse(r.PathValue("run"))
	if err != nil {
		return uuid.Nil, notFound("%q is not a run id", r.PathValue("run"))
	}
	return id, nil
}

// runsCursor is the key of the runs page: runs strictly older than
// (date, generation), newest first.
type runsCursor struct {
	Date       string
	Generation int
}

func (c runsCursor) String() string { return c.Date + "." + strconv.Itoa(c.Generation) }

func parseRunsCursor(s string) (*runsCursor, error) {
	if s == "" {
		return nil, nil
	}
	d, g, ok := strings.Cut(s, ".")
	n, err := strconv.Atoi(g)
	if _, derr := payments.ParseDate(d); !ok || err != nil || derr != nil {
		return nil, badRequest("before=%q: want YYYY-MM-DD.generation", s)
	}
	return &runsCursor{Date: d, Generation: n}, nil
}

type runsData struct {
	Runs []runRow
	// Breakdowns holds each listed run's amounts at stake.
	Breakdowns map[uuid.UUID]*breakdown
	Total      capped
	Now        time.Time
	// Next is the cursor of the next page; nil on the last.
	Next *runsCursor
	Date string
}

// runsPage lists runs newest first, PageSize at a time, by key.
func (h *Handler) runsPage(w http.ResponseWriter, r *http.Request, u User) error {
	q := r.URL.Query()
	cur, err := parseRunsCursor(q.Get("before"))
	if err != nil {
		return err
	}
	date := q.Get("date")
	if date != "" {
		if _, err := payments.ParseDate(date); err != nil {
			return badRequest("date=%q: want YYYY-MM-DD", date)
		}
	}
	d := runsData{Now: h.cfg.Now(), Date: date}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var curDate *string
		curGen := 0
		if cur != nil {
			curDate, curGen = &cur.Date, cur.Generation
		}
		var dateArg *string
		if date != "" {
			dateArg = &date
		}
		rows, err := rd.Query(r.Context(), `SELECT `+runColumns+`
			 WHERE ($1::date IS NULL OR (r.business_date, r.generation) < ($1::date, $2))
			   AND ($3::date IS NULL OR r.business_date = $3::date)
			 ORDER BY r.business_date DESC, r.generation DESC
			 LIMIT $4`, curDate, curGen, dateArg, h.cfg.PageSize+1)
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		d.Runs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (runRow, error) { return scanRun(row) })
		if err != nil {
			return fmt.Errorf("list runs: %w", err)
		}
		if len(d.Runs) > h.cfg.PageSize {
			last := d.Runs[h.cfg.PageSize-1]
			d.Runs = d.Runs[:h.cfg.PageSize]
			d.Next = &runsCursor{Date: last.BusinessDate, Generation: last.Generation}
		}
		ids := make([]uuid.UUID, len(d.Runs))
		for i, run := range d.Runs {
			ids[i] = run.RunID
		}
		if d.Breakdowns, err = loadBreakdowns(r.Context(), rd, ids); err != nil {
			return err
		}
		d.Total, err = countCapped(r.Context(), rd, `SELECT 1 FROM runs`, h.cfg.CountCap)
		return err
	})
	if err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "runs", view{Title: "Runs", User: &u, Data: d})
	return nil
}

// countCapped counts the rows of query, stopping one past limit.
func countCapped(ctx context.Context, rd *reader, query string, limit int, args ...any) (capped, error) {
	var n int64
	args = append(args, limit+1)
	err := rd.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (%s LIMIT $%d) q`, query, len(args)), args...).Scan(&n)
	if err != nil {
		return capped{}, fmt.Errorf("count: %w", err)
	}
	return capped{N: n, Cap: int64(limit)}, nil
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

// txLink is the page of one transaction of a run.
func txLink(runID fmt.Stringer, transactionID string) string {
	return "/runs/" + runID.String() + "/tx/" + url.PathEscape(transactionID)
}
