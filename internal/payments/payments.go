// Package payments reads a day's payment export: CSV with a header row, or
// JSON Lines with the same field names.
//
// # Fields
//
// Every row carries six fields; other columns or keys are ignored:
//
//   - transaction_id: 1 to 255 bytes of valid UTF-8 without control
//     characters (NUL, newline, tab, DEL, C1 controls). Anything else, such as
//     quotes, backslashes, spaces, letters of any script and "../", is kept
//     byte for byte: an id is just a string.
//   - account_id: the same rules as transaction_id.
//   - amount_minor: a 64-bit integer in minor units (cents), written in plain
//     decimal: an optional minus sign, then digits, without a plus sign,
//     leading zeros, spaces, fraction or exponent. Zero and negative amounts
//     are accepted (some exports write refunds and chargebacks as negative
//     amounts); the provider's record is compared with whatever the file
//     says. In JSON Lines the amount is a JSON number or a JSON string
//     holding the same text (exporters quote 64-bit integers for JavaScript).
//   - currency: exactly three upper-case ASCII letters. The ISO 4217 list is
//     not consulted: it changes, and the provider is the authority on which
//     codes it knows.
//   - status: a lower-case word of ASCII letters and underscores, starting
//     with a letter, at most 32 bytes (succeeded, refunded, failed,
//     partially_refunded, ...). The set of statuses belongs to the provider,
//     so any such word is accepted and compared verbatim.
//   - occurred_at: an RFC 3339 timestamp with an offset, within the business
//     date in the configured time zone ([00:00, next 00:00), which is 23 or
//     25 hours on daylight-saving days) unless Options.AllowOutsideDate.
//
// Two fields are optional. provider names the provider that answers for
// the payment when a night's export spans several (stripe, paypal): a
// lower-case word of letters, digits, '_' and '-' (see CheckProvider).
// Absent, empty or null, the payment goes to the default provider. kind
// says what the row is: payment, refund or dispute (see Kinds). Absent,
// empty or null, the file does not say, and the provider's profile tells
// by the transaction id (Stripe's re_ and dp_), else it is a payment.
//
// CSV header names are matched after trimming spaces and a UTF-8 byte order
// mark, ignoring case; a required column that is missing or appears twice is
// an error on line 1. In JSON Lines every line is one JSON object (blank
// lines are skipped); key matching ignores case, a repeated key keeps its
// last value, and a null value counts as missing. Every line must be valid
// UTF-8 in both formats.
//
// # Bad input
//
// A bad row does not stop the Reader: it is skipped, its problems are
// collected (each names the file, the line and the field), and reading goes
// on, so one pass reports every problem. The caller writes nothing unless
// Problems is empty at the end. Duplicate transaction ids within the file
// and a file without payments are problems too.
//
// # Memory
//
// The Reader streams: it holds one record at a time, reuses its buffers and
// bounds a record at Options.MaxRecordBytes. The one structure that grows is
// the set of transaction ids seen, which costs 16 to 32 bytes per row
// whatever the ids' length (see Reader.Next on duplicates).
package payments

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Payment is one valid row of a payment file.
type Payment struct {
	// TransactionID identifies the payment at the provider; unique within a file.
	TransactionID string
	// AccountID is the account (player, merchant) the payment belongs to.
	AccountID string
	// AmountMinor is the amount in minor units of Currency (cents; yen for JPY).
	AmountMinor int64
	// Currency is a three-letter upper-case currency code.
	Currency string
	// Status is the payment's status as exported (succeeded, refunded, ...).
	Status string
	// OccurredAt is when the payment happened, with the offset the file gave.
	OccurredAt time.Time
	// Provider names the provider that answers for the payment, from the
	// optional provider field; empty: the default provider.
	Provider string
	// Kind is the row's kind from the optional kind field (KindPayment,
	// KindRefund or KindDispute); empty: the file does not say.
	Kind string
	// Line is the line of the file the row starts on, from 1.
	Line int
}

// Format is the syntax of a payment file.
type Format string

// The formats a Reader understands.
const (
	// FormatAuto picks the format from the file name's extension (.csv,
	// .jsonl, .ndjson); for standard input ("-") and other names it looks at
	// the first byte that is not white space (after a byte order mark): "{"
	// means JSON Lines, anything else CSV.
	FormatAuto Format = ""
	// FormatCSV is comma-separated values with a header row (RFC 4180).
	FormatCSV Format = "csv"
	// FormatJSONL is JSON Lines: one JSON object per line.
	FormatJSONL Format = "jsonl"
)

