package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pageFunc serves one console route for an authorised user.
type pageFunc func(w http.ResponseWriter, r *http.Request, u User) error

// httpError is an error with the status it is answered with.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func notFound(format string, args ...any) error {
	return &httpError{code: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

func badRequest(format string, args ...any) error {
	return &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// requestStats counts what a request cost; the page wrapper puts one in the
// request's context and render reports it in the X-Console-Queries header.
type requestStats struct {
	queries int
}

type statsKey struct{}

func statsOf(ctx context.Context) *requestStats {
	if s, ok := ctx.Value(statsKey{}).(*requestStats); ok {
		return s
	}
	return &requestStats{}
}

// page authenticates the request, refuses users below min with 403 (on
// every method: the server, not the page, decides who may act) and serves
// fn, rendering its error if it fails.
func (h *Handler) page(min Role, fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := h.auth.authenticate(r)
		if errors.Is(err, errUnauthenticated) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.fail(w, r, nil, &httpError{code: http.StatusUnauthorized, msg: "log in first"})
			return
		}
		if err != nil {
			h.fail(w, r, nil, err)
			return
		}
		if u.Role < min {
			h.cfg.Logger.Warn("console request refused", "user", u.Name, "role", u.Role.String(),
				"method", r.Method, "path", r.URL.Path)
			h.fail(w, r, &u, &httpError{code: http.StatusForbidden,
				msg: fmt.Sprintf("%s is an %s: only operators may do this", u.Name, u.Role)})
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), statsKey{}, &requestStats{}))
		if err := fn(w, r, u); err != nil {
			h.fail(w, r, &u, err)
		}
	})
}

// fail answers err as an error page with its status.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, u *User, err error) {
	code, msg := http.StatusInternalServerError, "internal error; see the console's log"
	var he *httpError
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &he):
		code, msg = he.code, he.msg
	case errors.As(err, &pe) && pe.Code == "57014":
		code, msg = http.StatusServiceUnavailable, "the database took longer than the console's statement timeout"
	case errors.Is(err, context.DeadlineExceeded):
		code, msg = http.StatusServiceUnavailable, "the request took too long"
	}
	if code >= 500 {
		h.cfg.Logger.Error("console request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	h.render(w, r, code, "error", view{Title: http.StatusText(code), User: u, Error: msg})
}

// view is what every page template gets.
type view struct {
	Title string
	User  *User
	// Error and Notice are shown above the page's content.
	Error  string
	Notice string
	// Refresh, when positive, makes the page reload every Refresh seconds
	// while visible (static/refresh.js).
	Refresh int
	Data    any
}

// Operator reports whether the viewer may act; templates use it to leave
// out forms an auditor could not submit anyway.
func (v view) Operator() bool { return v.User != nil && v.User.Role == Operator }

// render executes page name into a buffer and writes it with code, so a
// template error never leaves half a page, with every invisible formatting
// character shown by its code point (see showInvisible).
func (h *Handler) render(w http.ResponseWriter, r *http.Request, code int, name string, v view) {
	var buf bytes.Buffer
	if err := h.pages.execute(&buf, name, v); err != nil {
		h.cfg.Logger.Error("render console page", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Console-Queries", strconv.Itoa(statsOf(r.Context()).queries))
	w.WriteHeader(code)
	_, _ = w.Write(showInvisible(buf.Bytes()))
}

// reader runs a page's queries in its read-only transaction and counts
// them. It satisfies report.DB.
type reader struct {
	tx    pgx.Tx
	stats *requestStats
}

// Query runs a query in the page's transaction.
func (rd *reader) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rd.stats.queries++
	return rd.tx.Query(ctx, sql, args...)
}

// QueryRow runs a one-row query in the page's transaction.
func (rd *reader) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rd.stats.queries++
	return rd.tx.QueryRow(ctx, sql, args...)
}

// read runs fn in one read-only repeatable-read transaction (a consistent
// snapshot for the whole page) whose statements time out after timeout and
// are each planned for their arguments.
func (h *Handler) read(ctx context.Context, timeout time.Duration, fn func(rd *reader) error) error {
	return h.readOn(ctx, h.cfg.Pool, timeout, fn)
}

// readOn is read on a connection of pool.
func (h *Handler) readOn(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration, fn func(rd *reader) error) error {
	stats := statsOf(ctx)
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second)
	defer cancel()
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			rd := &reader{tx: tx, stats: stats}
			var s string
			// Every statement is planned for its values: a generic plan of
			// a cached statement cannot know that limiter = $1 is selective
			// or that $1 IS NULL, and walks the wrong index.
			if err := rd.QueryRow(ctx, `SELECT set_config('statement_timeout', $1, true) || set_config('plan_cache_mode', 'force_custom_plan', true)`,
				strconv.FormatInt(timeout.Milliseconds(), 10)).Scan(&s); err != nil {
				return fmt.Errorf("set statement timeout: %w", err)
			}
			return fn(rd)
		})
}
