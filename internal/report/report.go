package report

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/human"
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
	// Cancelled counts the items withdrawn before they were checked;
	// CancelledAt, CancelledBy and CancelReason say when, by whom and why
	// the run was withdrawn (null and empty if it never was).
	Cancelled    int        `json:"cancelled"`
	CancelledAt  *time.Time `json:"cancelled_at"`
	CancelledBy  string     `json:"cancelled_by"`
	CancelReason string     `json:"cancel_reason"`
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
// generation has none. It holds the whole report in memory: Write streams
// one instead.
func Load(ctx context.Context, db DB, opts Options) (Report, error) {
	s, err := findRun(ctx, db, opts)
	if err != nil {
		return Report{}, err
	}
	rep := New(s)
	c := (*collector)(&rep)
	if err := readRows(ctx, db, s.RunID, opts.All, rowsTo{c.discrepancy, c.missing, c.deadLetter, c.unexpected, c.item}); err != nil {
		return Report{}, err
	}
	if rep.Providers, err = providerTotals(ctx, db, s.RunID); err != nil {
		return Report{}, err
	}
	return rep, nil
}

// Write streams the report of the run opts selects to w in format (csv or
// json, as WriteCSV and WriteJSON write them), reading its rows as they are
// written: a run of any size in bounded memory. ErrNoRun when the date or
// generation has none; then nothing is written.
func Write(ctx context.Context, db DB, opts Options, format string, w io.Writer) error {
	run, err := findRun(ctx, db, opts)
	if err != nil {
		return err
	}
	s, err := NewStream(w, format, New(run).Run)
	if err != nil {
		return err
	}
	if err := readRows(ctx, db, run.RunID, opts.All, rowsTo{s.Discrepancy, s.Missing, s.DeadLetter, s.Unexpected, s.Item}); err != nil {
		return err
	}
	providers, err := providerTotals(ctx, db, run.RunID)
	if err != nil {
		return err
	}
	return s.Close(providers)
}

// collector gathers a report's rows in memory.
type collector Report

func (c *collector) discrepancy(d Discrepancy) error {
	c.Discrepancies = append(c.Discrepancies, d)
	return nil
}

func (c *collector) missing(it Item) error {
	c.Missing = append(c.Missing, it)
	return nil
}

func (c *collector) deadLetter(d DeadLetter) error {
	c.DeadLetters = append(c.DeadLetters, d)
	return nil
}

func (c *collector) unexpected(u Unexpected) error {
	c.Unexpected = append(c.Unexpected, u)
	return nil
}

func (c *collector) item(it Item) error {
	c.Items = append(c.Items, it)
	return nil
}

// rowsTo receives a report's rows, each kind in the format's order.
type rowsTo struct {
	discrepancy func(Discrepancy) error
	missing     func(Item) error
	deadLetter  func(DeadLetter) error
	unexpected  func(Unexpected) error
	item        func(Item) error
}

// findRun reads the summary of the run of a report, from its counters.
func findRun(ctx context.Context, db DB, opts Options) (ledger.Summary, error) {
	if opts.Date.IsZero() {
		return ledger.Summary{}, errors.New("load report: no business date")
	}
	s, err := ledger.FindSummary(ctx, db, ledger.RunFilter{Date: opts.Date, Generation: opts.Generation, NewestFirst: true})
	if errors.Is(err, ledger.ErrNotFound) {
		if opts.Generation > 0 {
			return ledger.Summary{}, fmt.Errorf("report %s generation %d: %w", opts.Date, opts.Generation, ErrNoRun)
		}
		return ledger.Summary{}, fmt.Errorf("report %s: %w", opts.Date, ErrNoRun)
	}
	if err != nil {
		return ledger.Summary{}, fmt.Errorf("read run of %s: %w", opts.Date, err)
	}
	return s, nil
}

