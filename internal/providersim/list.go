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
// them stays the same (the window, the late records, the faults): every
// page of a listing reads the same list, and building it walks every
// record.
type listedWindow struct {
	from, to time.Time
	cleared  bool
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
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return answer{status: http.StatusBadRequest, body: errorBody("invalid_request", "limit: want 1 to 1000")}
		}
		limit = n
	}
	cursor := q.Get("cursor")
	offset := 0
	if cursor != "" {
		n, ok := strings.CutPrefix(cursor, "o")
		v, err := strconv.Atoi(n)
		if !ok || err != nil || v < 0 {
			return answer{status: http.StatusBadRequest, body: errorBody("invalid_cursor", "no such cursor")}
		}
		offset = v
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.listCalls++
	sec := s.secondLocked(now)
	sec.Calls++
	a := s.listLocked(h, r, from, to, cursor, offset, limit, now)
	s.byStatus[a.status]++
	switch {
	case a.status == http.StatusTooManyRequests:
		s.throttled++
		sec.Throttled++
	case a.status == http.StatusOK:
		sec.OK++
		s.pagesServed[from.UTC().Format(time.RFC3339)+"/"+to.UTC().Format(time.RFC3339)+"/"+cursor]++
	default:
		sec.Failed++
	}
	return a
}

func (s *Server) listLocked(h http.Header, r *http.Request, from, to time.Time, cursor string, offset, limit int, now time.Time) answer {
	if a := s.authLocked(h, r); a != nil {
		return *a
	}
	if a := s.limitLocked(h, now); a != nil {
		return *a
	}
	if cursor != "" && s.listFaults < s.cfg.List.Faults {
		s.listFaults++
		return answer{status: http.StatusServiceUnavailable, body: errorBody("unavailable", "try again")}
	}
	ids := s.listedLocked(from, to)
	if cursor != "" && s.cfg.List.Shift {
		offset = max(offset-1, 0)
	}
	page := listPage{Data: []provider.Record{}}
	end := min(offset+limit, len(ids))
	for _, id := range ids[min(offset, end):end] {
		rec := s.records[id]
		if !s.faultsCleared && s.fault(id) == FaultMismatch {
			rec, _ = s.mismatch(rec)
		}
		page.Data = append(page.Data, rec)
	}
	if end < len(ids) {
		page.NextCursor = "o" + strconv.Itoa(offset+limit)
	}
	return answer{status: http.StatusOK, body: page}
}

// listedLocked returns the ids of the listed records made in [from, to),
// ordered by time and id. A record the dataset's faults make missing is
// not listed, as a lookup does not find it.
func (s *Server) listedLocked(from, to time.Time) []string {
	if w := s.listed; w.ok && w.from.Equal(from) && w.to.Equal(to) && w.cleared == s.faultsCleared {
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
		default:
			ids = append(ids, id)
		}
	}
	s.listed = listedWindow{from: from, to: to, cleared: s.faultsCleared, ids: ids, ok: true}
	return ids
}
