package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/report"
)

// filters are the GET parameters of the discrepancy and dead-letter pages.
// The URL is the bookmark: every filter is a parameter.
type filters struct {
	Outcome string // mismatched (default), missing, unexpected or all (the three)
	Field   string // a differing field: amount_minor, currency or status
	Account string
	// Provider is a providers file's name, or "(default)" for the items
	// that name none; empty: every provider.
	Provider string
	Reason   string // dead letters: the reason
	Min      *int64 // expected amount range, minor units
	Max      *int64
	After    string // keyset cursor: transaction id or message id
	Format   string // "", csv or json
}

func parseFilters(q url.Values) (filters, error) {
	f := filters{Outcome: q.Get("outcome"), Field: q.Get("field"), Account: q.Get("account"),
		Provider: strings.TrimSpace(q.Get("provider")), Reason: q.Get("reason"), After: q.Get("after"), Format: q.Get("format")}
	switch f.Outcome {
	case "":
		f.Outcome = "mismatched"
	case "mismatched", "missing", "unexpected", "all":
	default:
		return f, badRequest("outcome=%q: want mismatched, missing, unexpected or all", f.Outcome)
	}
	switch f.Field {
	case "", "amount_minor", "currency", "status":
	default:
		return f, badRequest("field=%q: want amount_minor, currency or status", f.Field)
	}
	switch f.Format {
	case "", "csv", "json":
	default:
		return f, badRequest("format=%q: want csv or json", f.Format)
	}
	for name, dst := range map[string]**int64{"min": &f.Min, "max": &f.Max} {
		if s := strings.TrimSpace(q.Get(name)); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return f, badRequest("%s=%q: want an amount in minor units", name, s)
			}
			*dst = &n
		}
	}
	return f, nil
}

// Query is the filter's URL query without the cursor and format, with
// extra pairs added.
func (f filters) Query(extra ...string) string {
	pairs := []string{"outcome", f.Outcome, "field", f.Field, "account", f.Account, "provider", f.Provider, "reason", f.Reason,
		"min", int64Str(f.Min), "max", int64Str(f.Max)}
	return queryString(append(pairs, extra...)...)
}

func int64Str(p *int64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(*p, 10)
}

// provider is the provider filter as a query argument: NULL for every
// provider, the empty name for the default one.
func (f filters) provider() *string {
	switch f.Provider {
	case "":
		return nil
	case defaultProvider:
		return new("")
	}
	return &f.Provider
}

func (f filters) states() []ledger.State {
	switch f.Outcome {
	case "missing":
		return []ledger.State{ledger.Missing}
	case "unexpected":
		return []ledger.State{ledger.Unexpected}
	case "all":
		return []ledger.State{ledger.Mismatched, ledger.Missing, ledger.Unexpected}
	}
	return []ledger.State{ledger.Mismatched}
}

type discrepancyData struct {
	Run     runRow
	Filters filters
	// Items are the mismatched or missing items of the page.
	Items []ledger.Item
	// Scanned is how many items the page's window read, from after
	// Filters.After up to ScannedTo.
	Scanned   int64
	ScannedTo string
	// Next is the cursor of the next page; empty at the end of the run.
	Next   string
	Window int
}

// findItems reads the mismatched or missing items f selects among the
// window items after f.After (all of them when window is 0), at most page
// (all when 0).
func findItems(ctx context.Context, rd *reader, runID uuid.UUID, f filters, window, page int) (ledger.WindowPage, error) {
	limit := 0
	if page > 0 {
		limit = page + 1
	}
	return ledger.Window(ctx, rd, ledger.ItemWindow{RunID: runID, After: f.After, Window: window, Limit: limit,
		States: f.states(), Account: f.Account, MinAmount: f.Min, MaxAmount: f.Max, Field: f.Field,
		Provider: f.provider()})
}

