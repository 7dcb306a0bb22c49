package providersim

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
)

// listPath is the list endpoint of the built-in contract:
// GET /v1/transactions?from=&to=&cursor=&limit=.
const listPath = "/v1/transactions"

// maxListLimit is the largest page the list serves, as the contract says.
const maxListLimit = 1000

// ListConfig configures the simulator's list of transactions.
type ListConfig struct {
	// Times gives when each record was made, by transaction id; the list
	// of a window holds the records made in it. A record without a time is
	// in every window. Defaults to none.
	Times map[string]time.Time
	// Late names records the list does not show yet (the provider's list
	// lags behind its lookups): a lookup finds them. Defaults to none.
	Late map[string]bool
	// Shift makes every page after the first start one record earlier
	// than its cursor says, as when a record is added in front while a
	// client pages by offset: each page repeats the previous page's last
	// record. Defaults to false.
	Shift bool
	// Faults is how many page requests after the first page answer 503
	// before pages are served again: faults between pages. Defaults to 0.
	Faults int
}

// SetLate replaces ListConfig.Late: the records the list does not show
// yet.
func (s *Server) SetLate(late map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.List.Late = late
	s.listed = listedWindow{}
}

// listedWindow is the last window's listed ids, kept while what decides
// them stays the same (the window, the late records, the faults, the
// shape's filter): every
// page of a listing reads the same list, and building it walks every
// record.
type listedWindow struct {
	from, to time.Time
	cleared  bool
	filter   string
	ids      []string
	ok       bool
}

// PageCalls returns how many times the list answered the page at cursor
// with 200 (the first page's cursor is ""), for every window asked.
func (s *Server) PageCalls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.pagesServed))
	for k, v := range s.pagesServed {
		out[k] = v
	}
	return out
}

// serveList answers one page of the list: the records made in [from, to),
// ordered by time and id, from the offset the cursor names.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody("method_not_allowed", "use GET"))
		return
	}
	a := s.listAnswer(w.Header(), r, s.now())
	writeJSON(w, a.status, a.body)
}

// listPage is the body of a page of the list.
type listPage struct {
	Data       []provider.Record `json:"data"`
	NextCursor string            `json:"next_cursor,omitempty"`
}

func (s *Server) listAnswer(h http.Header, r *http.Request, now time.Time) answer {
	q := r.URL.Query()
	from, ferr := time.Parse(time.RFC3339, q.Get("from"))
	to, terr := time.Parse(time.RFC3339, q.Get("to"))
	if ferr != nil || terr != nil || !to.After(from) {
		return answer{status: http.StatusBadRequest, body: errorBody("invalid_request", "from and to: want RFC 3339 instants, from before to")}
	}
	limit, ok := pageLimit(q.Get("limit"), 100, maxListLimit)
	if !ok {
		return answer{status: http.StatusBadRequest, body: errorBody("invalid_request", "limit: want 1 to 1000")}
	}
	cursor := q.Get("cursor")
	offset, ok := offsetCursor(cursor)
	if !ok {
		return answer{status: http.StatusBadRequest, body: errorBody("invalid_cursor", "no such cursor")}
	}
	pq := pageQuery{from: from, to: to, cursor: cursor, limit: limit, offset: func([]string) (int, bool) { return offset, true }}
	pg, refused := s.page(h, pq, func() *answer { return s.authLocked(h, r) }, now)
	if refused != nil {
		return *refused
	}
	body := listPage{Data: pg.records}
	if pg.more {
		body.NextCursor = "o" + strconv.Itoa(pg.end)
	}
	return answer{status: http.StatusOK, body: body}
}

// pageLimit reads a page size parameter: def when empty, else 1 to most.
func pageLimit(v string, def, most int) (int, bool) {
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 1 && n <= most
}

// offsetCursor reads an opaque cursor of the simulator's lists, "o" and
// the offset of the page; "" is the first page.
func offsetCursor(cursor string) (int, bool) {
	if cursor == "" {
		return 0, true
	}
	n, ok := strings.CutPrefix(cursor, "o")
	v, err := strconv.Atoi(n)
	return v, ok && err == nil && v >= 0
}