// ParseFormat parses the value of a --format flag: csv, jsonl (or ndjson),
// or auto (or the empty string) for FormatAuto.
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "", "auto":
		return FormatAuto, nil
	case "csv":
		return FormatCSV, nil
	case "jsonl", "ndjson":
		return FormatJSONL, nil
	default:
		return "", fmt.Errorf("unknown format %q: want csv, jsonl or auto", s)
	}
}

// FormatFor returns the format a file name's extension implies, or
// FormatAuto when the extension says nothing (standard input "-" included).
func FormatFor(name string) Format {
	switch strings.ToLower(path.Ext(name)) {
	case ".csv":
		return FormatCSV
	case ".jsonl", ".ndjson":
		return FormatJSONL
	default:
		return FormatAuto
	}
}

// Date is a calendar day without a time zone: a business date. The zero
// Date is "no date".
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// ParseDate parses a business date written YYYY-MM-DD, such as the value of
// a --date flag. It rejects other layouts and days that do not exist.
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return Date{}, fmt.Errorf("invalid date %q: want a calendar day written YYYY-MM-DD, such as 2026-10-24", s)
	}
	return DateOf(t), nil
}

// DateOf returns the calendar day of t in t's location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{Year: y, Month: m, Day: d}
}

// String formats d as YYYY-MM-DD.
func (d Date) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day)
}

// IsZero reports whether d is the zero Date.
func (d Date) IsZero() bool { return d == Date{} }

// AddDays returns the day n days after d (before it when n is negative).
func (d Date) AddDays(n int) Date {
	return DateOf(time.Date(d.Year, d.Month, d.Day+n, 12, 0, 0, 0, time.UTC))
}

// Start returns the first instant of d in loc (midnight, or the first
// instant after a daylight-saving gap at midnight).
func (d Date) Start(loc *time.Location) time.Time {
	return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, loc)
}

// End returns the first instant after d in loc: the start of the next day.
func (d Date) End(loc *time.Location) time.Time {
	return time.Date(d.Year, d.Month, d.Day+1, 0, 0, 0, 0, loc)
}

// Problem is one reason a payment file is rejected.
type Problem struct {
	// File is the name the Reader was given.
	File string
	// Line is the line of the file, from 1.
	Line int
	// Field is the field the problem is about; empty for a whole row or file.
	Field string
	// Value is the offending value quoted as Go quotes strings (so control
	// characters and invalid bytes are visible) and shortened when long;
	// empty when the problem is not about a value.
	Value string
	// Msg says what is wrong.
	Msg string
}

// Error formats the problem as `file:line: field "value": msg`.
func (p Problem) Error() string {
	var b strings.Builder
	b.WriteString(p.File)
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(p.Line))
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		if p.Value != "" {
			b.WriteByte(' ')
			b.WriteString(p.Value)
		}
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ProblemList is the problems of one file: the first few in file order and
// the total count. Its zero value is the empty list.
type ProblemList struct {
	// Items are the first problems found, at most Options.MaxProblems.
	Items []Problem
	// Total counts every problem found, including those not in Items.
	Total int
}

// Empty reports whether the list holds no problem: the file is good.
func (l ProblemList) Empty() bool { return l.Total == 0 }

// Err returns the list as an error, or nil when it is empty.
func (l ProblemList) Err() error {
	if l.Empty() {
		return nil
	}
	return l
}

// Error formats one problem per line, followed by "and N more problems"
// when Items holds fewer than Total.
func (l ProblemList) Error() string {
	var b strings.Builder
	for i, p := range l.Items {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	if more := l.Total - len(l.Items); more > 0 {
		if len(l.Items) > 0 {
			b.WriteByte('\n')
		}
		if more == 1 {
			b.WriteString("and 1 more problem")
		} else {
			fmt.Fprintf(&b, "and %d more problems", more)
		}
	}
	return b.String()
}

// quoteValue quotes v for a Problem, shortening it to about 48 bytes.
func quoteValue(v string) string {
	const keep = 48
	if len(v) <= keep+16 {
		return strconv.Quote(v)
	}
	cut := keep
	for cut > keep-utf8.UTFMax && !utf8.RuneStart(v[cut]) {
		cut--
	}
	return strconv.Quote(v[:cut]) + "... (" + strconv.Itoa(len(v)) + " bytes)"
}
