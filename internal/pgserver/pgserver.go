// Package pgserver starts a private, throwaway PostgreSQL cluster from the
// PostgreSQL binaries installed on the machine. It is the embedded default
// used by `reconcile demo` and by the test suite when no database is
// configured: the cluster listens only on a Unix socket in a temporary
// directory and is removed by Stop.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries can be found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found (looked in `pg_config --bindir` and /usr/lib/postgresql/*/bin): install them with `apt-get install postgresql`")

// Config describes the throwaway cluster to start. The zero value is usable.
type Config struct {
	// BinDir holds initdb and postgres. Defaults to the directory found by
	// FindBinaries.
	BinDir string
	// Durable keeps fsync and synchronous commit on, as on a real server.
	// Defaults to false: a throwaway cluster trades crash safety for speed.
	Durable bool
	// MaxConnections is the server's max_connections. Defaults to 200.
	MaxConnections int
	// Logger receives start and stop messages. Defaults to discarding them.
	Logger *slog.Logger
	// Detachable lets the server outlive this process, for Detach: it runs
	// in a session of its own and is not stopped when this process dies.
	// Defaults to false: the server stops with its parent, even on SIGKILL,
	// so a killed test or demo leaves nothing behind.
	Detachable bool
}

// Cluster is a running throwaway PostgreSQL server. Its methods are safe for
// concurrent use; Stop must be called exactly once.
type Cluster struct {
	dir     string // holds data/ and the socket
	cmd     *exec.Cmd
	exited  chan struct{}
	logger  *slog.Logger
	logFile string
	cfg     Config // with defaults applied, for StartStandby
	owner   *ids
}

// superuser is the name given to the cluster's bootstrap superuser.
const superuser = "postgres"

// FindBinaries returns the directory holding the PostgreSQL server binaries:
// `pg_config --bindir` when it has initdb, otherwise the newest
// /usr/lib/postgresql/*/bin.
func FindBinaries() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if hasServer(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if hasServer(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// Start initialises a new cluster in a fresh temporary directory and starts
// it. When the process runs as root the cluster is owned by, and runs as, the
// `postgres` user, because PostgreSQL refuses to run as root.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.BinDir == "" {
		dir, err := FindBinaries()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = dir
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = 200
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	owner, err := clusterOwner()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "reconcile-pg-")
	if err != nil {
		return nil, fmt.Errorf("create cluster directory: %w", err)
	}
	c := &Cluster{dir: dir, exited: make(chan struct{}), logger: logger, logFile: filepath.Join(dir, "postgres.log"), cfg: cfg, owner: owner}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(dir)
		}
	}()
	if owner != nil {
		if err := os.Chown(dir, owner.uid, owner.gid); err != nil {
			return nil, fmt.Errorf("hand cluster directory to user postgres: %w", err)
		}
	}

	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"),
		"-D", data, "-U", superuser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.Env = append(os.Environ(), "LC_ALL=C")
	setOwner(initdb, owner)
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb in %s: %w: %s", data, err, lastLines(out, 5))
	}
	if err := c.launch(ctx); err != nil {
		return nil, err
	}
	ok = true
	logger.Debug("throwaway postgres started", "dir", dir)
	return c, nil
}

// launch starts postgres on c.dir/data with its socket in c.dir and waits
// until it accepts connections.
func (c *Cluster) launch(ctx context.Context) error {
	args := []string{"-D", filepath.Join(c.dir, "data"), "-k", c.dir, "-c", "listen_addresses=",
		"-c", "max_connections=" + strconv.Itoa(c.cfg.MaxConnections),
		"-c", "logging_collector=off", "-c", "unix_socket_permissions=0777"}
	if !c.cfg.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	logf, err := os.Create(c.logFile)
	if err != nil {
		return fmt.Errorf("create server log: %w", err)
	}
	defer logf.Close()
	// Not CommandContext: the server must outlive the start-up context and is
	// stopped by Stop.
	c.cmd = exec.Command(filepath.Join(c.cfg.BinDir, "postgres"), args...)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.Env = append(os.Environ(), "LC_ALL=C")
	setOwner(c.cmd, c.owner)
	if c.cfg.Detachable {
		ownSession(c.cmd)
	} else {
		dieWithParent(c.cmd)
	}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()

	if err := c.waitReady(ctx); err != nil {
		_ = c.cmd.Process.Kill()
		<-c.exited
		return err
	}
	return nil
}

// waitReady polls until the server accepts connections, it exits, or ctx ends.
func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.After(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.ConnString(superuser))
		if err == nil {
			_ = conn.Close(ctx)
			return nil
		}
		select {
		case <-c.exited:
			log, _ := os.ReadFile(c.logFile)
			return fmt.Errorf("postgres exited during start-up: %s", lastLines(log, 5))
		case <-deadline:
			return fmt.Errorf("postgres did not accept connections within 60s: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ConnString returns a libpq keyword/value connection string for database
// dbname on the cluster, as its superuser.
func (c *Cluster) ConnString(dbname string) string {
	return fmt.Sprintf("host=%s port=5432 user=%s dbname=%s sslmode=disable", c.dir, superuser, dbname)
}

// SocketDir is the directory holding the cluster's Unix socket, for psql -h.
func (c *Cluster) SocketDir() string { return c.dir }

// Stop shuts the server down (fast mode) and removes its directory.
func (c *Cluster) Stop() error {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sigFastShutdown)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
	}
	if err := os.RemoveAll(c.dir); err != nil {
		return fmt.Errorf("remove cluster directory: %w", err)
	}
	c.logger.Debug("throwaway postgres stopped")
	return nil
}

// Detach leaves the server running for the user (`reconcile demo --keep`)
// and returns its directory, which holds the socket and data/; stop it with
// `pg_ctl -D DIR/data stop`. It needs Config.Detachable; without it the
// server still stops when this process exits.
func (c *Cluster) Detach() string { return c.dir }

type ids struct{ uid, gid int }

// clusterOwner returns the postgres user's ids when running as root, nil
// otherwise (the cluster then runs as the current user).
func clusterOwner() (*ids, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL must run as another user, and user postgres does not exist: %w (install the postgresql package or run as a normal user)", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &ids{uid: uid, gid: gid}, nil
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
}
