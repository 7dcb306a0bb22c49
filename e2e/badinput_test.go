package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// subcommands returns the subcommands `reconcile help` lists.
func subcommands(t testing.TB, w *world) []string {
	t.Helper()
	res := w.mustRun(t, "help")
	_, list, ok := strings.Cut(res.stdout, "Subcommands:\n")
	if !ok {
		t.Fatalf("help lists no subcommands:\n%s", res)
	}
	var names []string
	for line := range strings.SplitSeq(list, "\n") {
		if !strings.HasPrefix(line, "  ") {
			break
		}
		names = append(names, strings.Fields(line)[0])
	}
	if len(names) < 5 {
		t.Fatalf("help lists only %v", names)
	}
	return names
}

// errorLine checks that a failed command reported its error as exactly one
// line starting with "reconcile:", the last line of stderr (a usage text may
// come before it), containing every word of want, and wrote nothing to
// stdout.
func errorLine(t *testing.T, res result, code int, want ...string) {
	t.Helper()
	if res.code != code {
		t.Errorf("exit %d, want %d:\n%s", res.code, code, res)
		return
	}
	if res.stdout != "" {
		t.Errorf("wrote to stdout on failure:\n%s", res)
	}
	lines := strings.Split(strings.TrimRight(res.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	var errLines int
	for _, l := range lines {
		if strings.HasPrefix(l, "reconcile:") {
			errLines++
		}
	}
	if errLines != 1 || !strings.HasPrefix(last, "reconcile: ") {
		t.Errorf("want one error line starting with \"reconcile: \", last on stderr; got %d such lines:\n%s", errLines, res)
		return
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Errorf("error line %q does not mention %q", last, w)
		}
	}
}

// TestBadInput is scenario 7: every subcommand with a wrong flag, bad values,
// an unreachable database, a missing source file, an unwritable output:
// each a clear one-line error with exit code 2 (bad usage or input) or 1
// (failure), and nothing written to the database or the file system.
func TestBadInput(t *testing.T) {
	t.Parallel()
	w := newWorld(t, nil)
	w.extraEnv = []string{"RECONCILE_PROVIDER_URL=http://127.0.0.1:1"}
	dy := newDay(t, "2026-10-24", 20, 1)
	dir := t.TempDir()
	names := subcommands(t, w)

	t.Run("wrong flag", func(t *testing.T) {
		for _, name := range names {
			if name == "version" {
				continue
			}
			res := w.run(t, nil, name, "--no-such-flag")
			switch name {
			case "dlq", "limit", "audit":
				// They take an action first.
				errorLine(t, res, 2, name, "--no-such-flag")
			default:
				errorLine(t, res, 2, name, "no-such-flag")
			}
		}
		for _, args := range [][]string{{"dlq", "list"}, {"dlq", "redrive"}, {"limit", "show"}, {"limit", "set"},
			{"audit", "verify"}, {"audit", "grant"}, {"version"}} {
			errorLine(t, w.run(t, nil, append(args, "--no-such-flag")...), 2, "no-such-flag")
		}
		errorLine(t, w.run(t, nil, "no-such-command"), 2, "no-such-command")
		errorLine(t, w.run(t, nil, "--log-level", "loud", "stats"), 2, "--log-level", "loud")
		errorLine(t, w.run(t, nil, "stats", "--log-format", "xml"), 2, "--log-format", "xml")
		errorLine(t, w.run(t, nil, "stats", "stray"), 2, "stray")
	})

	t.Run("bad values", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want []string
		}{
			{[]string{"enqueue", "--source", dy.path}, []string{"--date"}},
			{[]string{"enqueue", "--date", "2026-13-45", "--source", dy.path}, []string{"--date"}},
			{[]string{"enqueue", "--date", "2026-10-24"}, []string{"--source"}},
			{[]string{"enqueue", "--date", "2026-10-24", "--source", dy.path, "--rerun", "some"}, []string{"--rerun"}},
			{[]string{"enqueue", "--date", "2026-10-24", "--source", dy.path, "--tz", "Mars/Olympus"}, []string{"--tz"}},
			{[]string{"enqueue", "--date", "2026-10-24", "--source", dy.path, "--format", "xls"}, []string{"--format"}},
			{[]string{"consume", "--concurrency", "0"}, []string{"--concurrency"}},
			{[]string{"consume", "--rate", "-5"}, []string{"--rate"}},
			{[]string{"consume", "--jitter", "some"}, []string{"jitter"}},
			{[]string{"consume", "--visibility", "10ms"}, []string{"--visibility"}},
			{[]string{"limit", "set"}, []string{"--rate"}},
			{[]string{"limit", "set", "--rate", "-1"}, []string{"--rate"}},
			{[]string{"limit", "set", "--burst", "0"}, []string{"--burst"}},
			{[]string{"dlq", "redrive", "--id", "x"}, []string{"--id"}},
			{[]string{"dlq", "list", "--run", "nope"}, []string{"--run"}},
			{[]string{"audit", "verify", "--run", "nope"}, []string{"--run"}},
			{[]string{"audit", "verify", "--date", "yesterday"}, []string{"--date"}},
			{[]string{"audit", "grant"}, []string{"role"}},
			{[]string{"sample", "--date", "2026-10-24", "--count", "0"}, []string{"--count"}},
			{[]string{"provider-sim", "--limit", "fast"}, []string{"--limit"}},
			{[]string{"provider-sim", "--mismatch", "2"}, []string{"Mismatch"}},
		} {
			errorLine(t, w.run(t, nil, c.args...), 2, c.want...)
		}
	})

	t.Run("no database configured", func(t *testing.T) {
		env := slices.DeleteFunc(w.env(), func(kv string) bool { return strings.HasPrefix(kv, "DATABASE_URL=") })
		errorLine(t, w.run(t, env, "stats"), 2, "DATABASE_URL")
	})

	t.Run("unreachable database", func(t *testing.T) {
		env := append(w.env(), "DATABASE_URL=postgres://reconcile@127.0.0.1:1/reconcile?connect_timeout=5")
		cmds := [][]string{
			{"migrate"},
			{"enqueue", "--date", dy.date, "--source", dy.path},
			{"enqueue", "--date", dy.date, "--rerun", "failed"},
			{"consume", "--until-done"},
			{"stats"},
			{"dlq", "list"},
			{"dlq", "redrive", "--all"},
			{"limit", "show"},
			{"limit", "set", "--rate", "5"},
			{"audit", "verify"},
			{"audit", "grant", "someone"},
		}
		if slices.Contains(names, "status") {
			cmds = append(cmds, []string{"status"})
		}
		if slices.Contains(names, "report") {
			cmds = append(cmds, []string{"report", "--date", dy.date})
		}
		for _, args := range cmds {
			errorLine(t, w.run(t, env, args...), 1, "127.0.0.1:1", "connection refused")
		}
	})

	t.Run("missing source file", func(t *testing.T) {
		missing := filepath.Join(dir, "no-such-file.csv")
		errorLine(t, w.run(t, nil, "enqueue", "--date", dy.date, "--source", missing), 2, missing)
		errorLine(t, w.run(t, nil, "provider-sim", "--source", missing), 2, missing)
	})

	t.Run("bad source file", func(t *testing.T) {
		bad, err := filepath.Abs("../testdata/bad/duplicate-id.csv")
		if err != nil {
			t.Fatal(err)
		}
		res := w.run(t, nil, "enqueue", "--date", "2026-10-24", "--source", bad)
		if res.code != 2 || !strings.Contains(res.stderr, bad+":") || !strings.Contains(res.stderr, "nothing enqueued") {
			t.Errorf("want exit 2 naming %s with a line number and \"nothing enqueued\":\n%s", bad, res)
		}
	})

	t.Run("unwritable output", func(t *testing.T) {
		// A directory and a path under a regular file: unwritable even for
		// root.
		notDir := filepath.Join(dir, "file")
		if err := os.WriteFile(notDir, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, out := range []string{dir, filepath.Join(notDir, "day.csv")} {
			errorLine(t, w.run(t, nil, "sample", "--date", "2026-10-24", "--count", "5", "--out", out), 1, out)
		}
		if slices.Contains(names, "report") {
			// A report needs a run: enqueue one in a database of its own,
			// so that this one stays empty.
			rw := newWorld(t, nil)
			rw.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
			for _, out := range []string{dir, filepath.Join(notDir, "report.csv")} {
				errorLine(t, rw.run(t, nil, "report", "--date", dy.date, "--format", "csv", "--out", out), 1, out)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Errorf("a failed command left files behind: %v", entries)
		}
	})

	// Nothing reached the database.
	var runs, messages, items, limiters int
	err := w.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM queue_messages),
		(SELECT count(*) FROM items), (SELECT count(*) FROM rate_limiters)`).Scan(&runs, &messages, &items, &limiters)
	if err != nil {
		t.Fatal(err)
	}
	if runs+messages+items+limiters != 0 {
		t.Errorf("bad input wrote to the database: %d runs, %d messages, %d items, %d limiter rows", runs, messages, items, limiters)
	}
}
