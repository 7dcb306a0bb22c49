package report

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
)

// Options select the run a report covers.
type Options struct {
	// Date is the business date. Required.
	Date payments.Date
	// Generation picks a generation of the date. Defaults to 0: the latest.
	Generation int
	// All adds every item of the run with its outcome and attempts.
	// Defaults to false.
	All bool
}

// Report is what one run found. Its JSON encoding (WriteJSON) is a stable
// format, identified by Format.
type Report struct {
	// Format is "reconcile-report/v1".
	Format string `json:"format"`
	Run    Run    `json:"run"`
	// Discrepancies has one entry per differing field of each mismatched
	// item, ordered by transaction id and field.
	Discrepancies []Discrepancy `json:"discrepancies"`
	// Missing lists the items the provider does not know (HTTP 404).
	Missing []Item `json:"missing"`
	// DeadLetters lists the items given up on, with the reason.
	DeadLetters []DeadLetter `json:"dead_letters"`
	// Unexpected lists the records the provider listed for the date that
	// the payment file lacks (list mode), with the provider's values.
	Unexpected []Unexpected `json:"unexpected"`
	// Items lists every item (only with Options.All; omitted otherwise).
	Items []Item `json:"items,omitempty"`
	// Providers breaks the run's items down by provider; omitted when they
	// name none (a night of one provider).
	Providers []ledger.ProviderTotal `json:"providers,omitempty"`
}

// FormatVersion identifies the JSON and CSV layouts documented here.
const FormatVersion = "reconcile-report/v1"

// Run describes the reported run and its totals.
type Run struct {
	RunID            uuid.UUID `json:"run_id"`
	ReconciliationID string    `json:"reconciliation_id"`
	BusinessDate     string    `json:"business_date"`
	Generation       int       `json:"generation"`
	Trigger          string    `json:"trigger"`
	TriggeredBy      string    `json:"triggered_by"`
	Source           string    `json:"source"`
	SourceSHA256     string    `json:"source_sha256"`
	TimeZone         string    `json:"time_zone"`
	Items            int       `json:"items"`
	Matched          int       `json:"matched"`
	Mismatched       int       `json:"mismatched"`
	Missing          int       `json:"missing"`
	DeadLettered     int       `json:"dead_lettered"`
	// Unexpected counts the records the provider has and the file lacks;
	// Items includes them.
	Unexpected    int        `json:"unexpected"`
	Open          int        `json:"open"`
	ProviderCalls int64      `json:"provider_calls"`
	Throttles     int64      `json:"throttles"`
	CreatedAt     time.Time  `json:"created_at"`
	CompletedAt   *time.Time `json:"completed_at"`
}

// Discrepancy is one field on which the provider disagrees with the source.
type Discrepancy struct {
	TransactionID string `json:"transaction_id"`
	AccountID     string `json:"account_id"`
	// Field is amount_minor, currency or status.
	Field string `json:"field"`
	// Expected is the source's value, as text.
	Expected string `json:"expected"`
	// Provider is the provider's value, as text.
	Provider string `json:"provider"`
	// Attempts is the number of provider calls made for the item.
	Attempts int `json:"attempts"`
	// CheckedAt is when the item was found mismatched.
	CheckedAt *time.Time `json:"checked_at"`
	// AmountMinor, Currency and Status are the expected record, from the
	// source, so the money at stake is on the row.
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
	// ProviderAmountMinor, ProviderCurrency and ProviderStatus are the
	// provider's record.
	ProviderAmountMinor int64  `json:"provider_amount_minor"`
	ProviderCurrency    string `json:"provider_currency"`
	ProviderStatus      string `json:"provider_status"`
}

// Item is one payment of the run with its outcome.
type Item struct {
	TransactionID string `json:"transaction_id"`
	AccountID     string `json:"account_id"`
	AmountMinor   int64  `json:"amount_minor"`
	Currency      string `json:"currency"`
	Status        string `json:"status"`
	// Outcome is the item's state: matched, mismatched, missing,
	// dead_lettered, or queued / retry_scheduled while open.
	Outcome   string `json:"outcome"`
	Attempts  int    `json:"attempts"`
	Throttles int    `json:"throttles"`
	// LastHTTPStatus is the status of the latest provider call; null for
	// none or a network error.
	LastHTTPStatus *int `json:"last_http_status"`
	// LastReason is the reason of the latest transition.
	LastReason string `json:"last_reason"`
	// CheckedAt is when the item reached its terminal state; null while
	// open.
	CheckedAt *time.Time `json:"checked_at"`
}

