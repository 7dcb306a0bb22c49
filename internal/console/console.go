// Package console is the web console of reconcile: an http.Handler that
// shows runs, a run's progress and limit chart, discrepancies, dead letters
// and a transaction's verified history, and lets operators act on them.
//
// Pages are server-rendered with html/template and work without JavaScript;
// one small vendored script refreshes a running run's page while the tab is
// visible. Every request is authenticated (see Auth) and authorised on the
// server: auditors read everything and act on nothing, operators may also
// redrive, re-run, cancel and set limits. Unsafe methods pass through
// http.CrossOriginProtection, and the Content-Security-Policy allows no
// inline script.
//
// Every page reads in one read-only transaction with a statement_timeout,
// and reads a bounded amount of data whatever the size of the ledger: the
// runs list pages by key, counts are capped, items are scanned in windows of
// Config.Window rows, and the chart samples the history of large runs.
// Pages read, and actions write, only through the packages that own the
// tables (ledger, queue, limiter; enqueue for actions): the console runs no
// SQL on them.
package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/queue"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the console.
type Config struct {
	// Pool is the database. Required.
	Pool *pgxpool.Pool
	// Auth says who may use the console. Required (see Auth.Validate).
	Auth Auth
	// Queue is the queue actions redrive through. Defaults to a queue on
	// Pool with the queue's defaults.
	Queue *queue.Queue
	// Limiter names the limiter whose limits a run's chart shows. Defaults
	// to limiter.DefaultName.
	Limiter string
	// StatementTimeout bounds every statement of a page. Defaults to 2s.
	StatementTimeout time.Duration
	// ExportTimeout bounds exports, audit verification and bundles, which
	// read whole runs, from the request to the last byte sent. Defaults to
	// 5m.
	ExportTimeout time.Duration
	// MaxExports is how many exports, verifications and bundles run at
	// once (one per user), each on a connection of their own pool of this
	// size, so that they never take a page's connection. Defaults to 2.
	MaxExports int
	// TempDir is where exports are staged before they are sent. Defaults
	// to os.TempDir().
	TempDir string
	// ReadTimeout bounds the reading of a whole request, body included, by
	// the server NewServer returns: a form of at most 64 KiB arrives within
	// the default at 5 KiB/s. Defaults to 15s.
	ReadTimeout time.Duration
	// PageSize is the number of rows per page. Defaults to 50.
	PageSize int
	// Window is the number of items a discrepancy page scans at most.
	// Defaults to 20,000.
	Window int
	// CountCap is where counts stop counting and show "N+". Defaults to
	// 10,000.
	CountCap int
	// Refresh is how often a running run's page reloads while visible; at
	// least 5s. Defaults to 5s.
	Refresh time.Duration
	// OpenSource opens a run's recorded source for a full re-run. Defaults
	// to os.Open for sources that are file paths.
	OpenSource func(source string) (io.ReadCloser, error)
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger receives one line per action and per failed request. Defaults
	// to discarding them.
	Logger *slog.Logger
}

// Handler is the console. It is safe for concurrent use. Close closes the
// connections of its exports.
type Handler struct {
	cfg     Config
	pages   *pages
	auth    *authenticator
	mux     http.Handler
	exports *exportSlots
	// exportPool holds the exports' own connections.
	exportPool *pgxpool.Pool
}

