package providersim

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
)

// How each provider shape lists the day's payments, as the built-in
// profile of the same name reads them: Stripe's
// GET /v1/payment_intents?created[gte]=&created[lt]=&starting_after=&limit=
// (Unix seconds, paged by the last id with has_more), Square's
// GET /v2/payments?begin_time=&end_time=&cursor=&limit= (a next cursor) and
// PayPal's GET /v1/reporting/transactions?start_date=&end_date=&page=&page_size=
// (page numbers with total_pages). Each lists payments only, each object
// written as the shape's lookup writes it (PayPal's reporting list in its
// own transaction_info form), with the list's shifting pages, out-of-window
// and late records and faults between pages (ListConfig) and the
// simulator's rate limit and counters. PayPal's reporting list says a
// transaction's status in one letter (S, P, D, V): a payment in a status it
// has no letter for (partially refunded, disputed, canceled) is not listed
// there, as the reporting data lags, and is found by its lookup.

// listShape is how one shape lists.
type listShape struct {
	path string
	// query reads the window, the page size and the cursor of a request;
	// a refusal names the bad parameter.
	query func(q url.Values) (pageQuery, string)
	// body writes a served page.
	body func(h *shaped, q url.Values, pq pageQuery, pg servedPage) any
	// listed reports whether the shape lists a payment in the status.
	listed func(status string) bool
}

var listShapes = map[Shape]*listShape{ShapeStripe: &stripeList, ShapePayPal: &paypalList, ShapeSquare: &squareList}

// rfc3339Page reads a window of RFC 3339 instants from the parameters
// fromKey and toKey and a page size from limitKey (def when absent, at most
// most); bad names the parameter in error.
func rfc3339Page(q url.Values, fromKey, toKey, limitKey string, def, most int) (pq pageQuery, bad string) {
	from, ferr := time.Parse(time.RFC3339, q.Get(fromKey))
	to, terr := time.Parse(time.RFC3339, q.Get(toKey))
	if ferr != nil || terr != nil || !to.After(from) {
		return pageQuery{}, fromKey
	}
	limit, ok := pageLimit(q.Get(limitKey), def, most)
	if !ok {
		return pageQuery{}, limitKey
	}
	return pageQuery{from: from, to: to, limit: limit}, ""
}

var stripeList = listShape{
	path: "/v1/payment_intents",
	query: func(q url.Values) (pageQuery, string) {
		gte, gerr := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
		lt, lerr := strconv.ParseInt(q.Get("created[lt]"), 10, 64)
		if gerr != nil || lerr != nil || lt <= gte {
			return pageQuery{}, "created"
		}
		limit, ok := pageLimit(q.Get("limit"), 10, 100)
		if !ok {
			return pageQuery{}, "limit"
		}
		after := q.Get("starting_after")
		return pageQuery{from: time.Unix(gte, 0), to: time.Unix(lt, 0), cursor: after, limit: limit,
			offset: func(ids []string) (int, bool) {
				if after == "" {
					return 0, true
				}
				for i, id := range ids {
					if id == after {
						return i + 1, true
					}
				}
				return 0, false
			}}, ""
	},
	body: func(h *shaped, q url.Values, _ pageQuery, pg servedPage) any {
		o := h.spec.object(payments.KindPayment)
		data := make([]any, len(pg.records))
		for i, rec := range pg.records {
			data[i] = o.write(h.written(o, rec))
		}
		return map[string]any{"object": "list", "url": "/v1/payment_intents", "has_more": pg.more, "data": data}
	},
	listed: func(string) bool { return true },
}

