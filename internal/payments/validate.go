package payments

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The field names of a payment file, in their canonical order.
const (
	FieldTransactionID = "transaction_id"
	FieldAccountID     = "account_id"
	FieldAmountMinor   = "amount_minor"
	FieldCurrency      = "currency"
	FieldStatus        = "status"
	FieldOccurredAt    = "occurred_at"
	// FieldProvider is the optional field naming the provider that answers
	// for the payment (see CheckProvider); absent or empty: the default
	// provider.
	FieldProvider = "provider"
	// FieldKind is the optional field saying what a row is: a payment, a
	// refund or a dispute (see Kinds); absent or empty: not stated, and the
	// provider's profile tells by the transaction id.
	FieldKind = "kind"
)

// Fields lists the required fields in their canonical order (the column
// order the sample generator writes).
func Fields() []string {
	names := fieldNames
	return names[:]
}

// MaxIDBytes is the longest transaction or account id accepted, in bytes.
const MaxIDBytes = 255

// CheckID returns why s is not an acceptable transaction or account id, or
// "" when it is: 1 to MaxIDBytes bytes of valid UTF-8 without control
// characters.
func CheckID(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxIDBytes:
		return fmt.Sprintf("longer than %d bytes", MaxIDBytes)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	for _, r := range s {
		if r == 0 {
			return "contains a NUL byte"
		}
		if unicode.IsControl(r) {
			return fmt.Sprintf("contains the control character %U", r)
		}
	}
	return ""
}

// ParseAmount parses an amount in minor units written in plain decimal: an
// optional minus sign and digits, no leading zeros. The error says what is
// wrong with s, without repeating it.
func ParseAmount(s string) (int64, error) {
	if s == "" {
		return 0, errorString("empty")
	}
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" {
		return 0, errorString("not an integer")
	}
	for i := 0; i < len(digits); i++ {
		if c := digits[i]; c < '0' || c > '9' {
			return 0, errorString("not an integer")
		}
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, errorString("not an integer: leading zeros are not allowed")
	}
	if s == "-0" {
		return 0, errorString("not an integer: negative zero is not allowed")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errorString("out of range for a 64-bit integer")
	}
	return n, nil
}

// errorString is a constant error message.
type errorString string

func (e errorString) Error() string { return string(e) }

// IsCurrency reports whether s is exactly three upper-case ASCII letters.
func IsCurrency(s string) bool {
	return len(s) == 3 && isUpper(s[0]) && isUpper(s[1]) && isUpper(s[2])
}

func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

// The ledger's status vocabulary: the words a payment file's status uses,
// and those a provider profile maps the provider's words onto.
const (
	StatusSucceeded         = "succeeded"
	StatusPending           = "pending"
	StatusFailed            = "failed"
	StatusRefunded          = "refunded"
	StatusPartiallyRefunded = "partially_refunded"
	StatusCanceled          = "canceled"
	StatusDisputed          = "disputed"
)

// Statuses returns the ledger's status vocabulary, in documentation order.
func Statuses() []string {
	return []string{StatusSucceeded, StatusPending, StatusFailed, StatusRefunded, StatusPartiallyRefunded,
		StatusCanceled, StatusDisputed}
}

// IsStatus reports whether s is a word of the ledger's status vocabulary.
func IsStatus(s string) bool { return slices.Contains(Statuses(), s) }

// The kinds of row a payment file holds: what the provider is asked about.
// A refund or a dispute is money going back to the customer; a file holds
// its amount as a negative number.
const (
	KindPayment = "payment"
	KindRefund  = "refund"
	KindDispute = "dispute"
)

// Kinds returns the kinds of row, in documentation order.
func Kinds() []string { return []string{KindPayment, KindRefund, KindDispute} }

// IsKind reports whether s is a kind of row.
func IsKind(s string) bool { return slices.Contains(Kinds(), s) }

// ParseTime parses an RFC 3339 timestamp (fractional seconds allowed; the
// offset or Z is required).
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errorString("not an RFC 3339 timestamp (want 2026-10-24T13:45:00Z or 2026-10-24T15:45:00+02:00)")
	}
	return t, nil
}

// Indexes of the fields in a row, in canonical order.
const (
	idxID = iota
	idxAccount
	idxAmount
	idxCurrency
	idxStatus
	idxOccurredAt
	numFields
)

// row is the text of one row's fields before validation, indexed by idx*.
// missing has bit i set when field i is absent (JSON Lines may leave keys
// out); reported has bit i set when field i was already reported (a JSON
// value of the wrong type). Such fields are not checked further.
type row struct {
	vals     [numFields]string
	missing  uint8
	reported uint8
	// opt are the optional fields, indexed by opt*; empty when absent.
	opt         [numOptional]string
	optReported bool // an optional JSON value of the wrong type, reported
}

