// Package pgtest gives each test its own freshly migrated PostgreSQL database.
//
// A test binary uses the server named by DATABASE_URL (or the PG* variables
// when PGHOST is set); otherwise it starts a throwaway cluster with pgserver
// and removes it when the tests end. Every database is cloned from a template
// migrated once per test binary, so a new database costs a file copy, and is
// dropped in t.Cleanup. When no database can be had the test fails: it never
// skips.
//
// Packages that use it call Main from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/migrations"
)

// server is the database server shared by the tests of one test binary. It
// is process state by necessity: TestMain owns its lifetime.
var server struct {
	once     sync.Once
	err      error
	cluster  *pgserver.Cluster
	admin    *pgx.ConnConfig // a connection to the server's maintenance database
	template string
	mu       sync.Mutex // serialises CREATE DATABASE from the template
}

// Main runs the package's tests and stops the throwaway cluster, if one was
// started, before exiting with the tests' status.
func Main(m *testing.M) {
	code := m.Run()
	if server.cluster != nil {
		if err := dropDatabase(context.Background(), server.template); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		if err := server.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	} else if server.template != "" {
		if err := dropDatabase(context.Background(), server.template); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	os.Exit(code)
}

// ConnString returns the connection string of a fresh, migrated database that
// is dropped when t ends. Use it to hand the database to a subprocess.
func ConnString(t testing.TB) string {
	t.Helper()
	return create(t, true)
}

// EmptyConnString returns the connection string of a fresh database that was
// never migrated, dropped when t ends: for tests of what commands do on one.
func EmptyConnString(t testing.TB) string {
	t.Helper()
	return create(t, false)
}

// create creates a database, a copy of the migrated template when migrated,
// dropped when t ends, and returns its connection string.
func create(t testing.TB, migrated bool) string {
	t.Helper()
	ctx := context.Background()
	server.once.Do(func() { server.err = setup(ctx) })
	if server.err != nil {
		t.Fatalf("pgtest: no database server: %v", server.err)
	}
	name := "reconcile_test_" + randomSuffix()
	server.mu.Lock()
	stmt := "CREATE DATABASE " + name
	if migrated {
		stmt += " TEMPLATE " + server.template
	}
	err := exec(ctx, stmt)
	server.mu.Unlock()
	if err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(context.WithoutCancel(ctx), name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return connStringFor(name)
}

// New returns a pool on a fresh, migrated database that is closed and dropped
// when t ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(ConnString(t))
	if err != nil {
		t.Fatalf("pgtest: parse connection string: %v", err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// setup finds or starts the server and migrates the template database.
func setup(ctx context.Context) error {
	if os.Getenv("DATABASE_URL") != "" || os.Getenv("PGHOST") != "" {
		cfg, err := pgx.ParseConfig(os.Getenv("DATABASE_URL"))
		if err != nil {
			return fmt.Errorf("parse DATABASE_URL: %w", err)
		}
		server.admin = cfg
	} else {
		c, err := pgserver.Start(ctx, pgserver.Config{})
		if err != nil {
			return err
		}
		server.cluster = c
		cfg, err := pgx.ParseConfig(c.ConnString("postgres"))
		if err != nil {
			return err
		}
		server.admin = cfg
	}
	server.template = "reconcile_template_" + randomSuffix()
	if err := exec(ctx, "CREATE DATABASE "+server.template); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	if _, err := migrations.Up(ctx, connStringFor(server.template)); err != nil {
		return fmt.Errorf("migrate template database: %w", err)
	}
	return nil
}

// connStringFor returns a connection string for database name on the server.
func connStringFor(name string) string {
	cfg := server.admin
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=%s password=%s",
		quote(cfg.Host), cfg.Port, quote(cfg.User), name, sslMode(cfg), quote(cfg.Password))
}

func sslMode(cfg *pgx.ConnConfig) string {
	if cfg.TLSConfig == nil {
		return "disable"
	}
	return "prefer"
}

// quote quotes a libpq keyword/value connection string value.
func quote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}

func exec(ctx context.Context, sql string) error {
	conn, err := pgx.ConnectConfig(ctx, server.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func dropDatabase(ctx context.Context, name string) error {
	if err := exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