// DeadLetter is one item given up on.
type DeadLetter struct {
	TransactionID string `json:"transaction_id"`
	AccountID     string `json:"account_id"`
	Attempts      int    `json:"attempts"`
	Throttles     int    `json:"throttles"`
	// Reason is max_attempts, throttle_deadline, poison, http_400, ...
	Reason string `json:"reason"`
	// HTTPStatus is the status of the last call; null for network errors.
	HTTPStatus *int `json:"http_status"`
	// Detail is the error text or body excerpt recorded with it.
	Detail         string     `json:"detail"`
	DeadLetteredAt *time.Time `json:"dead_lettered_at"`
	// AmountMinor, Currency and Status are the expected record, from the
	// source: the money nothing is known about.
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
}

// Unexpected is a record the provider listed for the run's date that the
// payment file lacks: a charge nobody booked.
type Unexpected struct {
	TransactionID       string `json:"transaction_id"`
	ProviderAmountMinor int64  `json:"provider_amount_minor"`
	ProviderCurrency    string `json:"provider_currency"`
	ProviderStatus      string `json:"provider_status"`
	// Provider names the provider that listed it; empty: the default.
	Provider string `json:"provider"`
	// ListedAt is when it was recorded.
	ListedAt *time.Time `json:"listed_at"`
}

// Load reads the report of the run opts selects; ErrNoRun when the date or
// generation has none.
func Load(ctx context.Context, db DB, opts Options) (Report, error) {
	if opts.Date.IsZero() {
		return Report{}, errors.New("load report: no business date")
	}
	rep := Report{Format: FormatVersion, Discrepancies: []Discrepancy{}, Missing: []Item{}, DeadLetters: []DeadLetter{},
		Unexpected: []Unexpected{}}
	r := &rep.Run
	err := db.QueryRow(ctx, `
		SELECT s.run_id, s.reconciliation_id, s.business_date::text, s.generation, s.trigger, s.triggered_by, s.source,
		       r.source_sha256, r.time_zone, s.item_count, s.matched, s.mismatched, s.missing, s.dead_lettered,
		       s.unexpected, s.open_items, s.provider_calls, s.throttles, s.created_at, s.completed_at
		  FROM run_summary s JOIN runs r USING (run_id)
		 WHERE s.business_date = $1 AND ($2 = 0 OR s.generation = $2)
		 ORDER BY s.generation DESC LIMIT 1`, opts.Date.String(), opts.Generation).
		Scan(&r.RunID, &r.ReconciliationID, &r.BusinessDate, &r.Generation, &r.Trigger, &r.TriggeredBy, &r.Source,
			&r.SourceSHA256, &r.TimeZone, &r.Items, &r.Matched, &r.Mismatched, &r.Missing, &r.DeadLettered,
			&r.Unexpected, &r.Open, &r.ProviderCalls, &r.Throttles, &r.CreatedAt, &r.CompletedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		if opts.Generation > 0 {
			return Report{}, fmt.Errorf("report %s generation %d: %w", opts.Date, opts.Generation, ErrNoRun)
		}
		return Report{}, fmt.Errorf("report %s: %w", opts.Date, ErrNoRun)
	}
	if err != nil {
		return Report{}, fmt.Errorf("read run of %s: %w", opts.Date, err)
	}

	rows, err := db.Query(ctx, `
		SELECT d.transaction_id, d.account_id, d.field, d.expected, d.provider, i.attempts, d.checked_at,
		       i.amount_minor, i.currency, i.status, coalesce(i.provider_amount_minor, 0),
		       coalesce(i.provider_currency, ''), coalesce(i.provider_status, '')
		  FROM discrepancies d JOIN items i USING (run_id, transaction_id)
		 WHERE d.run_id = $1 ORDER BY d.transaction_id, d.field`, r.RunID)
	if err != nil {
		return Report{}, fmt.Errorf("read discrepancies of %s: %w", r.ReconciliationID, err)
	}
	if rep.Discrepancies, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Discrepancy]); err != nil {
		return Report{}, fmt.Errorf("read discrepancies of %s: %w", r.ReconciliationID, err)
	}
	if rep.Missing, err = loadItems(ctx, db, r.RunID, "missing"); err != nil {
		return Report{}, err
	}
	rows, err = db.Query(ctx, `
		SELECT d.transaction_id, d.account_id, d.attempts, d.throttles, coalesce(d.reason, ''), d.http_status,
		       coalesce(d.details ->> 'detail', d.details ->> 'error', ''), d.dead_lettered_at,
		       i.amount_minor, i.currency, i.status
		  FROM dead_lettered_items d JOIN items i USING (run_id, transaction_id)
		 WHERE d.run_id = $1 ORDER BY d.transaction_id`, r.RunID)
	if err != nil {
		return Report{}, fmt.Errorf("read dead letters of %s: %w", r.ReconciliationID, err)
	}
	if rep.DeadLetters, err = pgx.CollectRows(rows, pgx.RowToStructByPos[DeadLetter]); err != nil {
		return Report{}, fmt.Errorf("read dead letters of %s: %w", r.ReconciliationID, err)
	}
	rows, err = db.Query(ctx, `
		SELECT transaction_id, coalesce(provider_amount_minor, 0), coalesce(provider_currency, ''),
		       coalesce(provider_status, ''), provider, terminal_at
		  FROM items WHERE run_id = $1 AND state = 'unexpected' ORDER BY transaction_id`, r.RunID)
	if err != nil {
		return Report{}, fmt.Errorf("read unexpected records of %s: %w", r.ReconciliationID, err)
	}
	if rep.Unexpected, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Unexpected]); err != nil {
		return Report{}, fmt.Errorf("read unexpected records of %s: %w", r.ReconciliationID, err)
	}
	if opts.All {
		if rep.Items, err = loadItems(ctx, db, r.RunID, ""); err != nil {
			return Report{}, err
		}
	}
	if rep.Providers, err = providerTotals(ctx, db, r.RunID); err != nil {
		return Report{}, err
	}
	rep.Discrepancies = nonNil(rep.Discrepancies)
	rep.Missing = nonNil(rep.Missing)
	rep.DeadLetters = nonNil(rep.DeadLetters)
	rep.Unexpected = nonNil(rep.Unexpected)
	return rep, nil
}