// pageQuery is one list request, whatever the shape that asked it.
type pageQuery struct {
	from, to time.Time
	// cursor is the request's cursor as sent ("" for the first page); it
	// names the page in PageCalls.
	cursor string
	limit  int
	// offset finds where the page starts in the window's listed ids;
	// false: the cursor names no page.
	offset func(ids []string) (int, bool)
	// keep, when set, lists only the records it keeps (a shape's list
	// holds one kind of object); filter names it for the cache.
	keep   func(id string) bool
	filter string
}

// servedPage is one page the list served.
type servedPage struct {
	records []provider.Record
	// end is the offset after the page, total the records of the window,
	// more whether records follow.
	end, total int
	more       bool
}

// page serves one page of the list for any shape: it counts the call,
// checks the credentials (auth, called under the simulator's lock, returns
// the refusal), the rate limit and the faults between pages, and returns
// the page's records, or the answer that refuses it. Pages after the first
// shift one record back with ListConfig.Shift.
func (s *Server) page(h http.Header, q pageQuery, auth func() *answer, now time.Time) (servedPage, *answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.listCalls++
	sec := s.secondLocked(now)
	sec.Calls++
	pg, a := s.pageLocked(h, q, auth, now)
	status := http.StatusOK
	if a != nil {
		status = a.status
	}
	s.byStatus[status]++
	switch {
	case status == http.StatusTooManyRequests:
		s.throttled++
		sec.Throttled++
	case status == http.StatusOK:
		sec.OK++
		s.pagesServed[q.from.UTC().Format(time.RFC3339)+"/"+q.to.UTC().Format(time.RFC3339)+"/"+q.cursor]++
	default:
		sec.Failed++
	}
	return pg, a
}

func (s *Server) pageLocked(h http.Header, q pageQuery, auth func() *answer, now time.Time) (servedPage, *answer) {
	if a := auth(); a != nil {
		return servedPage{}, a
	}
	if a := s.limitLocked(h, now); a != nil {
		return servedPage{}, a
	}
	if q.cursor != "" && s.listFaults < s.cfg.List.Faults {
		s.listFaults++
		return servedPage{}, &answer{status: http.StatusServiceUnavailable, body: errorBody("unavailable", "try again")}
	}
	ids := s.listedLocked(q.from, q.to, q.keep, q.filter)
	offset, ok := q.offset(ids)
	if !ok {
		return servedPage{}, &answer{status: http.StatusBadRequest, body: errorBody("invalid_cursor", "no such cursor")}
	}
	if q.cursor != "" && s.cfg.List.Shift {
		offset = max(offset-1, 0)
	}
	end := min(offset+q.limit, len(ids))
	pg := servedPage{records: make([]provider.Record, 0, end-min(offset, end)), end: end, total: len(ids), more: end < len(ids)}
	for _, id := range ids[min(offset, end):end] {
		rec := s.records[id]
		if !s.faultsCleared && s.fault(id) == FaultMismatch {
			rec, _ = s.mismatch(rec)
		}
		pg.records = append(pg.records, rec)
	}
	return pg, nil
}

// listedLocked returns the ids of the listed records made in [from, to)
// that keep keeps (all when nil), ordered by time and id. A record the
// dataset's faults make missing is not listed, as a lookup does not find
// it.
func (s *Server) listedLocked(from, to time.Time, keep func(string) bool, filter string) []string {
	if w := s.listed; w.ok && w.from.Equal(from) && w.to.Equal(to) && w.cleared == s.faultsCleared && w.filter == filter {
		return w.ids
	}
	if s.listOrder == nil {
		s.listOrder = make([]string, 0, len(s.records))
		for id := range s.records {
			s.listOrder = append(s.listOrder, id)
		}
		times := s.cfg.List.Times
		slices.SortFunc(s.listOrder, func(a, b string) int {
			return cmp.Or(times[a].Compare(times[b]), strings.Compare(a, b))
		})
	}
	var ids []string
	for _, id := range s.listOrder {
		t, timed := s.cfg.List.Times[id]
		switch {
		case timed && (t.Before(from) || !t.Before(to)):
		case s.cfg.List.Late[id]:
		case !s.faultsCleared && s.fault(id) == FaultMissing:
		case keep != nil && !keep(id):
		default:
			ids = append(ids, id)
		}
	}
	s.listed = listedWindow{from: from, to: to, cleared: s.faultsCleared, filter: filter, ids: ids, ok: true}
	return ids
}