// readRows reads the rows of a run's report into to, one at a time, in the
// format's order: discrepancies, missing items, dead letters, unexpected
// records, and with all every item. Each kind is one read of the run's items, streamed.
func readRows(ctx context.Context, db DB, runID uuid.UUID, all bool, to rowsTo) error {
	err := ledger.EachItemOf(ctx, db, runID, func(it ledger.Item) error {
		for _, d := range DiscrepanciesOf(it, "") {
			if err := to.discrepancy(d); err != nil {
				return err
			}
		}
		return nil
	}, ledger.Mismatched)
	if err != nil {
		return err
	}
	if err := ledger.EachItemOf(ctx, db, runID, func(it ledger.Item) error { return to.missing(ItemOf(it)) }, ledger.Missing); err != nil {
		return err
	}
	err = ledger.EachDeadLetter(ctx, db, ledger.DeadLetterFilter{RunID: runID},
		func(d ledger.DeadLetter) error { return to.deadLetter(DeadLetterOf(d)) })
	if err != nil {
		return err
	}
	err = ledger.EachItemOf(ctx, db, runID, func(it ledger.Item) error { return to.unexpected(UnexpectedOf(it)) }, ledger.Unexpected)
	if err != nil {
		return err
	}
	if all {
		return ledger.EachItemOf(ctx, db, runID, func(it ledger.Item) error { return to.item(ItemOf(it)) })
	}
	return nil
}

// New returns the report of a run with its totals and no item yet, in
// format v1: the caller adds the items it selected.
func New(s ledger.Summary) Report {
	return Report{Format: FormatVersion, Run: Run{RunID: s.RunID, ReconciliationID: s.ReconciliationID,
		BusinessDate: s.BusinessDate.String(), Generation: s.Generation, Trigger: s.Trigger, TriggeredBy: s.TriggeredBy,
		Source: s.Source, SourceSHA256: s.SourceSHA256, TimeZone: s.TimeZone, Items: int(s.Items),
		Matched: int(s.Matched), Mismatched: int(s.Mismatched), Missing: int(s.Missing),
		DeadLettered: int(s.DeadLettered), Unexpected: int(s.Unexpected), Open: int(s.Open), ProviderCalls: s.ProviderCalls,
		Throttles: s.Throttles, CreatedAt: s.CreatedAt, CompletedAt: s.CompletedAt, Cancelled: int(s.Cancelled),
		CancelledAt: s.CancelledAt, CancelledBy: s.CancelledBy, CancelReason: s.CancelReason},
		Discrepancies: []Discrepancy{}, Missing: []Item{}, DeadLetters: []DeadLetter{}, Unexpected: []Unexpected{}}
}

// UnexpectedOf is the report's row of an unexpected item: the provider's
// values of a record the file lacks.
func UnexpectedOf(it ledger.Item) Unexpected {
	u := Unexpected{TransactionID: it.TransactionID, Provider: it.Provider, ListedAt: timeOrNil(it.TerminalAt)}
	if p := it.Reported; p != nil {
		u.ProviderAmountMinor, u.ProviderCurrency, u.ProviderStatus = p.AmountMinor, p.Currency, p.Status
	}
	return u
}

// ItemOf is the report's row of a ledger item.
func ItemOf(it ledger.Item) Item {
	return Item{TransactionID: it.TransactionID, AccountID: it.AccountID, AmountMinor: it.AmountMinor,
		Currency: it.Currency, Status: it.Status, Outcome: string(it.State), Attempts: it.Attempts,
		Throttles: it.Throttles, LastHTTPStatus: nonZero(it.LastHTTPStatus), LastReason: it.LastReason,
		CheckedAt: timeOrNil(it.TerminalAt)}
}

// DiscrepanciesOf returns a mismatched item's rows, one per differing field
// (only field's when it is not empty), ordered by field.
func DiscrepanciesOf(it ledger.Item, field string) []Discrepancy {
	var out []Discrepancy
	var p ledger.Provider
	if it.Reported != nil {
		p = *it.Reported
	}
	for _, d := range it.Differences {
		if field != "" && d.Field != field {
			continue
		}
		out = append(out, Discrepancy{TransactionID: it.TransactionID, AccountID: it.AccountID, Field: d.Field,
			Expected: d.Expected, Provider: d.Provider, Attempts: it.Attempts, CheckedAt: timeOrNil(it.TerminalAt),
			AmountMinor: it.AmountMinor, Currency: it.Currency, Status: it.Status,
			ProviderAmountMinor: p.AmountMinor, ProviderCurrency: p.Currency, ProviderStatus: p.Status})
	}
	slices.SortStableFunc(out, func(a, b Discrepancy) int { return strings.Compare(a.Field, b.Field) })
	return out
}