// loadItems reads the run's items in state (all of them for "").
func loadItems(ctx context.Context, db DB, runID uuid.UUID, state string) ([]Item, error) {
	rows, err := db.Query(ctx, `
		SELECT transaction_id, account_id, amount_minor, currency, status, state, attempts, throttles,
		       last_http_status, coalesce(last_reason, ''), terminal_at
		  FROM items WHERE run_id = $1 AND ($2 = '' OR state = $2) ORDER BY transaction_id`, runID, state)
	if err != nil {
		return nil, fmt.Errorf("read items of run %s: %w", runID, err)
	}
	items, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Item])
	if err != nil {
		return nil, fmt.Errorf("read items of run %s: %w", runID, err)
	}
	return nonNil(items), nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// WriteJSON writes the report as one indented JSON object:
//
//	{"format": "reconcile-report/v1", "run": {...}, "discrepancies": [...],
//	 "missing": [...], "dead_letters": [...], "unexpected": [...], "items": [...]}
//
// with the field names of the struct tags of Run, Discrepancy, Item and
// DeadLetter. Instants are RFC 3339 in UTC; absent values are null; "items"
// is present only with Options.All. Fields may be added in v1; none are
// renamed or removed.
func (rep Report) WriteJSON(w io.Writer) error {
	utc := rep
	utc.Run.CreatedAt = rep.Run.CreatedAt.UTC()
	utc.Run.CompletedAt = utcPtr(rep.Run.CompletedAt)
	utc.Discrepancies = make([]Discrepancy, len(rep.Discrepancies))
	for i, d := range rep.Discrepancies {
		d.CheckedAt = utcPtr(d.CheckedAt)
		utc.Discrepancies[i] = d
	}
	utc.Missing = utcItems(rep.Missing)
	utc.Unexpected = make([]Unexpected, len(rep.Unexpected))
	for i, u := range rep.Unexpected {
		u.ListedAt = utcPtr(u.ListedAt)
		utc.Unexpected[i] = u
	}
	utc.Items = utcItems(rep.Items)
	utc.DeadLetters = make([]DeadLetter, len(rep.DeadLetters))
	for i, d := range rep.DeadLetters {
		d.DeadLetteredAt = utcPtr(d.DeadLetteredAt)
		utc.DeadLetters[i] = d
	}
	return writeJSON(w, utc)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func utcItems(items []Item) []Item {
	if items == nil {
		return nil
	}
	out := make([]Item, len(items))
	for i, it := range items {
		it.CheckedAt = utcPtr(it.CheckedAt)
		out[i] = it
	}
	return out
}

// CSVHeader is the header row of WriteCSV, in order:
//
//   - record: discrepancy (one row per differing field of a mismatched
//     item), missing, dead_letter, unexpected (a record the provider listed
//     that the file lacks: its expected cells are empty, its provider cells
//     hold the provider's values), or item (every item, only with --all).
//     Rows come in that order, each kind sorted by transaction_id (then
//     field).
//   - reconciliation_id, business_date (YYYY-MM-DD), generation: the run.
//   - transaction_id, account_id: the payment.
//   - amount_minor, currency, status: the expected record, from the source.
//   - outcome: the item's state (matched, mismatched, missing,
//     dead_lettered; queued or retry_scheduled while open).
//   - field, expected, provider: for discrepancy rows, the differing field
//     and both values as text; empty otherwise.
//   - reason: dead_letter rows: why (max_attempts, throttle_deadline, poison,
//     http_400, ...); other rows: the latest transition's reason.
//   - http_status: the last provider call's status (missing, dead_letter and
//     item rows); empty for none or a network error.
//   - attempts: provider calls made for the item.
//   - throttles: how many of them were answered 429 (missing, dead_letter and
//     item rows).
//   - detail: dead_letter rows: the recorded error text or body excerpt, on
//     one line (runs of white space, newlines included, become one space).
//   - at: RFC 3339 UTC instant the item reached its terminal state (for
//     dead_letter rows, when it was dead-lettered); empty while open.
//
// The file is UTF-8 CSV as RFC 4180 describes it (comma separated, fields
// with commas, quotes or newlines double-quoted), except that lines end in
// \n. Columns may be appended in v1; none are renamed, removed or
// reordered.
//   - provider_amount_minor, provider_currency, provider_status: for
//     discrepancy rows, the provider's record; empty otherwise.
var CSVHeader = []string{"record", "reconciliation_id", "business_date", "generation", "transaction_id", "account_id",
	"amount_minor", "currency", "status", "outcome", "field", "expected", "provider", "reason", "http_status",
	"attempts", "throttles", "detail", "at", "provider_amount_minor", "provider_currency", "provider_status"}

// WriteCSV writes the report in the CSV layout documented at CSVHeader.
func (rep Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	run := []string{rep.Run.ReconciliationID, rep.Run.BusinessDate, strconv.Itoa(rep.Run.Generation)}
	write := func(kind string, rest ...string) {
		_ = cw.Write(append(append([]string{kind}, run...), rest...))
	}
	_ = cw.Write(CSVHeader)
	for _, d := range rep.Discrepancies {
		write("discrepancy", d.TransactionID, d.AccountID, strconv.FormatInt(d.AmountMinor, 10), d.Currency, d.Status,
			"mismatched", d.Field, d.Expected, d.Provider, "mismatched", "", strconv.Itoa(d.Attempts), "", "",
			csvTime(d.CheckedAt), strconv.FormatInt(d.ProviderAmountMinor, 10), d.ProviderCurrency, d.ProviderStatus)
	}
	for _, it := range rep.Missing {
		write("missing", itemCells(it)...)
	}
	for _, d := range rep.DeadLetters {
		write("dead_letter", d.TransactionID, d.AccountID, strconv.FormatInt(d.AmountMinor, 10), d.Currency, d.Status,
			"dead_lettered", "", "", "", d.Reason, httpStatus(d.HTTPStatus), strconv.Itoa(d.Attempts),
			strconv.Itoa(d.Throttles), oneLine(d.Detail), csvTime(d.DeadLetteredAt), "", "", "")
	}
	for _, u := range rep.Unexpected {
		write("unexpected", u.TransactionID, "", "", "", "", "unexpected", "", "", "", "unexpected", "", "0", "0", "",
			csvTime(u.ListedAt), strconv.FormatInt(u.ProviderAmountMinor, 10), u.ProviderCurrency, u.ProviderStatus)
	}
	for _, it := range rep.Items {
		write("item", itemCells(it)...)
	}
	cw.Flush()
	return cw.Error()
}

func itemCells(it Item) []string {
	return []string{it.TransactionID, it.AccountID, strconv.FormatInt(it.AmountMinor, 10), it.Currency, it.Status,
		it.Outcome, "", "", "", it.LastReason, httpStatus(it.LastHTTPStatus), strconv.Itoa(it.Attempts),
		strconv.Itoa(it.Throttles), "", csvTime(it.CheckedAt), "", "", ""}
}

// oneLine puts an error text or body excerpt on one line: every run of
// white space (newlines of a pretty-printed body included) becomes one
// space, so a CSV field or a table cell holds no raw newline and no quoted
// escapes.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func httpStatus(s *int) string {
	if s == nil {
		return ""
	}
	return strconv.Itoa(*s)
}

