package providersim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/reconcile/reconcile/internal/httpserve"
)

// Serve runs s on addr (host:port; port 0 picks a free one) until ctx ends,
// then shuts down, giving requests in flight up to five seconds. ready, when
// not nil, is called with the listening address once connections are
// accepted.
func Serve(ctx context.Context, s *Server, addr string, ready func(addr net.Addr)) error {
	return ServeHandler(ctx, s, addr, ready)
}

// ServeHandler runs h (a [Server] or a [Shaped] one) on addr like [Serve].
func ServeHandler(ctx context.Context, h http.Handler, addr string, ready func(addr net.Addr)) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	return httpserve.Serve(ctx, srv, ln, ready)
}