// DeadLetterOf is the report's row of a dead letter.
func DeadLetterOf(d ledger.DeadLetter) DeadLetter {
	return DeadLetter{TransactionID: d.TransactionID, AccountID: d.AccountID, Attempts: d.Attempts,
		Throttles: d.Throttles, Reason: d.Reason, HTTPStatus: nonZero(d.HTTPStatus), Detail: d.Detail,
		DeadLetteredAt: timeOrNil(d.At), AmountMinor: d.AmountMinor, Currency: d.Currency, Status: d.Status}
}

// nonZero is nil for 0 (no HTTP status), n's address otherwise.
func nonZero(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

// timeOrNil is nil for the zero time (not yet), t's address otherwise.
func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// WriteJSON writes the report as one indented JSON object:
//
//	{"format": "reconcile-report/v1", "run": {...}, "discrepancies": [...],
//	 "missing": [...], "dead_letters": [...], "unexpected": [...], "items": [...]}
//
// with the field names of the struct tags of Run, Discrepancy, Item,
// DeadLetter and Unexpected. Instants are RFC 3339 in UTC; absent values are null; "items"
// is present only with Options.All. Fields may be added in v1; none are
// renamed or removed.
func (rep Report) WriteJSON(w io.Writer) error { return rep.write(w, "json") }

// write writes the report through a Stream in format.
func (rep Report) write(w io.Writer, format string) error {
	s, err := NewStream(w, format, rep.Run)
	if err != nil {
		return err
	}
	for _, d := range rep.Discrepancies {
		_ = s.Discrepancy(d)
	}
	for _, it := range rep.Missing {
		_ = s.Missing(it)
	}
	for _, d := range rep.DeadLetters {
		_ = s.DeadLetter(d)
	}
	for _, u := range rep.Unexpected {
		_ = s.Unexpected(u)
	}
	for _, it := range rep.Items {
		_ = s.Item(it)
	}
	return s.Close(rep.Providers)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
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
//     dead_lettered, cancelled, unexpected; queued or retry_scheduled while
//     open).
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
//   - provider_amount_minor, provider_currency, provider_status: for
//     discrepancy and unexpected rows, the provider's record; empty
//     otherwise.
//
// The file is UTF-8 CSV as RFC 4180 describes it (comma separated, fields
// with commas, quotes or newlines double-quoted), except that lines end in
// \n. A text cell that a spreadsheet would take for a formula (starting
// with = + - @, a tab or a carriage return, and not a plain number) starts
// with a single quote (see SafeCell); numeric columns are never changed.
// Columns may be appended in v1; none are renamed, removed or reordered.
var CSVHeader = []string{"record", "reconciliation_id", "business_date", "generation", "transaction_id", "account_id",
	"amount_minor", "currency", "status", "outcome", "field", "expected", "provider", "reason", "http_status",
	"attempts", "throttles", "detail", "at", "provider_amount_minor", "provider_currency", "provider_status"}

// WriteCSV writes the report in the CSV layout documented at CSVHeader.
// Text cells go through SafeCell, so a spreadsheet opening the file runs
// no formula a payment file, a provider or an operator put in them.
func (rep Report) WriteCSV(w io.Writer) error { return rep.write(w, "csv") }

func itemCells(it Item) []string {
	return []string{SafeCell(it.TransactionID), SafeCell(it.AccountID), strconv.FormatInt(it.AmountMinor, 10),
		SafeCell(it.Currency), SafeCell(it.Status), SafeCell(it.Outcome), "", "", "", SafeCell(it.LastReason),
		httpStatus(it.LastHTTPStatus), strconv.Itoa(it.Attempts), strconv.Itoa(it.Throttles), "", csvTime(it.CheckedAt), "", "", ""}
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
	if r.CancelledAt != nil {
		fmt.Fprintf(bw, "CANCELLED by %s at %s: %s\n", r.CancelledBy, fmtTime(*r.CancelledAt), r.CancelReason)
	}
	fmt.Fprintf(bw, "%s items: %s matched, %s mismatched, %s missing, %s dead-lettered, %s cancelled%s, %s open; %s provider calls, %s throttled\n",
		count(r.Items), count(r.Matched), count(r.Mismatched), count(r.Missing), count(r.DeadLettered), count(r.Cancelled),
		UnexpectedCount(r.Unexpected), count(r.Open), human.Count(r.ProviderCalls), human.Count(r.Throttles))
	writeProviderTotals(bw, "", rep.Providers)
	fmt.Fprintf(bw, "created %s, completed %s\n", fmtTime(r.CreatedAt), fmtTimePtr(r.CompletedAt))

	// Amounts in the currency's major units (the CSV and JSON keep minor
	// units); tabwriter aligns the columns.
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	section := func(title string, n int, header string) bool {
		fmt.Fprintf(tw, "\n%s (%s)\n", title, count(n))
		if n == 0 {
			return false
		}
		fmt.Fprintln(tw, header)
		return true
	}
	if section("discrepancies", len(rep.Discrepancies), "TRANSACTION\tACCOUNT\tAMOUNT\tSTATUS\tFIELD\tEXPECTED\tPROVIDER") {
		for _, d := range rep.Discrepancies {
			expected, provider := d.Expected, d.Provider
			if d.Field == "amount_minor" {
				expected, provider = human.Money(d.AmountMinor, d.Currency), human.Money(d.ProviderAmountMinor, cmp.Or(d.ProviderCurrency, d.Currency))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(d.TransactionID), cell(d.AccountID), human.Money(d.AmountMinor, d.Currency),
				d.Status, d.Field, cell(expected), cell(provider))
		}
	}
	if section("missing at the provider", len(rep.Missing), "TRANSACTION\tACCOUNT\tAMOUNT\tSTATUS\tATTEMPTS") {
		for _, it := range rep.Missing {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", cell(it.TransactionID), cell(it.AccountID), human.Money(it.AmountMinor, it.Currency),
				it.Status, it.Attempts)
		}
	}
	if section("dead letters", len(rep.DeadLetters), "TRANSACTION\tACCOUNT\tAMOUNT\tSTATUS\tREASON\tHTTP\tATTEMPTS\tTHROTTLES\tDETAIL") {
		for _, d := range rep.DeadLetters {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", cell(d.TransactionID), cell(d.AccountID),
				human.Money(d.AmountMinor, d.Currency), d.Status, d.Reason, cell(httpStatus(d.HTTPStatus)), d.Attempts, d.Throttles,
				cell(oneLine(d.Detail)))
		}
	}
	// Only a listed run can have any; a lookup run's "(0)" would say too much.
	if len(rep.Unexpected) > 0 && section("unexpected: at the provider, not in the file", len(rep.Unexpected), "TRANSACTION\tPROVIDER_AMOUNT\tPROVIDER_STATUS") {
		for _, u := range rep.Unexpected {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", cell(u.TransactionID), human.Money(u.ProviderAmountMinor, u.ProviderCurrency),
				cell(u.ProviderStatus))
		}
	}
	if rep.Items != nil && section("items", len(rep.Items), "TRANSACTION\tACCOUNT\tAMOUNT\tSTATUS\tOUTCOME\tATTEMPTS\tTHROTTLES\tLAST_HTTP\tLAST_REASON") {
		for _, it := range rep.Items {
			amount := human.Money(it.AmountMinor, it.Currency)
			if it.Outcome == string(ledger.Unexpected) {
				amount = "-" // the file has no record of it, so no expected amount
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", cell(it.TransactionID), cell(it.AccountID),
				amount, cell(it.Status), it.Outcome, it.Attempts, it.Throttles,
				cell(httpStatus(it.LastHTTPStatus)), cell(it.LastReason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// count writes an item count for people.
func count(n int) string { return human.Count(int64(n)) }

// UnexpectedCount is ", N unexpected" when a run has unexpected records,
// and nothing otherwise: a run checked by lookup never sees the records the
// file lacks, so "0 unexpected" would claim what nobody looked at.
func UnexpectedCount(n int) string {
	if n == 0 {
		return ""
	}
	return ", " + count(n) + " unexpected"
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