func csvTime(t *time.Time) string {
	if t == nil {
		return ""
	}
	return fmtTime(*t)
}

// WriteTable writes the report for a terminal.
func (rep Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriter(w)
	r := rep.Run
	fmt.Fprintf(bw, "run %s (%s, generation %d, %s by %s)\n", r.ReconciliationID, r.BusinessDate, r.Generation, r.Trigger, r.TriggeredBy)
	fmt.Fprintf(bw, "source %s (sha256 %s, time zone %s)\n", r.Source, r.SourceSHA256, r.TimeZone)
	fmt.Fprintf(bw, "%d items: %d matched, %d mismatched, %d missing, %d dead-lettered, %d unexpected, %d open; %d provider calls, %d throttled\n",
		r.Items, r.Matched, r.Mismatched, r.Missing, r.DeadLettered, r.Unexpected, r.Open, r.ProviderCalls, r.Throttles)
	writeProviderTotals(bw, "", rep.Providers)
	fmt.Fprintf(bw, "created %s, completed %s\n", fmtTime(r.CreatedAt), fmtTimePtr(r.CompletedAt))

	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	section := func(title string, n int, header string) bool {
		fmt.Fprintf(tw, "\n%s (%d)\n", title, n)
		if n == 0 {
			return false
		}
		fmt.Fprintln(tw, header)
		return true
	}
	if section("discrepancies", len(rep.Discrepancies), "TRANSACTION\tACCOUNT\tAMOUNT_MINOR\tCURRENCY\tSTATUS\tFIELD\tEXPECTED\tPROVIDER") {
		for _, d := range rep.Discrepancies {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", cell(d.TransactionID), cell(d.AccountID), d.AmountMinor,
				d.Currency, d.Status, d.Field, cell(d.Expected), cell(d.Provider))
		}
	}
	if section("missing at the provider", len(rep.Missing), "TRANSACTION\tACCOUNT\tAMOUNT_MINOR\tCURRENCY\tSTATUS\tATTEMPTS") {
		for _, it := range rep.Missing {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", cell(it.TransactionID), cell(it.AccountID), it.AmountMinor, it.Currency, it.Status, it.Attempts)
		}
	}
	if section("dead letters", len(rep.DeadLetters), "TRANSACTION\tACCOUNT\tAMOUNT_MINOR\tCURRENCY\tSTATUS\tREASON\tHTTP\tATTEMPTS\tTHROTTLES\tDETAIL") {
		for _, d := range rep.DeadLetters {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", cell(d.TransactionID), cell(d.AccountID),
				d.AmountMinor, d.Currency, d.Status, d.Reason, cell(httpStatus(d.HTTPStatus)), d.Attempts, d.Throttles,
				cell(oneLine(d.Detail)))
		}
	}
	if section("unexpected: at the provider, not in the file", len(rep.Unexpected), "TRANSACTION\tPROVIDER_AMOUNT_MINOR\tPROVIDER_CURRENCY\tPROVIDER_STATUS") {
		for _, u := range rep.Unexpected {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", cell(u.TransactionID), u.ProviderAmountMinor, u.ProviderCurrency, u.ProviderStatus)
		}
	}
	if rep.Items != nil && section("items", len(rep.Items), "TRANSACTION\tACCOUNT\tAMOUNT_MINOR\tCURRENCY\tSTATUS\tOUTCOME\tATTEMPTS\tTHROTTLES\tLAST_HTTP\tLAST_REASON") {
		for _, it := range rep.Items {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", cell(it.TransactionID), cell(it.AccountID), it.AmountMinor,
				it.Currency, it.Status, it.Outcome, it.Attempts, it.Throttles, cell(httpStatus(it.LastHTTPStatus)), cell(it.LastReason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// cell makes a value safe for one table cell: empty becomes "-", and tabs,
// newlines and other control characters (ids may hold anything printable,
// error texts anything) are quoted so the columns stay aligned.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return strconv.Quote(s)
		}
	}
	return s
}
