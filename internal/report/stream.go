package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/reconcile/reconcile/internal/ledger"
)

// Stream writes a report in the CSV or JSON format of WriteCSV and
// WriteJSON as its rows arrive, so that a run of any size is written in
// bounded memory. Rows must come in the format's order: discrepancies,
// missing items, dead letters, unexpected records, then (for a report of
// every item) items; Close writes what follows them. The zero Stream is
// not usable: call NewStream.
type Stream struct {
	w      io.Writer
	format string
	cw     *csv.Writer
	run    []string // the run's CSV cells
	// section is the JSON array open (sectionDiscrepancies...), n the
	// elements written to it.
	section int
	n       int
	err     error
}

// The JSON arrays of a report, in order.
const (
	sectionNone = iota
	sectionDiscrepancies
	sectionMissing
	sectionDeadLetters
	sectionUnexpected
	sectionItems
)

var sectionNames = [...]string{sectionDiscrepancies: "discrepancies", sectionMissing: "missing",
	sectionDeadLetters: "dead_letters", sectionUnexpected: "unexpected", sectionItems: "items"}

// NewStream starts a report of run in format ("csv" or "json") on w: the
// CSV header row, or the JSON object's format and run.
func NewStream(w io.Writer, format string, run Run) (*Stream, error) {
	s := &Stream{w: w, format: format}
	switch format {
	case "csv":
		s.cw = csv.NewWriter(w)
		s.run = []string{SafeCell(run.ReconciliationID), run.BusinessDate, strconv.Itoa(run.Generation)}
		s.err = s.cw.Write(CSVHeader)
	case "json":
		run.CreatedAt = run.CreatedAt.UTC()
		run.CompletedAt, run.CancelledAt = utcPtr(run.CompletedAt), utcPtr(run.CancelledAt)
		s.printf("{\n  \"format\": %s,\n  \"run\": %s", mustJSON(FormatVersion, ""), mustJSON(run, "  "))
	default:
		return nil, fmt.Errorf("report format %q: want csv or json", format)
	}
	return s, s.err
}

// Discrepancy writes one differing field of a mismatched item.
func (s *Stream) Discrepancy(d Discrepancy) error {
	if s.cw != nil {
		return s.row("discrepancy", SafeCell(d.TransactionID), SafeCell(d.AccountID), strconv.FormatInt(d.AmountMinor, 10),
			SafeCell(d.Currency), SafeCell(d.Status), "mismatched", SafeCell(d.Field), SafeCell(d.Expected), SafeCell(d.Provider),
			"mismatched", "", strconv.Itoa(d.Attempts), "", "", csvTime(d.CheckedAt), strconv.FormatInt(d.ProviderAmountMinor, 10),
			SafeCell(d.ProviderCurrency), SafeCell(d.ProviderStatus))
	}
	d.CheckedAt = utcPtr(d.CheckedAt)
	return s.element(sectionDiscrepancies, d)
}

// Missing writes an item the provider does not know.
func (s *Stream) Missing(it Item) error {
	if s.cw != nil {
		return s.row("missing", itemCells(it)...)
	}
	it.CheckedAt = utcPtr(it.CheckedAt)
	return s.element(sectionMissing, it)
}

// DeadLetter writes an item given up on.
func (s *Stream) DeadLetter(d DeadLetter) error {
	if s.cw != nil {
		return s.row("dead_letter", SafeCell(d.TransactionID), SafeCell(d.AccountID), strconv.FormatInt(d.AmountMinor, 10),
			SafeCell(d.Currency), SafeCell(d.Status), "dead_lettered", "", "", "", SafeCell(d.Reason), httpStatus(d.HTTPStatus),
			strconv.Itoa(d.Attempts), strconv.Itoa(d.Throttles), SafeCell(oneLine(d.Detail)), csvTime(d.DeadLetteredAt), "", "", "")
	}
	d.DeadLetteredAt = utcPtr(d.DeadLetteredAt)
	return s.element(sectionDeadLetters, d)
}

// Unexpected writes a record the provider listed that the file lacks: its
// expected cells are empty, its provider cells hold the provider's values.
func (s *Stream) Unexpected(u Unexpected) error {
	if s.cw != nil {
		return s.row("unexpected", SafeCell(u.TransactionID), "", "", "", "", "unexpected", "", "", "", "unexpected", "",
			"0", "0", "", csvTime(u.ListedAt), strconv.FormatInt(u.ProviderAmountMinor, 10), SafeCell(u.ProviderCurrency),
			SafeCell(u.ProviderStatus))
	}
	u.ListedAt = utcPtr(u.ListedAt)
	return s.element(sectionUnexpected, u)
}

// Item writes one item of a report of every item.
func (s *Stream) Item(it Item) error {
	if s.cw != nil {
		return s.row("item", itemCells(it)...)
	}
	it.CheckedAt = utcPtr(it.CheckedAt)
	return s.element(sectionItems, it)
}

// Close ends the report; providers, when it has any, close the JSON
// object (the CSV has no row for them).
func (s *Stream) Close(providers []ledger.ProviderTotal) error {
	if s.cw != nil {
		s.cw.Flush()
		if s.err == nil {
			s.err = s.cw.Error()
		}
		return s.err
	}
	s.open(sectionUnexpected) // the four lists are always there, items only when any
	s.closeSection()
	if len(providers) > 0 {
		s.printf(",\n  \"providers\": %s", mustJSON(providers, "  "))
	}
	s.printf("\n}\n")
	return s.err
}

func (s *Stream) row(kind string, cells ...string) error {
	if s.err == nil {
		s.err = s.cw.Write(append(append([]string{kind}, s.run...), cells...))
	}
	return s.err
}

// element writes v as the next element of JSON array section.
func (s *Stream) element(section int, v any) error {
	if s.err != nil {
		return s.err
	}
	if section < s.section {
		s.err = fmt.Errorf("report stream: a %s row after the %s", sectionNames[section], sectionNames[s.section])
		return s.err
	}
	s.open(section)
	sep := ",\n    "
	if s.n == 0 {
		sep = "\n    "
	}
	s.printf("%s%s", sep, mustJSON(v, "    "))
	s.n++
	return s.err
}

// open closes the open array and opens the next ones up to section, those
// with no element written as empty ones. Close opens no further than the
// unexpected records, so an items array is there only with an item in it.
func (s *Stream) open(section int) {
	for s.section < section {
		s.closeSection()
		s.section++
		s.printf(",\n  %q: [", sectionNames[s.section])
		s.n = 0
	}
}

func (s *Stream) closeSection() {
	switch {
	case s.section == sectionNone:
	case s.n == 0:
		s.printf("]")
	default:
		s.printf("\n  ]")
	}
	s.n = 0
}

func (s *Stream) printf(format string, args ...any) {
	if s.err == nil {
		_, s.err = fmt.Fprintf(s.w, format, args...)
	}
}

// mustJSON encodes v as json.Encoder with the indent WriteJSON uses would
// at a depth whose lines start with prefix. The report's types always
// encode.
func mustJSON(v any, prefix string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent(prefix, "  ")
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("report: encode %T: %v", v, err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