// Indexes of the optional fields.
const (
	optProvider = iota
	optKind
	numOptional
)

// optionalNames are the optional field names indexed by opt*.
var optionalNames = [numOptional]string{FieldProvider, FieldKind}

// check validates one row and records its problems. It returns the payment,
// whether the transaction id is acceptable (so the caller can look for
// duplicates even in rows with other problems), and whether the whole row
// is valid.
func (r *Reader) check(line int, f *row) (p Payment, validID, ok bool) {
	ok = f.reported == 0 && !f.optReported
	bad := func(i int, msg string) {
		ok = false
		r.problem(line, fieldNames[i], quoteValue(f.vals[i]), msg)
	}
	for i := range numFields {
		if f.missing&(1<<i) != 0 {
			ok = false
			r.problem(line, fieldNames[i], "", "missing")
		}
	}
	has := func(i int) bool { return (f.missing|f.reported)&(1<<i) == 0 }
	p.Line = line
	if has(idxID) {
		if msg := CheckID(f.vals[idxID]); msg != "" {
			bad(idxID, msg)
		} else {
			p.TransactionID = f.vals[idxID]
			validID = true
		}
	}
	if has(idxAccount) {
		if msg := CheckID(f.vals[idxAccount]); msg != "" {
			bad(idxAccount, msg)
		} else {
			p.AccountID = f.vals[idxAccount]
		}
	}
	if has(idxAmount) {
		if n, err := ParseAmount(f.vals[idxAmount]); err != nil {
			bad(idxAmount, err.Error())
		} else {
			p.AmountMinor = n
		}
	}
	if has(idxCurrency) {
		if !IsCurrency(f.vals[idxCurrency]) {
			bad(idxCurrency, "not a currency code: want 3 upper-case letters such as EUR")
		} else {
			p.Currency = f.vals[idxCurrency]
		}
	}
	if has(idxStatus) {
		if !IsStatus(f.vals[idxStatus]) {
			bad(idxStatus, "not a status: want one of "+strings.Join(Statuses(), ", "))
		} else {
			p.Status = f.vals[idxStatus]
		}
	}
	if has(idxOccurredAt) {
		t, err := ParseTime(f.vals[idxOccurredAt])
		switch {
		case err != nil:
			bad(idxOccurredAt, err.Error())
		case !r.opts.AllowOutsideDate && (t.Before(r.start) || !t.Before(r.end)):
			bad(idxOccurredAt, fmt.Sprintf("outside the business date %s in %s", r.opts.BusinessDate, r.opts.Location))
		default:
			p.OccurredAt = t
		}
	}
	if prov := f.opt[optProvider]; prov != "" {
		if msg := CheckProvider(prov); msg != "" {
			ok = false
			r.problem(line, FieldProvider, quoteValue(prov), msg)
		} else if r.opts.Providers != nil && !slices.Contains(r.opts.Providers, prov) {
			ok = false
			src := r.opts.ProvidersSource
			if src == "" {
				src = "the providers file"
			}
			r.problem(line, FieldProvider, quoteValue(prov), fmt.Sprintf("not in %s (known: %s)", src, strings.Join(r.opts.Providers, ", ")))
		} else {
			p.Provider = prov
		}
	}
	if kind := f.opt[optKind]; kind != "" {
		if !IsKind(kind) {
			ok = false
			r.problem(line, FieldKind, quoteValue(kind), "not a kind: want one of "+strings.Join(Kinds(), ", ")+" (or leave it empty)")
		} else {
			p.Kind = kind
		}
	}
	return p, validID, ok
}

// maxProviderBytes is the longest provider name accepted, in bytes.
const maxProviderBytes = 64

// CheckProvider returns why s is not an acceptable provider name, or ""
// when it is: 1 to 64 lower-case ASCII letters, digits, '_' and '-',
// starting with a letter (stripe, paypal, legacy_gw).
func CheckProvider(s string) string {
	if s == "" || len(s) > maxProviderBytes || s[0] < 'a' || s[0] > 'z' {
		return "not a provider name: want a lower-case word such as stripe or paypal (letters, digits, _ and -, at most 64 bytes)"
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return "not a provider name: want a lower-case word such as stripe or paypal (letters, digits, _ and -, at most 64 bytes)"
		}
	}
	return ""
}

// fieldNames are the field names indexed by idx*.
var fieldNames = [numFields]string{FieldTransactionID, FieldAccountID, FieldAmountMinor, FieldCurrency, FieldStatus, FieldOccurredAt}
