// Package httpserve runs an HTTP server for as long as a context lasts: the
// metrics endpoint and the provider simulator both need exactly that.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ShutdownGrace is how long in-flight requests may take to finish once the
// context ends, before the connections are closed.
const ShutdownGrace = 5 * time.Second

// Serve serves srv on ln until ctx ends, then shuts it down gracefully. ready,
// when not nil, is called with the listening address before the first
// request is accepted. It returns an error only when serving failed.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, ready func(net.Addr)) error {
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	}
	return nil
}
