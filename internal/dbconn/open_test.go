package dbconn_test

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestOpenConnectsOnce checks that a direct database is opened with one
// connection: each is a backend start and an authentication, most of a
// short command's time (`status`, `limit show`). A counting proxy stands
// between the pool and the server.
func TestOpenConnectsOnce(t *testing.T) {
	connString := pgtest.ConnString(t)
	target, err := pgx.ParseConfig(connString)
	if err != nil {
		t.Fatal(err)
	}
	network, address := "tcp", net.JoinHostPort(target.Host, fmt.Sprint(target.Port))
	if strings.HasPrefix(target.Host, "/") {
		network, address = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", target.Host, target.Port)
	}
	proxy, accepted := countingProxy(t, network, address)

	_, port, _ := net.SplitHostPort(proxy)
	pool, err := dbconn.Open(t.Context(), dbconn.Config{URL: connString + " host=127.0.0.1 port=" + port})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for range 3 {
		if _, err := pool.Exec(t.Context(), "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("Open and three statements made %d connections, want 1", n)
	}
}

// countingProxy forwards every connection made to the address it returns to
// network/address, and counts them.
func countingProxy(t *testing.T, network, address string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			server, err := net.Dial(network, address)
			if err != nil {
				client.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(server, client); server.Close() }()
			go func() { defer wg.Done(); io.Copy(client, server); client.Close() }()
		}
	}()
	return ln.Addr().String(), &accepted
}
