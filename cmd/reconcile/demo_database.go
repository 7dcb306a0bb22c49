package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/migrations"
)

// sharedDemoDate is the business date of the demo's day on a database given
// with --database-url: no real night is dated in the year 1, so a demo run
// can never make a real date look enqueued already.
var sharedDemoDate = payments.Date{Year: 1, Month: time.January, Day: 1}

// sharedDemoPrefix starts the reconciliation ids of the demo's runs on a
// database given with --database-url.
const sharedDemoPrefix = "demo"

// demoDatabase is the demo's database: a throwaway cluster, or the one
// --database-url names.
type demoDatabase struct {
	url     string
	cluster *pgserver.Cluster // nil for --database-url
	kept    bool              // the cluster was detached and outlives the demo
}

// openDemoDatabase starts a throwaway cluster unless --database-url names a
// database, says which it is, and migrates it. DATABASE_URL is never used:
// it may well point at production.
func openDemoDatabase(ctx context.Context, w io.Writer, logger *slog.Logger, o demoOptions) (*demoDatabase, error) {
	db := &demoDatabase{url: o.databaseURL}
	if db.url == "" {
		cluster, err := pgserver.Start(ctx, pgserver.Config{Logger: logger, Detachable: o.keep})
		if err != nil {
			return nil, fmt.Errorf("demo: start throwaway postgres: %w", err)
		}
		db.cluster = cluster
		if err := createDatabase(ctx, cluster.ConnString("postgres"), "reconcile"); err != nil {
			db.close(logger)
			return nil, err
		}
		db.url = cluster.ConnString("reconcile")
		fate := "removed afterwards"
		if o.keep {
			fate = "kept running afterwards"
		}
		fmt.Fprintf(w, "database: a throwaway PostgreSQL in %s, %s (DATABASE_URL is never used; see --database-url)\n", cluster.SocketDir(), fate)
	} else {
		fmt.Fprintf(w, "database: %s (--database-url); the demo's runs are named %s-%s…\n", dbconn.Redact(db.url), sharedDemoPrefix, sharedDemoDate)
	}
	if _, err := migrations.Up(ctx, db.url); err != nil {
		db.close(logger)
		return nil, fmt.Errorf("demo: migrate: %w", err)
	}
	return db, nil
}

// keep leaves the database for the user and prints how to query it; the
// throwaway cluster is detached so that close leaves it running.
func (db *demoDatabase) keep(w io.Writer, example string) {
	if db.cluster == nil {
		printQueries(w, fmt.Sprintf("psql '%s'", dbconn.Redact(db.url)), example)
		return
	}
	db.kept = true
	dir := db.cluster.Detach()
	printQueries(w, fmt.Sprintf("psql -h %s -U postgres reconcile", dir), example)
	fmt.Fprintf(w, "\nOther commands use it with DATABASE_URL='host=%s user=postgres dbname=reconcile sslmode=disable'.\n", dir)
	fmt.Fprintf(w, "When done: %s && rm -rf %s\n", stopCommand(dir), dir)
}

// close removes the throwaway cluster unless it was kept.
func (db *demoDatabase) close(logger *slog.Logger) {
	if db.cluster == nil || db.kept {
		return
	}
	if err := db.cluster.Stop(); err != nil {
		logger.Warn("throwaway postgres not removed", "err", err)
	}
}

// createDatabase creates database name on the server of connString.
func createDatabase(ctx context.Context, connString, name string) error {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("demo: connect to throwaway postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("demo: create database %s: %w", name, err)
	}
	return nil
}

// stopCommand is the shell command that stops a kept demo server.
func stopCommand(dir string) string {
	bin, err := pgserver.FindBinaries()
	if err != nil {
		bin = "/usr/lib/postgresql/VERSION/bin"
	}
	c := fmt.Sprintf("%s -D %s stop", filepath.Join(bin, "pg_ctl"), filepath.Join(dir, "data"))
	if os.Geteuid() == 0 {
		return "su postgres -s /bin/sh -c '" + c + "'"
	}
	return c
}
