package providersim

import (
	"context"
	"fmt"
	"github.com/reconcile/reconcile/internal/httpserve"
	"net"
	"net/http"
	"time"
)

// Serve runs s on addr (host:port; port 0 picks a free one) until ctx ends,
// then shuts down, giving requests in flight up to five seconds. ready, when
// not nil, is called with the listening address once connections are
// accepted.
func Serve(ctx context.Context, s *Server, addr string, ready func(addr net.Addr)) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	return httpserve.Serve(ctx, srv, ln, ready)
}
