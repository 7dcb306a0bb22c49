// Package pgbouncertest puts a PgBouncer in front of a test database, so tests
// can run the product through a connection pooler the way most managed
// PostgreSQL offerings do.
//
// Start runs the pgbouncer binary of the machine (Debian's package installs
// it as /usr/sbin/pgbouncer; .ci/run installs it when missing) on a loopback
// port, in transaction pooling mode by default, with trust authentication
// towards the throwaway cluster of pgtest, and stops it when the test ends.
// PgBouncer refuses to run as root, so as root it runs as the postgres user,
// as the cluster does.
package pgbouncertest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config describes the PgBouncer to start. The zero value is usable.
type Config struct {
	// PoolMode is PgBouncer's pool_mode: transaction, session or statement.
	// Defaults to "transaction".
	PoolMode string
	// PoolSize is default_pool_size, the server connections per database and
	// user: fewer than the client connections, so that clients really share
	// them. Defaults to 8.
	PoolSize int
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	// Port is the loopback TCP port it listens on.
	Port int
	cmd  *exec.Cmd
	done chan struct{}
	log  *syncBuffer
}

// Binary returns the path of the pgbouncer binary: the one on PATH, else
// /usr/sbin/pgbouncer.
func Binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(debian); err != nil {
		return "", fmt.Errorf("no pgbouncer binary on PATH or at %s: install it with `apt-get install pgbouncer`", debian)
	}
	return debian, nil
}

// Start starts a PgBouncer in front of the server that connString (a
// keyword/value or URL connection string, as pgtest.ConnString returns)
// points at, and returns the same connection string with host and port
// replaced by PgBouncer's. It fails the test when pgbouncer cannot be
// started and stops it when t ends.
func Start(t testing.TB, connString string, cfg Config) string {
	t.Helper()
	b, through, err := Run(connString, cfg)
	if err != nil {
		t.Fatalf("pgbouncertest: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Stop(); err != nil {
			t.Errorf("pgbouncertest: %v", err)
		}
	})
	return through
}

// Run starts a PgBouncer as Start does, outside a test (a benchmark, say):
// it returns the running PgBouncer, which the caller stops, and the
// connection string through it.
func Run(connString string, cfg Config) (*Bouncer, string, error) {
	cfg.PoolMode = cmp.Or(cfg.PoolMode, "transaction")
	cfg.PoolSize = cmp.Or(cfg.PoolSize, 8)
	bin, err := Binary()
	if err != nil {
		return nil, "", err
	}
	target, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, "", fmt.Errorf("parse connection string: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "reconcile-pgbouncer-")
	if err != nil {
		return nil, "", fmt.Errorf("create config directory: %w", err)
	}
	owner, err := runAs()
	if err != nil {
		return nil, "", err
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d user=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
max_db_connections = %d
ignore_startup_parameters = extra_float_digits
server_reset_query =
server_check_delay = 0
`, target.Host, target.Port, target.User, port, filepath.Join(dir, "userlist.txt"), cfg.PoolMode, cfg.PoolSize, cfg.PoolSize)
	files := map[string]string{
		"pgbouncer.ini": ini,
		"userlist.txt":  fmt.Sprintf("%q \"\"\n", target.User),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			return nil, "", fmt.Errorf("write %s: %w", name, err)
		}
	}
	if owner != nil {
		if err := chownAll(dir, owner); err != nil {
			return nil, "", err
		}
	}
	b := &Bouncer{Port: port, done: make(chan struct{}), log: &syncBuffer{}}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = dir
	b.cmd.Stdout, b.cmd.Stderr = b.log, b.log
	setProcAttr(b.cmd, owner)
	if err := b.cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		_ = b.cmd.Wait()
		_ = os.RemoveAll(dir)
		close(b.done)
	}()
	through := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", port, target.User, target.Database)
	if err := b.waitReady(through); err != nil {
		_ = b.Stop()
		return nil, "", err
	}
	return b, through, nil
}

// waitReady polls until a query goes through PgBouncer to the server.
func (b *Bouncer) waitReady(connString string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, connString)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			_ = conn.Close(ctx)
			if err == nil {
				return nil
			}
		}
		select {
		case <-b.done:
			return fmt.Errorf("pgbouncer exited during start-up: %s", lastLines(b.log.String(), 5))
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer did not pass a query within 30s: %w (log: %s)", err, lastLines(b.log.String(), 5))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop stops PgBouncer (SIGINT: at once, closing every connection) and waits
// for it to exit.
func (b *Bouncer) Stop() error {
	select {
	case <-b.done:
		return nil
	default:
	}
	_ = b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
		return fmt.Errorf("pgbouncer did not stop within 10s; killed it")
	}
	return nil
}

// Log returns what PgBouncer has logged so far.
func (b *Bouncer) Log() string { return b.log.String() }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type ids struct{ uid, gid int }

// runAs returns the postgres user's ids when running as root (PgBouncer
// refuses to run as root), nil otherwise.
func runAs() (*ids, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, pgbouncer must run as another user, and user postgres does not exist: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &ids{uid: uid, gid: gid}, nil
}

func chownAll(dir string, owner *ids) error {
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := os.Chown(path, owner.uid, owner.gid); err != nil {
			return fmt.Errorf("hand %s to user postgres: %w", path, err)
		}
		return nil
	})
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a process's
// stdout and stderr and a reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}