var squareList = listShape{
	path: "/v2/payments",
	query: func(q url.Values) (pageQuery, string) {
		pq, bad := rfc3339Page(q, "begin_time", "end_time", "limit", 100, 100)
		if bad != "" {
			return pq, bad
		}
		pq.cursor = q.Get("cursor")
		offset, ok := offsetCursor(pq.cursor)
		if !ok {
			return pageQuery{}, "cursor"
		}
		pq.offset = func([]string) (int, bool) { return offset, true }
		return pq, ""
	},
	body: func(h *shaped, q url.Values, _ pageQuery, pg servedPage) any {
		o := h.spec.object(payments.KindPayment)
		list := make([]any, len(pg.records))
		for i, rec := range pg.records {
			// The list's elements are the payments themselves, not
			// the lookup's {"payment": ...}.
			list[i] = o.write(written{rec: rec, word: o.wordOf(rec, rec.AmountMinor), amount: rec.AmountMinor}).(map[string]any)["payment"]
		}
		body := map[string]any{"payments": list}
		if pg.more {
			body["cursor"] = "o" + strconv.Itoa(pg.end)
		}
		return body
	},
	listed: func(string) bool { return true },
}

// paypalStatus is the reporting list's letter of each status it lists.
var paypalStatus = map[string]string{payments.StatusSucceeded: "S", payments.StatusPending: "P", payments.StatusFailed: "D",
	payments.StatusRefunded: "V"}

var paypalList = listShape{
	path: "/v1/reporting/transactions",
	query: func(q url.Values) (pageQuery, string) {
		pq, bad := rfc3339Page(q, "start_date", "end_date", "page_size", 100, 500)
		if bad != "" {
			return pq, bad
		}
		number := 1
		if v := q.Get("page"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return pageQuery{}, "page"
			}
			number = n
		}
		// The first page is named by no cursor, as the client asks it.
		if number > 1 {
			pq.cursor = strconv.Itoa(number)
		}
		pq.offset = func([]string) (int, bool) { return (number - 1) * pq.limit, true }
		return pq, ""
	},
	body: func(_ *shaped, q url.Values, pq pageQuery, pg servedPage) any {
		details := make([]any, len(pg.records))
		for i, rec := range pg.records {
			details[i] = map[string]any{"transaction_info": map[string]any{
				"transaction_id": rec.ID, "transaction_event_code": "T0006", "transaction_status": paypalStatus[rec.Status],
				"transaction_amount": paypalMoney(rec.AmountMinor, rec.Currency)}}
		}
		number := 1
		if pq.cursor != "" {
			number, _ = strconv.Atoi(pq.cursor)
		}
		return map[string]any{"transaction_details": details, "account_number": "SIMULATED",
			"start_date": q.Get("start_date"), "end_date": q.Get("end_date"), "page": number,
			"total_items": pg.total, "total_pages": int(math.Ceil(float64(pg.total) / float64(pq.limit)))}
	},
	listed: func(status string) bool { _, ok := paypalStatus[status]; return ok },
}

// serveList answers one page of the shape's list of payments.
func (h *shaped) serveList(w http.ResponseWriter, r *http.Request, ls *listShape) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeJSON(w, http.StatusMethodNotAllowed, h.spec.err(http.StatusMethodNotAllowed, nil, ""))
		return
	}
	q := r.URL.Query()
	pq, bad := ls.query(q)
	if bad != "" {
		writeJSON(w, http.StatusBadRequest, h.spec.err(http.StatusBadRequest, nil, bad))
		return
	}
	// Stripe lists a connected account's objects with its header, the
	// platform's own without one.
	account := ""
	if h.shape == ShapeStripe {
		account = r.Header.Get("Stripe-Account")
	}
	pq.filter = h.shape.String() + "/" + account
	pq.keep = func(id string) bool {
		rec := h.s.records[id]
		return h.s.kindOf(id) == payments.KindPayment && ls.listed(rec.Status) &&
			(h.shape != ShapeStripe || h.s.cfg.Accounts[id] == account)
	}
	authorized := h.authorized(r)
	pg, refused := h.s.page(w.Header(), pq, func() *answer {
		if authorized {
			return nil
		}
		return &answer{status: http.StatusUnauthorized}
	}, h.s.now())
	if refused != nil {
		writeJSON(w, refused.status, h.spec.err(refused.status, nil, ""))
		return
	}
	writeJSON(w, http.StatusOK, ls.body(h, q, pq, pg))
}
