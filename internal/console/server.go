package console

import (
	"log/slog"
	"net/http"
	"time"
)

// The console's server timeouts. A client gets enough time to send a small
// form slowly and to read a page, never an open-ended hold on a connection.
const (
	// readHeaderTimeout bounds the request line and headers (and the whole
	// request when Config.ReadTimeout is shorter).
	readHeaderTimeout = 5 * time.Second
	// idleTimeout is how long a kept-alive connection may wait for its
	// next request.
	idleTimeout = 2 * time.Minute
	// maxHeaderBytes bounds the request's headers: a session cookie and a
	// proxy's headers fit many times over.
	maxHeaderBytes = 64 << 10
)

// writeTimeout is how long a page may take from its request to its last
// byte: the page's statements (each bounded by StatementTimeout) and the
// client's reading. Exports, verification and bundles extend their own
// deadline (see exportDeadline).
func (h *Handler) writeTimeout() time.Duration { return 10*h.cfg.StatementTimeout + 10*time.Second }

// NewServer returns an http.Server that serves h with the timeouts the
// console needs (read header 5 s, read Config.ReadTimeout, write ten
// statement timeouts plus 10 s, idle 2 min, 64 KiB of headers): without
// them one client holds a connection and a goroutine for as long as it
// likes, sending a body it announced and never finishes.
func (h *Handler) NewServer(logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(readHeaderTimeout, h.cfg.ReadTimeout),
		ReadTimeout:       h.cfg.ReadTimeout,
		WriteTimeout:      h.writeTimeout(),
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// exportDeadline lets a response that reads whole runs (an export, a
// verification, a bundle) write until ExportTimeout from now instead of the
// server's page deadline. Writers that do not support deadlines (a test
// recorder, another server's) keep theirs.
func (h *Handler) exportDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.ExportTimeout + time.Second))
}
