package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/reconcile/reconcile/migrations"
)

func cmdMigrate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "migrate", "[--status]", `Apply every embedded schema migration not yet applied. Re-running is a no-op.

--status applies nothing: it lists the migrations this binary has and
whether the database has applied each, and says whether the schema is the
version this binary needs (exit 1 when it is not).`,
		"DATABASE_URL=postgres://reconcile@db/reconcile reconcile migrate")
	status := fs.Bool("status", false, "list applied and pending migrations; apply nothing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	logger, err := e.logger()
	if err != nil {
		return err
	}
	pool, err := e.dial(ctx, logger, 0)
	if err != nil {
		return err
	}
	if *status {
		defer pool.Close()
		return printMigrationStatus(ctx, e.stdout, pool)
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

// printMigrationStatus writes one line per migration and the schema's
// verdict; it returns the *migrations.VersionError when the schema is not the
// version this binary needs.
func printMigrationStatus(ctx context.Context, w io.Writer, q migrations.Querier) error {
	current, list, err := migrations.Status(ctx, q)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tMIGRATION")
	for _, m := range list {
		state, at, name := "pending", "-", m.Name
		if m.Applied {
			state, at = "applied", m.AppliedAt.UTC().Format(time.RFC3339)
		}
		if name == "" {
			name = "(unknown to this reconcile)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", m.Version, state, at, name)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if latest := migrations.Latest(); current != latest {
		return &migrations.VersionError{Database: current, Binary: latest}
	}
	fmt.Fprintf(w, "schema is at version %d, the version this reconcile needs\n", current)
	return nil
}

// buildTime is when the binary was built, set by the linker:
//
//	go build -ldflags "-X main.buildTime=$(date -u +%Y-%m-%dT%H:%M:%SZ)" ./cmd/reconcile
//
// Go records the commit's time but not the build's; without the flag the
// version line says only when the commit was made.
var buildTime string

func cmdVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "", "Print the module version, VCS revision and build time of this binary, and the schema version it needs.", "reconcile version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(e.stdout, versionLine(info, buildTime))
	return nil
}

// versionLine describes a build: "reconcile v1.2.0 (revision 3f6c2a9e0d3b,
// committed 2026-10-24T09:00:00Z, modified, built 2026-10-24T10:00:00Z;
// go1.26.0; schema 6)". info may be nil (a binary built without module
// support); built is empty when the build time was not set.
func versionLine(info *debug.BuildInfo, built string) string {
	version, revision, committed, modified, goVersion := "(devel)", "unknown", "unknown", false, "unknown"
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		goVersion = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
				if len(revision) > 12 {
					revision = revision[:12]
				}
			case "vcs.time":
				committed = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	line := fmt.Sprintf("reconcile %s (revision %s, committed %s", version, revision, committed)
	if modified {
		line += ", modified"
	}
	if built != "" {
		line += ", built " + built
	}
	return line + fmt.Sprintf("; %s; schema %d)", goVersion, migrations.Latest())
}
