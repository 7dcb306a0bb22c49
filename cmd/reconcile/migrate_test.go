package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/migrations"
)

// envOn returns an env whose DATABASE_URL is url, and its stdout.
func envOn(url string) (*env, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &env{getenv: func(k string) string {
		if k == "DATABASE_URL" {
			return url
		}
		return ""
	}, stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr}, &stdout
}

func TestCommandsCheckTheSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	latest := migrations.Latest()
	// Versions may have gaps (each change takes a number of its own): the
	// count of migrations is the count of files.
	files, err := filepath.Glob(filepath.Join("..", "..", "migrations", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("migration files: %v", err)
	}
	commands := map[string][]string{
		"status":  {"status"},
		"stats":   {"stats"},
		"report":  {"report", "--date", "2026-10-24"},
		"enqueue": {"enqueue", "--date", "2026-10-24", "--source", "-"},
		"dlq":     {"dlq", "list"},
		"limit":   {"limit", "show"},
		"consume": {"consume", "--until-done", "--provider-url", "http://127.0.0.1:1"},
	}

	// An unmigrated database: one line naming the versions and the fix.
	e, _ := envOn(pgtest.EmptyConnString(t))
	want := fmt.Sprintf("database schema is at version 0, this reconcile needs %d: run `reconcile migrate`", latest)
	for name, args := range commands {
		err := run(ctx, append([]string{"--log-level", "error"}, args...), e.getenv, e.stdin, e.stdout, e.stderr)
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 1 || strings.TrimSpace(msg.String()) != "reconcile: "+want {
			t.Errorf("%s on an unmigrated database: exit %d, %q; want exit 1, %q", name, code, msg.String(), want)
		}
	}

	// migrate --status lists every migration as pending and fails; migrate
	// applies them; then --status says all is well.
	var out bytes.Buffer
	e.stdout = &out
	err = run(ctx, []string{"migrate", "--status"}, e.getenv, e.stdin, e.stdout, e.stderr)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("migrate --status on an unmigrated database: %v", err)
	}
	if n := strings.Count(out.String(), " pending "); n != len(files) {
		t.Errorf("migrate --status lists %d pending migrations, want %d:\n%s", n, len(files), out.String())
	}
	if err := run(ctx, []string{"migrate"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"migrate", "--status"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatalf("migrate --status on a migrated database: %v\n%s", err, out.String())
	}
	if n := strings.Count(out.String(), " applied "); n != len(files) || !strings.Contains(out.String(), "00001_ledger.sql") ||
		!strings.Contains(out.String(), fmt.Sprintf("schema is at version %d, the version this reconcile needs", latest)) {
		t.Errorf("migrate --status on a migrated database:\n%s", out.String())
	}

	// A database migrated by a newer reconcile.
	conn, err := pgx.Connect(ctx, e.getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES ($1, true)`, latest+1); err != nil {
		t.Fatal(err)
	}
	want = fmt.Sprintf("this reconcile is older than the database schema (%d < %d)", latest, latest+1)
	for name, args := range commands {
		err := run(ctx, append([]string{"--log-level", "error"}, args...), e.getenv, e.stdin, e.stdout, e.stderr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s on a newer database: %v, want %q", name, err, want)
		}
	}
	out.Reset()
	err = run(ctx, []string{"migrate", "--status"}, e.getenv, e.stdin, e.stdout, e.stderr)
	if err == nil || !strings.Contains(out.String(), "(unknown to this reconcile)") {
		t.Errorf("migrate --status on a newer database: %v\n%s", err, out.String())
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/reconcile/reconcile", Version: "v1.2.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "3f6c2a9e0d3b4c559a7e2b1f0c9d8e7a00000000"},
			{Key: "vcs.time", Value: "2026-10-24T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := fmt.Sprintf("reconcile v1.2.0 (revision 3f6c2a9e0d3b, committed 2026-10-24T09:00:00Z, modified, built 2026-10-24T10:00:00Z; go1.26.0; schema %d)", migrations.Latest())
	if got := versionLine(info, "2026-10-24T10:00:00Z"); got != want {
		t.Errorf("versionLine = %q\nwant          %q", got, want)
	}
	if got := versionLine(nil, ""); !strings.HasPrefix(got, "reconcile (devel) (revision unknown, committed unknown; ") {
		t.Errorf("versionLine(nil) = %q", got)
	}
	// Both spellings work and print the same line.
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &out, &out); err != nil {
			t.Fatalf("reconcile %s: %v", args[0], err)
		}
		if !strings.HasPrefix(out.String(), "reconcile ") || !strings.Contains(out.String(), "schema ") {
			t.Errorf("reconcile %s printed %q", args[0], out.String())
		}
	}
}

func TestCountOf(t *testing.T) {
	t.Parallel()
	if got := countOf(1, "attempt", "attempts"); got != "1 attempt" {
		t.Errorf("countOf(1) = %q", got)
	}
	if got := countOf(3, "attempt", "attempts"); got != "3 attempts" {
		t.Errorf("countOf(3) = %q", got)
	}
}
