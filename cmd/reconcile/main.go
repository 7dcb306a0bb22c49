// Command reconcile reconciles a day's payments against a rate-limited
// payment provider, with PostgreSQL as its queue and its ledger.
//
// Run `reconcile help` for the list of subcommands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// env is what a subcommand gets from the process: its environment, standard
// streams and the global options. Subcommands never read os.* directly, so
// tests can run them in-process.
type env struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	global globalFlags
}

// command is one subcommand of the binary.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"demo", "the whole job end to end on a throwaway database, in under a minute", cmdDemo},
		{"migrate", "apply the database schema (idempotent)", cmdMigrate},
		{"enqueue", "turn a day's payments into a run and queue messages", cmdEnqueue},
		{"consume", "call the provider for queued items and record the outcomes", cmdConsume},
		{"schedule", "enqueue a date at each cron tick (long-running; catches up missed dates)", cmdSchedule},
		{"status", "progress, rates and ETA of each run", cmdStatus},
		{"report", "discrepancies, missing ids and dead letters of a date", cmdReport},
		{"stats", "queue statistics", cmdStats},
		{"dlq", "list or redrive dead-lettered messages", cmdDLQ},
		{"cancel", "withdraw a run: its open items are cancelled, no further provider calls", cmdCancel},
		{"limit", "show or set the shared provider rate limit", cmdLimit},
		{"prune", "delete acked queue messages and schedule ticks of runs completed long ago", cmdPrune},
		{"audit", "verify the ledger's hash chains; grant auditor access", cmdAudit},
		{"provider", "list provider profiles; check one against the provider with one call", cmdProvider},
		{"ui", "serve the web console for operators and auditors", cmdUI},
		{"provider-sim", "run a simulated payment provider for trials", cmdProviderSim},
		{"sample", "write a generated day of payments (for trials and benchmarks)", cmdSample},
		{"version", "print the version", cmdVersion},
	}
}

// run is the whole program; main only maps its error to an exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	e := &env{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	e.global.register(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	// The flag package would print its own error, spelling the flag -name.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return err
		}
		return usageErrorf("%s (run `reconcile help`)", dashed(err))
	}
	rest := fs.Args()
	if *showVersion {
		return cmdVersion(ctx, e, nil)
	}
	if len(rest) == 0 {
		usage(stderr)
		return usageErrorf("no subcommand given")
	}
	name := rest[0]
	if name == "help" || name == "-h" || name == "--help" {
		if len(rest) > 1 {
			return run(ctx, []string{rest[1], "-h"}, getenv, stdin, stdout, stderr)
		}
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, e, rest[1:])
		}
	}
	return usageErrorf("unknown subcommand %q (run `reconcile help` for the list)", name)
}

func usage(w io.Writer) {
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	var b strings.Builder
	b.WriteString("reconcile: reconcile a day's payments against the payment provider\n\n")
	b.WriteString("Usage: reconcile [global flags] <subcommand> [flags]\n\nSubcommands:\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nGlobal flags (also accepted after the subcommand):\n")
	b.WriteString("  --log-format text|json   log format (default: text on a terminal, json otherwise)\n")
	b.WriteString("  --log-level LEVEL        debug, info, warn or error (default info)\n")
	b.WriteString("  --version                print the version and exit (before the subcommand only)\n")
	b.WriteString("\nEnvironment: DATABASE_URL (or PGHOST, PGUSER, ...), RECONCILE_PROVIDER_URL, RECONCILE_PROVIDER_TOKEN,\n")
	b.WriteString("RECONCILE_PROVIDER_PROFILE (and the credential variables the profile names), RECONCILE_NOTIFY_URL and\n")
	b.WriteString("RECONCILE_NOTIFY_SECRET (the morning message: consume and schedule --notify).\n")
	b.WriteString("Run `reconcile help <subcommand>` for its flags and an example.\n")
	_, _ = io.WriteString(w, b.String())
}

// errUsage marks errors caused by bad usage or bad input: exit code 2.
var errUsage = errors.New("usage")

type usageErr struct{ err error }

func (u usageErr) Error() string   { return u.err.Error() }
func (u usageErr) Unwrap() []error { return []error{u.err, errUsage} }

func usageError(err error) error { return usageErr{err} }

func usageErrorf(format string, args ...any) error { return usageErr{fmt.Errorf(format, args...)} }

// exitCode prints err (once) and maps it to the documented exit codes:
// 0 success, 1 failure, 2 bad usage or bad input.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "reconcile:", err)
		return 2
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "reconcile: interrupted")
		return 1
	default:
		fmt.Fprintln(stderr, "reconcile:", err)
		return 1
	}
}
