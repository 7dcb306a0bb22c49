package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLogsWriteDurationsAsStrings: both log formats write a duration as a
// Go duration string, not JSON's integer nanoseconds.
func TestLogsWriteDurationsAsStrings(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var stderr bytes.Buffer
		e := &env{stderr: &stderr, global: globalFlags{logFormat: format, logLevel: "info"}}
		logger, err := e.logger()
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("done", "elapsed", 24498*time.Millisecond, slog.Group("phase", "took", 150*time.Millisecond))
		out := stderr.String()
		if !strings.Contains(out, "24.498s") || !strings.Contains(out, "150ms") || strings.Contains(out, "24498000000") {
			t.Errorf("%s log: %s", format, out)
		}
	}
}

// TestFlagsAreSpelledWithTwoDashes: help texts and flag errors spell flags
// as the README does, --date, never the flag package's -date.
func TestFlagsAreSpelledWithTwoDashes(t *testing.T) {
	t.Parallel()
	single := regexp.MustCompile(`(^|[\s:])-[a-z][a-z-]+`)
	for _, c := range commands() {
		if c.name == "dlq" || c.name == "limit" || c.name == "audit" {
			continue // their help lists actions; the actions' flag sets are checked below
		}
		var stderr bytes.Buffer
		_ = run(context.Background(), []string{c.name, "-h"}, func(string) string { return "" }, strings.NewReader(""), &bytes.Buffer{}, &stderr)
		for _, line := range strings.Split(stderr.String(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "-") && !strings.HasPrefix(strings.TrimSpace(line), "--") {
				t.Errorf("%s --help: %q", c.name, line)
			}
		}
	}
	for _, args := range [][]string{{"enqueue", "--bogus"}, {"consume", "--rate", "x"}, {"cancel", "--date"}, {"--bogus"}, {"dlq", "redrive", "--idd", "1"}} {
		err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || single.MatchString(err.Error()) || !strings.Contains(err.Error(), "--") {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestHelpGoesToStdout asks every subcommand for its usage, as `reconcile
// help NAME` and as `reconcile NAME --help`: the usage is the answer, on
// standard output, with exit 0 (so `reconcile help enqueue | less` works);
// standard error stays empty. Usage that comes with an error goes to
// standard error.
func TestHelpGoesToStdout(t *testing.T) {
	t.Parallel()
	ask := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		return stdout.String(), stderr.String(), exitCode(err, &stderr)
	}
	cases := [][]string{{"help"}, {"--help"}, {"-h"}}
	for _, c := range commands() {
		cases = append(cases, []string{"help", c.name}, []string{c.name, "--help"})
	}
	cases = append(cases, []string{"dlq", "redrive", "--help"}, []string{"dlq", "help"}, []string{"audit", "grant", "-h"},
		[]string{"audit", "verify", "--help"}, []string{"limit", "set", "--help"}, []string{"help", "limit"})
	for _, args := range cases {
		stdout, stderr, code := ask(args...)
		if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage: reconcile") {
			t.Errorf("reconcile %s: exit %d, stdout %q, stderr %q; want the usage on stdout", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	for _, args := range [][]string{{}, {"dlq"}, {"limit"}, {"audit"}} {
		stdout, stderr, code := ask(args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, "Usage: reconcile") {
			t.Errorf("reconcile %s: exit %d, stdout %q, stderr %q; want the usage and the error on stderr, exit 2", strings.Join(args, " "), code, stdout, stderr)
		}
	}
}

// TestMalformedDatabaseURLSaysWhatIsWrong gives commands a DATABASE_URL
// that does not parse: bad input (exit 2) with what is wrong, the string
// redacted.
func TestMalformedDatabaseURLSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"postgres://app:s3cret@db:54x2/reconcile":  "DATABASE_URL postgres://app:xxxxx@db:54x2/reconcile: invalid port",
		"postgresql://app:s3cret@db/r?sslmode=yes": "sslmode is invalid",
		"postgress://app:s3cret@db/reconcile":      `the scheme is "postgress"`,
	} {
		var stdout, stderr bytes.Buffer
		getenv := func(k string) string {
			if k == "DATABASE_URL" {
				return url
			}
			return ""
		}
		err := run(context.Background(), []string{"stats"}, getenv, strings.NewReader(""), &stdout, &stderr)
		code := exitCode(err, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), want) || strings.Contains(stderr.String(), "s3cret") {
			t.Errorf("stats with DATABASE_URL %s: exit %d, stderr %q; want exit 2 saying %q", url, code, stderr.String(), want)
		}
	}
}
