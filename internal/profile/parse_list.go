package profile

import (
	"strings"

	"github.com/reconcile/reconcile/internal/payments"
)

// list decodes the list request (list mode) of a profile.
func (d *parser) list(n node, key string, l *List) error {
	l.Request.Method, l.TimeFormat = "GET", TimeRFC3339
	var pagingNode node
	hasPaging := false
	err := d.object(n, key, fields{
		"method": func(n node, key string) (err error) {
			if l.Request.Method, err = d.str(n, key); err != nil {
				return err
			}
			if l.Request.Method != "GET" {
				return d.errf(n, key, "%q: a list is read with GET", l.Request.Method)
			}
			return nil
		},
		"path": func(n node, key string) (err error) {
			if l.Request.Path, err = d.str(n, key); err != nil {
				return err
			}
			if !strings.HasPrefix(l.Request.Path, "/") || strings.ContainsAny(l.Request.Path, "?# \t\r\n{}") {
				return d.errf(n, key, "%q: want a path starting with /, without placeholders (the window and cursor go in list.query)", l.Request.Path)
			}
			return nil
		},
		"query": func(n node, key string) (err error) {
			l.Request.Query, err = d.pairsOf(n, key, false, listPlaceholders)
			return err
		},
		"headers": func(n node, key string) (err error) {
			l.Request.Headers, err = d.pairsOf(n, key, true, listPlaceholders)
			return err
		},
		"time_format": func(n node, key string) error {
			f, err := d.choice(n, key, timeFormatNames)
			l.TimeFormat = TimeFormat(f)
			return err
		},
		"page_size": func(n node, key string) (err error) {
			l.PageSize, err = d.integer(n, key, 1, maxPageSize)
			return err
		},
		"wrap": func(n node, key string) (err error) {
			if l.Wrap, err = d.str(n, key); err != nil {
				return err
			}
			if !isWord(l.Wrap) {
				return d.errf(n, key, "%q: want a key of letters, digits and _", l.Wrap)
			}
			return nil
		},
		"record": func(n node, key string) error {
			l.ownReading = true
			l.Object.Kind, l.Object.Reading.Record.AmountFormat = payments.KindPayment, AmountMinor
			return d.record(n, key, &l.Object.Reading.Record)
		},
		"status_map": func(n node, key string) error { return d.statusMap(n, key, &l.Object.Reading) },
		"records":    func(n node, key string) (err error) { l.Records, err = d.path(n, key); return err },
		"paging": func(n node, key string) error {
			pagingNode, hasPaging = n, true
			return d.object(n, key, fields{
				"style": func(n node, key string) error {
					s, err := d.choice(n, key, pagingStyleNames)
					l.Paging.Style = PagingStyle(s)
					return err
				},
				"next":        func(n node, key string) (err error) { l.Paging.Next, err = d.path(n, key); return err },
				"has_more":    func(n node, key string) (err error) { l.Paging.HasMore, err = d.path(n, key); return err },
				"total_pages": func(n node, key string) (err error) { l.Paging.TotalPages, err = d.path(n, key); return err },
			}, nil)
		},
	}, nil)
	if err != nil {
		return err
	}
	if l.Object.Reading.StatusMap != nil && !l.ownReading {
		return &Error{File: d.file, Line: n.line, Key: join(key, "status_map"), Msg: "goes with a list.record of its own; without one the lookup's status map reads the list"}
	}
	if l.ownReading && l.Wrap != "" {
		return &Error{File: d.file, Line: n.line, Key: join(key, "wrap"), Msg: "reads records with the lookup's paths; a list with a record of its own has no use for it"}
	}
	missing := func(k string, on node) error {
		return &Error{File: d.file, Line: on.line, Key: join(key, k), Msg: "required key missing"}
	}
	switch {
	case l.Request.Path == "":
		return missing("path", n)
	case l.Records == "":
		return missing("records", n)
	case l.PageSize == 0:
		return missing("page_size", n)
	case !hasPaging:
		return missing("paging", n)
	}
	p := l.Paging
	switch {
	case p.Style == 0:
		return missing("paging.style", pagingNode)
	case p.Style == PagingCursor && p.Next == "":
		return &Error{File: d.file, Line: pagingNode.line, Key: join(key, "paging.next"), Msg: "required by style cursor: the path of the next page's cursor"}
	case p.Style == PagingLastID && p.HasMore == "":
		return &Error{File: d.file, Line: pagingNode.line, Key: join(key, "paging.has_more"), Msg: "required by style last_id: the path of the more-pages flag"}
	case p.Style == PagingPage && p.TotalPages == "":
		return &Error{File: d.file, Line: pagingNode.line, Key: join(key, "paging.total_pages"), Msg: "required by style page: the path of the page count"}
	}
	uses := func(word string) bool {
		for _, ps := range [][]Pair{l.Request.Query, l.Request.Headers} {
			for _, q := range ps {
				if strings.Contains(q.Value, "{"+word+"}") {
					return true
				}
			}
		}
		return false
	}
	for _, word := range []string{"from", "to", "cursor"} {
		if !uses(word) {
			return &Error{File: d.file, Line: n.line, Key: join(key, "query"),
				Msg: "{" + word + "} appears in neither the query nor the headers: every page must be asked for the window and the cursor"}
		}
	}
	return nil
}
