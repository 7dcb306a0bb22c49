package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/ledger"
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

func (f filters) states() []string {
	switch f.Outcome {
	case "missing":
		return []string{string(ledger.Missing)}
	case "unexpected":
		return []string{string(ledger.Unexpected)}
	case "all":
		return []string{string(ledger.Mismatched), string(ledger.Missing), string(ledger.Unexpected)}
	}
	return []string{string(ledger.Mismatched)}
}

// foundItem is a mismatched or missing item of a discrepancy page.
type foundItem struct {
	report.Item
	Differences []ledger.Difference
	// The provider's record, when it answered one.
	ProviderAmountMinor int64
	ProviderCurrency    string
	ProviderStatus      string
}

type discrepancyData struct {
	Run     runRow
	Filters filters
	Items   []foundItem
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
// (all when 0). It returns the items and the window's size and last id.
func findItems(ctx context.Context, rd *reader, runID uuid.UUID, f filters, window, page int) ([]foundItem, int64, string, error) {
	var windowArg, pageArg *int
	if window > 0 {
		windowArg = &window
	}
	if page > 0 {
		pageArg = new(page + 1)
	}
	rows, err := rd.Query(ctx, `
		WITH w AS MATERIALIZED (
		    SELECT transaction_id, account_id, provider, amount_minor, currency, status, state, attempts, throttles,
		           last_http_status, last_reason, terminal_at, differences,
		           provider_amount_minor, provider_currency, provider_status
		      FROM items WHERE run_id = $1 AND transaction_id > $2
		     ORDER BY transaction_id LIMIT $3),
		edge AS (SELECT max(transaction_id) AS last, count(*) AS n FROM w)
		SELECT edge.last, edge.n, h.transaction_id, h.account_id, h.amount_minor, h.currency, h.status, h.state,
		       h.attempts, h.throttles, h.last_http_status, h.last_reason, h.terminal_at, h.differences,
		       h.provider_amount_minor, h.provider_currency, h.provider_status
		  FROM edge LEFT JOIN LATERAL (
		       SELECT transaction_id, account_id, amount_minor, currency, status, state, attempts, throttles,
		              last_http_status, coalesce(last_reason, '') AS last_reason, terminal_at,
		              coalesce(differences::text, '[]') AS differences, coalesce(provider_amount_minor, 0) AS provider_amount_minor,
		              coalesce(provider_currency, '') AS provider_currency, coalesce(provider_status, '') AS provider_status
		         FROM w
		        WHERE state = ANY($4)
		          AND ($5 = '' OR account_id = $5)
		          AND ($6::bigint IS NULL OR amount_minor >= $6)
		          AND ($7::bigint IS NULL OR amount_minor <= $7)
		          AND ($8 = '' OR differences @> jsonb_build_array(jsonb_build_object('field', $8::text)))
		          AND ($10::text IS NULL OR provider = $10)
		        ORDER BY transaction_id LIMIT $9) h ON true`,
		runID, f.After, windowArg, f.states(), f.Account, f.Min, f.Max, f.Field, pageArg, f.provider())
	if err != nil {
		return nil, 0, "", fmt.Errorf("find items of run %s: %w", runID, err)
	}
	var (
		last  *string
		n     int64
		items []foundItem
	)
	for rows.Next() {
		var it foundItem
		var id, account, currency, status, state, reason, diffs *string
		var amount, provAmount *int64
		var attempts, throttles *int
		var provCurrency, provStatus *string
		if err := rows.Scan(&last, &n, &id, &account, &amount, &currency, &status, &state, &attempts, &throttles,
			&it.LastHTTPStatus, &reason, &it.CheckedAt, &diffs, &provAmount, &provCurrency, &provStatus); err != nil {
			rows.Close()
			return nil, 0, "", fmt.Errorf("find items of run %s: %w", runID, err)
		}
		if id == nil {
			continue // an empty window or no match
		}
		it.TransactionID, it.AccountID, it.AmountMinor, it.Currency, it.Status = *id, *account, *amount, *currency, *status
		it.Outcome, it.Attempts, it.Throttles, it.LastReason = *state, *attempts, *throttles, *reason
		it.ProviderAmountMinor, it.ProviderCurrency, it.ProviderStatus = *provAmount, *provCurrency, *provStatus
		if err := json.Unmarshal([]byte(*diffs), &it.Differences); err != nil {
			it.Differences = nil // not an array: the discrepancies view ignores it too
		}
		items = append(items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, "", fmt.Errorf("find items of run %s: %w", runID, err)
	}
	lastID := ""
	if last != nil {
		lastID = *last
	}
	return items, n, lastID, nil
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
		return h.exportItems(w, r, id, f)
	}
	d := discrepancyData{Filters: f, Window: h.cfg.Window}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		d.Items, d.Scanned, d.ScannedTo, err = findItems(r.Context(), rd, id, f, h.cfg.Window, h.cfg.PageSize)
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
// report of the run in the report command's CSV or JSON format.
func (h *Handler) exportItems(w http.ResponseWriter, r *http.Request, id uuid.UUID, f filters) error {
	var rep report.Report
	err := h.read(r.Context(), h.cfg.ExportTimeout, func(rd *reader) error {
		run, err := loadRun(r.Context(), rd, id)
		if err != nil {
			return err
		}
		items, _, _, err := findItems(r.Context(), rd, id, f, 0, 0)
		if err != nil {
			return err
		}
		rep = newReport(run)
		for _, it := range items {
			if it.Outcome == string(ledger.Unexpected) {
				rep.Unexpected = append(rep.Unexpected, report.Unexpected{TransactionID: it.TransactionID,
					ProviderAmountMinor: it.ProviderAmountMinor, ProviderCurrency: it.ProviderCurrency,
					ProviderStatus: it.ProviderStatus, ListedAt: it.CheckedAt})
				continue
			}
			if it.Outcome == string(ledger.Missing) {
				rep.Missing = append(rep.Missing, it.Item)
				continue
			}
			for _, df := range it.Differences {
				if f.Field != "" && df.Field != f.Field {
					continue
				}
				rep.Discrepancies = append(rep.Discrepancies, report.Discrepancy{TransactionID: it.TransactionID,
					AccountID: it.AccountID, Field: df.Field, Expected: df.Expected, Provider: df.Provider,
					Attempts: it.Attempts, CheckedAt: it.CheckedAt,
					AmountMinor: it.AmountMinor, Currency: it.Currency, Status: it.Status,
					ProviderAmountMinor: it.ProviderAmountMinor, ProviderCurrency: it.ProviderCurrency,
					ProviderStatus: it.ProviderStatus})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return writeReport(w, rep, f.Format, "discrepancies")
}

// newReport is an empty report of run in report's v1 format.
func newReport(run runRow) report.Report {
	return report.Report{Format: report.FormatVersion, Run: report.Run{RunID: run.RunID,
		ReconciliationID: run.ReconciliationID, BusinessDate: run.BusinessDate, Generation: run.Generation,
		Trigger: run.Trigger, TriggeredBy: run.TriggeredBy, Source: run.Source, SourceSHA256: run.SourceSHA256,
		TimeZone: run.TimeZone, Items: int(run.Items), Matched: int(run.Matched), Mismatched: int(run.Mismatched),
		Missing: int(run.Missing), DeadLettered: int(run.DeadLettered), Unexpected: int(run.Unexpected), Open: int(run.Open),
		ProviderCalls: run.Calls, Throttles: run.Throttles, CreatedAt: run.CreatedAt, CompletedAt: run.CompletedAt},
		Discrepancies: []report.Discrepancy{}, Missing: []report.Item{}, DeadLetters: []report.DeadLetter{},
		Unexpected: []report.Unexpected{}}
}

// writeReport sends rep as a CSV or JSON download named after its run.
func writeReport(w http.ResponseWriter, rep report.Report, format, what string) error {
	name := fmt.Sprintf("%s-%s.%s", rep.Run.ReconciliationID, what, format)
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	if format == "csv" {
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		return rep.WriteCSV(w)
	}
	w.Header().Set("Content-Type", "application/json")
	return rep.WriteJSON(w)
}

// deadLetter is a dead-lettered item with its message.
type deadLetter struct {
	report.DeadLetter
	MessageID int64
}

// reasonGroup counts the dead letters of one reason.
type reasonGroup struct {
	Reason string
	Count  int64
}

type deadLetterData struct {
	Run     runRow
	Filters filters
	Groups  []reasonGroup
	Total   capped
	Letters []deadLetter
	Next    string
}

// deadLetterQuery selects the dead letters of run $1 after message $2,
// filtered by reason $3, account $4, amount range $5..$6 and provider $8
// (the message's copy of the item's), with the
// detail of their dead-lettering transition. The reason is the message's
// (the consumer gives queue and ledger the same word), so the walk along
// the queue's dead-letter index filters it without a join; the item and its
// last transition are looked up by key for each row the LIMIT still wants.
const deadLetterQuery = `
	SELECT m.message_id, m.transaction_id, i.account_id, i.amount_minor, i.currency, i.status, i.attempts, i.throttles,
	       coalesce(m.reason, ''), t.http_status,
	       coalesce(t.details ->> 'detail', t.details ->> 'error', m.last_error, ''), t.at
	  FROM queue_messages m
	 CROSS JOIN LATERAL (SELECT account_id, amount_minor, currency, status, attempts, throttles, history_len FROM items
	                      WHERE run_id = m.run_id AND transaction_id = m.transaction_id) i
	  LEFT JOIN LATERAL (SELECT http_status, details, at FROM transitions
	                      WHERE run_id = m.run_id AND transaction_id = m.transaction_id AND seq = i.history_len) t ON true
	 WHERE m.state = 'dead' AND m.run_id = $1 AND m.message_id > $2
	   AND ($3 = '' OR coalesce(m.reason, '') = $3)
	   AND ($4 = '' OR i.account_id = $4)
	   AND ($5::bigint IS NULL OR i.amount_minor >= $5)
	   AND ($6::bigint IS NULL OR i.amount_minor <= $6)
	   AND ($8::text IS NULL OR m.provider = $8)
	 ORDER BY m.message_id`

func scanDeadLetter(row pgx.CollectableRow) (deadLetter, error) {
	var d deadLetter
	err := row.Scan(&d.MessageID, &d.TransactionID, &d.AccountID, &d.AmountMinor, &d.Currency, &d.Status, &d.Attempts,
		&d.Throttles, &d.Reason, &d.HTTPStatus, &d.Detail, &d.DeadLetteredAt)
	return d, err
}

func loadDeadLetters(ctx context.Context, rd *reader, runID uuid.UUID, f filters, limit int) ([]deadLetter, error) {
	after, err := messageCursor(f.After)
	if err != nil {
		return nil, err
	}
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := rd.Query(ctx, deadLetterQuery+` LIMIT $7`, runID, after, f.Reason, f.Account, f.Min, f.Max, lim, f.provider())
	if err != nil {
		return nil, fmt.Errorf("read dead letters of run %s: %w", runID, err)
	}
	dls, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("read dead letters of run %s: %w", runID, err)
	}
	return dls, nil
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

// loadReasonGroups counts a run's dead letters by reason along the queue's
// dead-letter index, reading at most limit+1 of them.
func loadReasonGroups(ctx context.Context, rd *reader, runID uuid.UUID, limit int) ([]reasonGroup, capped, error) {
	rows, err := rd.Query(ctx, `
		SELECT coalesce(reason, ''), count(*)
		  FROM (SELECT reason FROM queue_messages WHERE state = 'dead' AND run_id = $1 LIMIT $2) m
		 GROUP BY 1 ORDER BY 2 DESC, 1`, runID, limit+1)
	if err != nil {
		return nil, capped{}, fmt.Errorf("group dead letters of run %s: %w", runID, err)
	}
	gs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reasonGroup])
	if err != nil {
		return nil, capped{}, fmt.Errorf("group dead letters of run %s: %w", runID, err)
	}
	var total int64
	for _, g := range gs {
		total += g.Count
	}
	return gs, capped{N: total, Cap: int64(limit)}, nil
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
		var rep report.Report
		err := h.read(r.Context(), h.cfg.ExportTimeout, func(rd *reader) error {
			run, err := loadRun(r.Context(), rd, id)
			if err != nil {
				return err
			}
			dls, err := loadDeadLetters(r.Context(), rd, id, f, 0)
			rep = newReport(run)
			for _, d := range dls {
				rep.DeadLetters = append(rep.DeadLetters, d.DeadLetter)
			}
			return err
		})
		if err != nil {
			return err
		}
		return writeReport(w, rep, f.Format, "dead-letters")
	}
	d := deadLetterData{Filters: f}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		if d.Groups, d.Total, err = loadReasonGroups(r.Context(), rd, id, h.cfg.CountCap); err != nil {
			return err
		}
		d.Letters, err = loadDeadLetters(r.Context(), rd, id, f, h.cfg.PageSize+1)
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
