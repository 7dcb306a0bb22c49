package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/reconcile/reconcile/migrations"
)

func cmdMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "", "Apply every embedded schema migration not yet applied. Re-running is a no-op.",
		"DATABASE_URL=postgres://reconcile@db/reconcile reconcile migrate")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	pool.Close()
	r, err := migrations.Up(ctx, pool.Config().ConnString())
	if err != nil {
		return err
	}
	if len(r.Applied) == 0 {
		fmt.Fprintf(e.stdout, "schema is up to date at version %d\n", r.Current)
	} else {
		fmt.Fprintf(e.stdout, "applied %d migration(s) %v; schema now at version %d\n", len(r.Applied), r.Applied, r.Current)
	}
	return nil
}

func cmdVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "", "Print the version of this binary.", "reconcile version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	version := "(devel)"
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		version = info.Main.Version
	}
	fmt.Fprintf(e.stdout, "reconcile %s\n", version)
	return nil
}
