package profile

import "strconv"

// List is how a provider lists its payments by time (list mode): the
// request of one page, the time window's form, the page size, where the
// records are in the answer and how the next page is asked for. Each
// element of a page is read as a lookup's answer is (the payment object's
// reading: the same paths, status map and rules, amount arithmetic).
type List struct {
	// Request is one page's request. Its templates may hold {from} and
	// {to} (the window, in TimeFormat), {limit} (PageSize) and {cursor}
	// (what Paging says; empty for the first page, and a query parameter
	// or header that comes out empty is left out).
	Request Request
	// TimeFormat is how {from} and {to} are written.
	TimeFormat TimeFormat
	// PageSize is the number of records asked for per page.
	PageSize int
	// Records is the path of the array of records in a page.
	Records string
	// Paging says how the next page is asked for and when there is none.
	Paging Paging
	// Wrap, when set, reads each record as if it were the answer
	// {"<Wrap>": record}: the lookup's reading applies to a list whose
	// elements are the object the lookup's answer wraps (Square's
	// {"payment": {...}}).
	Wrap string
	// Object reads each record: the payment object's reading, unless the
	// list has a record of its own (PayPal's transaction search speaks
	// another shape than its captures).
	Object Object
	// ownReading is true when the list has a record of its own.
	ownReading bool
}

// TimeFormat is how a list request writes an instant.
type TimeFormat int

// Time formats of a list window.
const (
	// TimeRFC3339: 2026-10-24T00:00:00Z, in UTC.
	TimeRFC3339 TimeFormat = iota + 1
	// TimeUnix: seconds since 1970 (Stripe's created[gte]).
	TimeUnix
)

var timeFormatNames = []string{"", "rfc3339", "unix"}

// String returns the format's name in a profile file.
func (f TimeFormat) String() string {
	if f > 0 && int(f) < len(timeFormatNames) {
		return timeFormatNames[f]
	}
	return "TimeFormat(" + strconv.Itoa(int(f)) + ")"
}

// PagingStyle is how a list's pages follow each other.
type PagingStyle int

// Paging styles.
const (
	// PagingCursor: the answer carries the next page's cursor at
	// Paging.Next; an absent or empty one ends the list (the built-in
	// contract, Square).
	PagingCursor PagingStyle = iota + 1
	// PagingLastID: the next page starts after the last record's id; the
	// flag at Paging.HasMore says whether there is one (Stripe's
	// starting_after and has_more).
	PagingLastID
	// PagingPage: pages are numbered from 1; the answer's Paging.TotalPages
	// says how many there are, and an empty page ends the list too
	// (PayPal).
	PagingPage
)

var pagingStyleNames = []string{"", "cursor", "last_id", "page"}

// String returns the style's name in a profile file.
func (s PagingStyle) String() string {
	if s > 0 && int(s) < len(pagingStyleNames) {
		return pagingStyleNames[s]
	}
	return "PagingStyle(" + strconv.Itoa(int(s)) + ")"
}

// Paging is a list's pagination.
type Paging struct {
	Style PagingStyle
	// Next is the path of the next cursor (PagingCursor).
	Next string
	// HasMore is the path of the "more pages" flag (PagingLastID).
	HasMore string
	// TotalPages is the path of the page count (PagingPage).
	TotalPages string
}

// listPlaceholders are the words a list request's templates may hold.
var listPlaceholders = []string{"from", "to", "cursor", "limit"}

// maxPageSize bounds list.page_size: past a thousand records a page is a
// megabyte-sized body and no provider serves more.
const maxPageSize = 1000