// New returns the console for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Pool == nil {
		return nil, errors.New("console: Config.Pool is required")
	}
	if err := cfg.Auth.Validate(); err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	if cfg.Queue == nil {
		cfg.Queue = queue.New(cfg.Pool, queue.Config{})
	}
	cfg.Limiter = cmp.Or(cfg.Limiter, limiter.DefaultName)
	cfg.StatementTimeout = cmp.Or(cfg.StatementTimeout, 2*time.Second)
	cfg.ExportTimeout = cmp.Or(cfg.ExportTimeout, 5*time.Minute)
	cfg.MaxExports = cmp.Or(cfg.MaxExports, 2)
	cfg.TempDir = cmp.Or(cfg.TempDir, os.TempDir())
	cfg.ReadTimeout = cmp.Or(cfg.ReadTimeout, 15*time.Second)
	cfg.PageSize = cmp.Or(cfg.PageSize, 50)
	cfg.Window = cmp.Or(cfg.Window, 20_000)
	cfg.CountCap = cmp.Or(cfg.CountCap, 10_000)
	cfg.Refresh = max(cfg.Refresh, 5*time.Second)
	if cfg.OpenSource == nil {
		cfg.OpenSource = openFileSource
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := parsePages()
	if err != nil {
		return nil, err
	}
	a, err := newAuthenticator(cfg.Auth, cfg.Pool, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	exportPool, err := newExportPool(context.Background(), cfg.Pool, cfg.MaxExports)
	if err != nil {
		return nil, err
	}
	h := &Handler{cfg: cfg, pages: p, auth: a, exportPool: exportPool,
		exports: &exportSlots{max: cfg.MaxExports, users: map[string]bool{}}}
	h.mux = h.routes()
	return h, nil
}

// Close closes the exports' connections. The console answers no export
// afterwards.
func (h *Handler) Close() { h.exportPool.Close() }

// ServeHTTP serves the console.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// routes builds the handler chain: security headers, cross-origin
// protection of unsafe methods, then the mux whose console routes each
// authenticate and authorise.
func (h *Handler) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/{file}", staticFiles(static))
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /login", h.loginForm)
	mux.HandleFunc("POST /login", h.login)
	mux.HandleFunc("POST /logout", h.logout)

	read := func(pattern string, fn pageFunc) { mux.Handle(pattern, h.page(Auditor, fn)) }
	act := func(pattern string, fn pageFunc) { mux.Handle(pattern, h.page(Operator, fn)) }

	read("GET /{$}", h.runsPage)
	read("GET /runs/{run}", h.runPage)
	read("GET /runs/{run}/discrepancies", h.discrepanciesPage)
	read("GET /runs/{run}/dead-letters", h.deadLettersPage)
	read("GET /runs/{run}/tx/{tx...}", h.transactionPage)
	read("GET /runs/{run}/tx", h.transactionPage)
	read("GET /tx", h.transactionSearch)
	read("GET /limits", h.limitsPage)
	read("GET /audit", h.auditPage)
	read("GET /audit/bundle", h.auditBundle)

	act("GET /runs/{run}/redrive", h.redrivePreview)
	act("POST /runs/{run}/redrive", h.redrive)
	act("GET /runs/{run}/rerun", h.rerunPreview)
	act("POST /runs/{run}/rerun", h.rerun)
	act("GET /runs/{run}/cancel", h.cancelPreview)
	act("POST /runs/{run}/cancel", h.cancel)
	act("GET /limits/{name}/set", h.limitPreview)
	act("POST /limits/{name}", h.limitSet)

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.cfg.Logger.Warn("cross-origin request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
	}))
	return securityHeaders(h.localHostOnly(cop.Handler(smallForms(mux))))
}

// staticFiles serves the console's style sheet and script by name; a
// directory is not found rather than listed.
func staticFiles(fsys fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if st, err := fs.Stat(fsys, name); err != nil || !st.Mode().IsRegular() {
			http.NotFound(w, r)
			return
		}
		http.ServeFileFS(w, r, fsys, name)
	})
}

// contentSecurityPolicy allows the console's own style sheet, script and
// images and nothing inline, framed or posted elsewhere.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", contentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// readyz answers 200 when the database answers within the statement
// timeout, 503 otherwise.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.StatementTimeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	var one int
	if err := h.cfg.Pool.QueryRow(ctx, `SELECT 1`).Scan(&one); err != nil {
		h.cfg.Logger.Warn("readiness check failed", "err", err)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "database unavailable\n")
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// openFileSource opens a source recorded as a file path; standard input,
// tables and generated sources cannot be opened again.
func openFileSource(source string) (io.ReadCloser, error) {
	st, err := os.Stat(source)
	if err != nil {
		return nil, fmt.Errorf("source %q: %w", source, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("source %q: not a regular file", source)
	}
	return os.Open(source)
}
