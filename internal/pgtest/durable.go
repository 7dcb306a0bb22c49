package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/migrations"
)

// Durable returns a pool of maxConns connections on a freshly migrated
// database of a server with stock durability, for benchmarks: DATABASE_URL's
// server, or a throwaway cluster with fsync and synchronous commit on that is
// stopped when tb ends. Unlike New it needs no TestMain.
func Durable(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	ctx := context.Background()
	admin := os.Getenv("DATABASE_URL")
	connFor := func(string) string { return "" }
	if admin == "" {
		c, err := pgserver.Start(ctx, pgserver.Config{Durable: true})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			if err := c.Stop(); err != nil {
				tb.Error(err)
			}
		})
		admin, connFor = c.ConnString("postgres"), c.ConnString
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close(ctx)
	name := "reconcile_bench_" + uuid.NewString()[:8]
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			tb.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			tb.Error(err)
		}
	})
	url := connFor(name)
	if url == "" {
		cfg := conn.Config()
		url = fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s", quote(cfg.Host), cfg.Port, quote(cfg.User), quote(cfg.Password), name)
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		tb.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}
