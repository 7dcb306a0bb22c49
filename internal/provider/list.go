package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/reconcile/reconcile/internal/profile"
)

// ErrNoList is returned by [Client.ListPage] when the profile has no list
// request.
var ErrNoList = errors.New("the provider profile has no list request")

// PageRequest asks for one page of the provider's records in a window.
type PageRequest struct {
	// From and To bound the window: From inclusive, To exclusive.
	From, To time.Time
	// Cursor is what the previous page said to ask next with; empty for
	// the first page.
	Cursor string
}

// Listed is one record of a page, in the ledger's terms.
type Listed struct {
	Record
	// Kind is the kind of object listed (payment).
	Kind string
}

// Page is one page of the provider's list.
type Page struct {
	// Records are the page's readable records, in the page's order.
	Records []Listed
	// Unmapped counts records whose status word the profile does not map;
	// they are left out, so their items are looked up one by one and
	// dead-lettered with the word, like any lookup of them.
	Unmapped int
	// Next is the cursor of the next page; empty when this is the last.
	Next string
}

// ListPage fetches one page of the profile's list (list mode). As with
// [Client.Get], a non-2xx answer is not an error but a Response for the
// caller to decide on; the error is an [*Error] when no answer came or a
// 2xx page was unreadable, or [ErrNoList].
func (c *Client) ListPage(ctx context.Context, pr PageRequest) (Response, Page, error) {
	l := c.profile.List
	if l == nil {
		return Response{}, Page{}, ErrNoList
	}
	fail := func(kind ErrorKind, err error) error {
		return &Error{Kind: kind, TransactionID: "list page " + strconv.Quote(pr.Cursor), Err: err}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	vars := strings.NewReplacer("{from}", formatTime(pr.From, l.TimeFormat), "{to}", formatTime(pr.To, l.TimeFormat),
		"{cursor}", pr.Cursor, "{limit}", strconv.Itoa(l.PageSize))
	// The path holds no placeholders; query values are encoded by build.
	req, err := c.build(ctx, &l.Request, func(t string, _ func(string) string) string { return vars.Replace(t) }, "")
	if err != nil {
		return Response{}, Page{}, fail(KindConnection, errors.New("build request"))
	}
	if _, refused, err := c.authorize(ctx, req); err != nil || refused != nil {
		if refused != nil {
			return *refused, Page{}, nil
		}
		if parent.Err() != nil {
			return Response{}, Page{}, fail(KindCanceled, err)
		}
		return Response{}, Page{}, fail(KindConnection, err)
	}
	hresp, err := c.client.Do(req)
	if err != nil {
		return Response{}, Page{}, fail(c.classify(parent, ctx, err), stripURL(err))
	}
	defer hresp.Body.Close()
	out := Response{Status: hresp.StatusCode, Header: hresp.Header}
	out.RetryAfter, out.HasRetryAfter = ParseRetryAfter(hresp.Header.Get(c.profile.Hints.RetryAfter), time.Now())
	body, err := io.ReadAll(io.LimitReader(hresp.Body, c.cfg.MaxBody+1))
	out.BodyExcerpt = excerpt(body)
	ok := hresp.StatusCode >= 200 && hresp.StatusCode < 300
	switch {
	case err != nil && ok:
		return out, Page{}, fail(c.classify(parent, ctx, err), fmt.Errorf("read body: %w", stripURL(err)))
	case int64(len(body)) > c.cfg.MaxBody && ok:
		return out, Page{}, fail(KindBodyTooLarge, fmt.Errorf("page exceeds %d bytes", c.cfg.MaxBody))
	case !ok:
		c.classifyAnswer(&out, body)
		return out, Page{}, nil
	}
	page, err := c.readPage(l, pr, body)
	if err != nil {
		return out, Page{}, fail(KindBadBody, err)
	}
	return out, page, nil
}

// readPage reads the records of a page and the cursor of the next one.
func (c *Client) readPage(l *profile.List, pr PageRequest, body []byte) (Page, error) {
	if !gjson.ValidBytes(body) {
		return Page{}, errors.New("page is not valid JSON")
	}
	recs := gjson.GetBytes(body, l.Records)
	if recs.Exists() && recs.Type != gjson.Null && !recs.IsArray() {
		return Page{}, fmt.Errorf("%s is not an array", l.Records)
	}
	var page Page
	var lastID string
	var readErr error
	recs.ForEach(func(_, v gjson.Result) bool {
		raw := []byte(v.Raw)
		if l.Wrap != "" {
			raw = []byte(`{"` + l.Wrap + `":` + v.Raw + `}`)
		}
		rec, err := c.profile.Extract(&l.Object, raw)
		var unmapped *profile.UnmappedStatusError
		switch {
		case errors.As(err, &unmapped):
			page.Unmapped++
		case err != nil:
			readErr = fmt.Errorf("record %d of the page: %w", len(page.Records)+page.Unmapped, err)
			return false
		default:
			page.Records = append(page.Records, Listed{Record: Record{ID: rec.ID, AmountMinor: rec.AmountMinor,
				Currency: rec.Currency, Status: rec.Status}, Kind: rec.Kind})
		}
		lastID = rec.ID
		return true
	})
	if readErr != nil {
		return Page{}, readErr
	}
	switch p := l.Paging; p.Style {
	case profile.PagingCursor:
		if next := gjson.GetBytes(body, p.Next); next.Type == gjson.String {
			page.Next = next.Str
		} else if next.Type == gjson.Number {
			page.Next = next.Raw
		}
	case profile.PagingLastID:
		if gjson.GetBytes(body, p.HasMore).Bool() && lastID != "" {
			page.Next = lastID
		}
	case profile.PagingPage:
		current := 1
		if pr.Cursor != "" {
			n, err := strconv.Atoi(pr.Cursor)
			if err != nil {
				return Page{}, fmt.Errorf("page cursor %q is not a page number", pr.Cursor)
			}
			current = n
		}
		if total := gjson.GetBytes(body, p.TotalPages).Int(); int64(current) < total && recs.IsArray() && len(recs.Array()) > 0 {
			page.Next = strconv.Itoa(current + 1)
		}
	}
	return page, nil
}

// formatTime writes t as a list request's window wants it.
func formatTime(t time.Time, f profile.TimeFormat) string {
	if f == profile.TimeUnix {
		return strconv.FormatInt(t.Unix(), 10)
	}
	return t.UTC().Format(time.RFC3339)
}
