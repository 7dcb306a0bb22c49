package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/migrations"
)

// globalFlags are accepted before the subcommand and by every subcommand.
type globalFlags struct {
	logFormat string
	logLevel  string
}

func (g *globalFlags) register(fs *flag.FlagSet) {
	// Registering the same destinations on every flag set lets the flags go
	// before or after the subcommand name.
	if g.logFormat == "" {
		g.logFormat = "auto"
	}
	if g.logLevel == "" {
		g.logLevel = "info"
	}
	fs.StringVar(&g.logFormat, "log-format", g.logFormat, "log format: text, json or auto (text on a terminal)")
	fs.StringVar(&g.logLevel, "log-level", g.logLevel, "log level: debug, info, warn or error")
}

// newFlagSet returns the flag set of a subcommand. synopsis is the usage line
// after "reconcile NAME", example a complete command line. Its usage is
// printed only when asked for (--help, `reconcile help NAME`), on standard
// output; errors go to standard error as one line (see parseFlags).
func newFlagSet(e *env, name, synopsis, description, example string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stdout)
	e.global.register(fs)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: reconcile %s %s\n\n%s\n\nFlags:\n", name, synopsis, description)
		printFlags(fs)
		fmt.Fprintf(w, "\nExample:\n  %s\n", example)
	}
	return fs
}

// parseFlags parses args, turning parse errors into usage errors and refusing
// stray positional arguments. A bad flag gets one error line (printed by
// main) with a hint, not the whole usage text; -h prints the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseFlagsAndArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("%s: unexpected argument %q (flags start with --)", fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseFlagsAndArgs is parseFlags for a subcommand that takes positional
// arguments too (fs.Args()).
func parseFlagsAndArgs(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return err
		}
		return usageErrorf("%s: %s (see reconcile %s --help)", fs.Name(), dashed(err), fs.Name())
	}
	return nil
}

// isHelp reports whether a subcommand's first argument asks for its usage.
func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// usageOut is where a command group's usage goes: standard output when it
// was asked for, standard error when it comes with an error (no action).
func (e *env) usageOut(args []string) io.Writer {
	if len(args) == 0 {
		return e.stderr
	}
	return e.stdout
}

// printFlags is flag.PrintDefaults with the flags spelled as the README
// and the errors spell them: --name, not -name.
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			if name == "string" {
				line += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				line += " (default " + f.DefValue + ")"
			}
		}
		fmt.Fprintln(w, line)
	})
}

// flagInError finds the flag package's spelling of a flag in its errors
// ("flag provided but not defined: -bogus", "invalid value "x" for flag
// -rate: ...").
var flagInError = regexp.MustCompile(`(: |flag )-([A-Za-z])`)

// dashed returns a flag parse error's text with its flag spelled --name.
func dashed(err error) string {
	return flagInError.ReplaceAllString(err.Error(), "$1--$2")
}

// logger builds the process's one logger: tint on a terminal, JSON otherwise
// or when asked.
func (e *env) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(e.global.logLevel)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", e.global.logLevel)
	}
	format := e.global.logFormat
	if format == "auto" {
		format = "json"
		if f, ok := e.stderr.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			format = "text"
		}
	}
	switch format {
	case "text":
		return slog.New(tint.NewTextHandler(e.stderr, &tint.Options{Level: level, TimeFormat: time.TimeOnly,
			NoColor: !isTerminal(e.stderr), ReplaceAttr: durationAsString})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(e.stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: durationAsString})), nil
	default:
		return nil, usageErrorf("--log-format %q: want text, json or auto", e.global.logFormat)
	}
}

// durationAsString writes every duration attribute as a Go duration string
// ("24.498s", "150ms"), in both log formats: slog's JSON handler would
// otherwise write nanoseconds as an integer ("elapsed":24498000000).
func durationAsString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// open builds the logger and connects to the configured database: the start
// of every subcommand that works on the database. The caller closes the pool.
func (e *env) open(ctx context.Context) (*slog.Logger, *pgxpool.Pool, error) {
	logger, err := e.logger()
	if err != nil {
		return nil, nil, err
	}
	pool, err := e.connect(ctx, logger)
	if err != nil {
		return nil, nil, err
	}
	return logger, pool, nil
}

// connect opens a pool on the configured database (DATABASE_URL or the PG*
// variables). The connection string never appears in errors unredacted.
func (e *env) connect(ctx context.Context, logger *slog.Logger) (*pgxpool.Pool, error) {
	return e.connectN(ctx, logger, 0)
}

// connectN is connect with a pool of maxConns connections (0: pgxpool's
// default), for commands that hold many at once. It checks that the
// database's schema is the version this binary needs, so an unmigrated or a
// newer database gets one clear line instead of raw SQL errors.
func (e *env) connectN(ctx context.Context, logger *slog.Logger, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := e.dial(ctx, logger, maxConns)
	if err != nil {
		return nil, err
	}
	if err := migrations.Check(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// dial opens a pool on the configured database without checking its
// schema: for `reconcile migrate`.
func (e *env) dial(ctx context.Context, logger *slog.Logger, maxConns int32) (*pgxpool.Pool, error) {
	url := e.getenv("DATABASE_URL")
	if url == "" && e.getenv("PGHOST") == "" && e.getenv("PGSERVICE") == "" {
		return nil, usageErrorf("no database configured: set DATABASE_URL (or PGHOST and friends), or try `reconcile demo`, which starts a throwaway one")
	}
	pool, err := dbconn.Open(ctx, dbconn.Config{URL: url, Logger: logger, MaxConns: maxConns})
	if bad := (*dbconn.ConnStringError)(nil); errors.As(err, &bad) {
		return nil, usageError(err) // bad input: exit 2
	}
	if err != nil {
		return nil, err
	}
	return pool, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}