// discrepanciesPage shows the mismatched (and, on request, missing) items
// of a run, Window items scanned per page; format=csv or json exports every
// match of the filters in the report's format.
func (h *Handler) discrepanciesPage(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	f, err := parseFilters(r.URL.Query())
	if err != nil {
		return err
	}
	if f.Format != "" {
		return h.exportItems(w, r, u, id, f)
	}
	d := discrepancyData{Filters: f, Window: h.cfg.Window}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		page, err := findItems(r.Context(), rd, id, f, h.cfg.Window, h.cfg.PageSize)
		d.Items, d.Scanned, d.ScannedTo = page.Items, page.Scanned, page.Last
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case len(d.Items) > h.cfg.PageSize:
		d.Items = d.Items[:h.cfg.PageSize]
		d.Next = d.Items[len(d.Items)-1].TransactionID
	case d.Scanned == int64(h.cfg.Window):
		d.Next = d.ScannedTo
	}
	h.render(w, r, http.StatusOK, "discrepancies", view{Title: "Discrepancies of " + d.Run.ReconciliationID, User: &u, Data: d})
	return nil
}

// exportItems writes every item the filters select (from After on) as a
// report of the run in the report command's CSV or JSON format: the
// discrepancies, then (outcome=all or missing) the missing items, then
// (outcome=all or unexpected) the records the provider listed that the
// file lacks, each read a window of Config.Window items at a time.
func (h *Handler) exportItems(w http.ResponseWriter, r *http.Request, u User, id uuid.UUID, f filters) error {
	return h.exportReport(w, r, u, id, f.Format, "discrepancies", func(ctx context.Context, rd *reader, s *report.Stream) error {
		for _, state := range f.states() {
			pass := f
			pass.Outcome = string(state)
			err := eachFound(ctx, rd, id, pass, h.cfg.Window, func(it ledger.Item) error {
				switch it.State {
				case ledger.Missing:
					return s.Missing(report.ItemOf(it))
				case ledger.Unexpected:
					return s.Unexpected(report.UnexpectedOf(it))
				}
				for _, d := range report.DiscrepanciesOf(it, f.Field) {
					if err := s.Discrepancy(d); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// exportReport exports rows of run id as a report of the run in format
// (csv or json), named after the run and what: rows writes them to the
// report's stream in the format's order.
func (h *Handler) exportReport(w http.ResponseWriter, r *http.Request, u User, id uuid.UUID, format, what string,
	rows func(ctx context.Context, rd *reader, s *report.Stream) error) error {
	return h.export(w, r, u, func(ctx context.Context, rd *reader, out io.Writer) (download, error) {
		run, err := loadRun(ctx, rd, id)
		if err != nil {
			return download{}, err
		}
		s, err := report.NewStream(out, format, report.New(run.Summary).Run)
		if err != nil {
			return download{}, err
		}
		if err := rows(ctx, rd, s); err != nil {
			return download{}, err
		}
		return reportDownload(run, what, format), s.Close(nil)
	})
}

// eachFound calls fn for every item f selects after f.After, reading
// window items of the run at a time by key.
func eachFound(ctx context.Context, rd *reader, runID uuid.UUID, f filters, window int, fn func(ledger.Item) error) error {
	for {
		page, err := findItems(ctx, rd, runID, f, window, 0)
		if err != nil {
			return err
		}
		for _, it := range page.Items {
			if err := fn(it); err != nil {
				return err
			}
		}
		if page.Scanned < int64(window) {
			return nil
		}
		f.After = page.Last
	}
}

// reportDownload names a CSV or JSON export of a run.
func reportDownload(run runRow, what, format string) download {
	d := download{name: fmt.Sprintf("%s-%s.%s", run.ReconciliationID, what, format), contentType: "application/json"}
	if format == "csv" {
		d.contentType = "text/csv; charset=utf-8"
	}
	return d
}

// deadLetter is a dead-lettered item with its message.
type deadLetter struct {
	report.DeadLetter
	MessageID int64
}

type deadLetterData struct {
	Run     runRow
	Filters filters
	Groups  []queue.ReasonCount
	Total   capped
	Letters []deadLetter
	Next    string
}

// deadLetterChunk is how many dead letters a page reads from the queue at
// a time when the ledger's filters (account, amount) may drop some of them.
const deadLetterChunk = 1000

// loadDeadLetters returns the run's dead letters f selects, after the
// message f.After, at most limit (all when 0), in message order, each with
// its item and the transition that dead-lettered it. The queue's dead
// letters are walked along its dead-letter index, filtered by reason and
// provider there (the consumer gives queue and ledger the same reason), and
// their items are read by key and filtered by account and amount; a page
// whose items the ledger's filters drop reads the next chunk of dead
// letters until it is full.
func (h *Handler) loadDeadLetters(ctx context.Context, rd *reader, runID uuid.UUID, f filters, limit int) ([]deadLetter, error) {
	after, err := messageCursor(f.After)
	if err != nil {
		return nil, err
	}
	filtered := f.Account != "" || f.Min != nil || f.Max != nil
	chunk := limit
	if filtered || limit == 0 {
		chunk = max(limit, deadLetterChunk)
	}
	var out []deadLetter
	for {
		msgs, err := h.cfg.Queue.ListDeadLetters(ctx, rd, queue.DeadLetterPage{RunID: runID, After: after,
			Reason: f.Reason, Provider: f.provider(), Limit: chunk})
		if err != nil || len(msgs) == 0 {
			return out, err
		}
		ids := make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.TransactionID
		}
		items, err := ledger.DeadLetters(ctx, rd, ledger.DeadLetterFilter{RunID: runID, TransactionIDs: ids,
			Account: f.Account, MinAmount: f.Min, MaxAmount: f.Max})
		if err != nil {
			return nil, err
		}
		byID := make(map[string]ledger.DeadLetter, len(items))
		for _, it := range items {
			byID[it.TransactionID] = it
		}
		for _, m := range msgs {
			it, ok := byID[m.TransactionID]
			if !ok {
				continue
			}
			dl := deadLetter{DeadLetter: report.DeadLetterOf(it), MessageID: m.ID}
			dl.Reason = m.Reason
			if dl.Detail == "" {
				dl.Detail = m.LastError
			}
			out = append(out, dl)
			if limit > 0 && len(out) == limit {
				return out, nil
			}
		}
		if len(msgs) < chunk {
			return out, nil
		}
		after = msgs[len(msgs)-1].ID
	}
}

func messageCursor(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, badRequest("after=%q: want a message id", s)
	}
	return n, nil
}

// loadReasonGroups counts a run's dead letters by reason, reading at most
// limit+1 of them.
func (h *Handler) loadReasonGroups(ctx context.Context, rd *reader, runID uuid.UUID, limit int) ([]queue.ReasonCount, capped, error) {
	gs, err := h.cfg.Queue.DeadLetterReasons(ctx, rd, runID, limit)
	if err != nil {
		return nil, capped{}, err
	}
	var total int64
	for _, g := range gs {
		total += g.Count
	}
	return gs, capped{N: total, Cap: int64(limit)}, nil
}

// exportPage is how many dead letters an export reads per statement.
const exportPage = 5000

// exportDeadLetters writes the dead letters the filters select, in
// message id order, as a report of the run in the report command's CSV or
// JSON format, reading exportPage of them at a time by key.
func (h *Handler) exportDeadLetters(w http.ResponseWriter, r *http.Request, u User, id uuid.UUID, f filters) error {
	return h.exportReport(w, r, u, id, f.Format, "dead-letters", func(ctx context.Context, rd *reader, s *report.Stream) error {
		for {
			dls, err := h.loadDeadLetters(ctx, rd, id, f, exportPage)
			if err != nil {
				return err
			}
			for _, d := range dls {
				if err := s.DeadLetter(d.DeadLetter); err != nil {
					return err
				}
			}
			if len(dls) < exportPage {
				return nil
			}
			f.After = strconv.FormatInt(dls[len(dls)-1].MessageID, 10)
		}
	})
}

// deadLettersPage lists a run's dead letters grouped by reason; operators
// get the redrive form. format=csv or json exports the filtered list.
func (h *Handler) deadLettersPage(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	f, err := parseFilters(r.URL.Query())
	if err != nil {
		return err
	}
	f.Outcome, f.Field = "", ""
	if f.Format != "" {
		return h.exportDeadLetters(w, r, u, id, f)
	}
	d := deadLetterData{Filters: f}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		if d.Groups, d.Total, err = h.loadReasonGroups(r.Context(), rd, id, h.cfg.CountCap); err != nil {
			return err
		}
		d.Letters, err = h.loadDeadLetters(r.Context(), rd, id, f, h.cfg.PageSize+1)
		return err
	})
	if err != nil {
		return err
	}
	if len(d.Letters) > h.cfg.PageSize {
		d.Letters = d.Letters[:h.cfg.PageSize]
		d.Next = strconv.FormatInt(d.Letters[len(d.Letters)-1].MessageID, 10)
	}
	h.render(w, r, http.StatusOK, "deadletters", view{Title: "Dead letters of " + d.Run.ReconciliationID, User: &u, Data: d})
	return nil
}
