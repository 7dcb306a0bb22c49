// Package dbconn opens the connection pool to the reconcile database and
// keeps its credentials out of logs and errors.
//
// # Connection poolers
//
// Open works on a direct connection and through a pooler such as PgBouncer
// in session or transaction pooling mode. It detects a pooler by comparing
// the process id the server announced at connection start (BackendKeyData)
// with pg_backend_pid(): a pooler answers the start-up itself, with a cancel
// key of its own, so the two differ; on a direct connection they are equal.
// That choice matters for the query exec mode:
//
//   - directly, pgx's default, QueryExecModeCacheStatement: each statement is
//     prepared once per connection under a name and reused, the fastest;
//   - through a pooler, QueryExecModeCacheDescribe: statements are unnamed, so
//     two clients whose transactions land on the same server connection never
//     clash on a prepared statement's name (PgBouncer before 1.21, or with
//     max_prepared_statements = 0, fails them with `prepared statement
//     "stmtcache_…" already exists`), and the parameter types learned by the
//     first Describe are cached on the client, so a statement still takes one
//     round trip.
//
// A default_query_exec_mode given in the connection string wins over both.
// Every mode works, exec and simple_protocol included: Open teaches each
// connection the SQL types of uuid.UUID and []uuid.UUID, which those modes
// send as text without asking the server for the parameters' types.
package dbconn

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config describes the database to open.
type Config struct {
	// URL is a postgres:// URL or a keyword/value connection string. Empty
	// means the standard PG* environment variables (PGHOST, PGUSER, ...).
	URL string
	// MaxConns caps the pool size. Defaults to pgxpool's default (4 or the
	// number of CPUs, whichever is larger).
	MaxConns int32
	// ApplicationName is reported to the server. Defaults to "reconcile".
	ApplicationName string
	// Logger receives connection messages. Defaults to discarding them.
	Logger *slog.Logger
}

// Open parses cfg, opens a pool and checks that the server answers. Errors
// carry a redacted form of the connection string.
func Open(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, newConnStringError(cfg.URL, err)
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	app := cfg.ApplicationName
	if app == "" {
		app = "reconcile"
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = app
	pcfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		RegisterTypes(conn)
		return nil
	}

	// The pool's first connection checks that the server answers and
	// whether a pooler stands in between. Directly (the usual case) the
	// pool keeps it: a separate probe would cost a second backend start and
	// authentication, which is most of a short command's time. Through a
	// pooler the pool is made again in the describe mode; a pooler's
	// connections are cheap, and the probe's statement prepared nothing.
	pool, pooled, err := openAndProbe(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	mode := pcfg.ConnConfig.DefaultQueryExecMode
	if pooled && !hasExecMode(cfg.URL) {
		pool.Close()
		mode = pgx.QueryExecModeCacheDescribe
		pcfg.ConnConfig.DefaultQueryExecMode = mode
		if pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
			return nil, fmt.Errorf("open database %s: %w", Describe(pcfg), err)
		}
	}
	if cfg.Logger != nil {
		if pooled {
			cfg.Logger.Info("database reached through a connection pooler", "database", Describe(pcfg), "exec_mode", mode.String())
		} else {
			cfg.Logger.Debug("database connected", "database", Describe(pcfg), "exec_mode", mode.String())
		}
	}
	return pool, nil
}

// openAndProbe opens a pool on pcfg and asks its first connection whether it
// goes through a pooler, within 15 s.
func openAndProbe(ctx context.Context, pcfg *pgxpool.Config) (*pgxpool.Pool, bool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, false, fmt.Errorf("open database %s: %w", Describe(pcfg), err)
	}
	probeCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pool.Acquire(probeCtx)
	if err == nil {
		var pooled bool
		pooled, err = ThroughPooler(probeCtx, conn.Conn())
		conn.Release()
		if err == nil {
			return pool, pooled, nil
		}
	}
	pool.Close()
	return nil, false, fmt.Errorf("connect to database %s: %s", Describe(pcfg), oneLine(scrub(err.Error(), pcfg.ConnConfig.Password)))
}

// ConnStringError is a connection string that does not parse: what is
// wrong with it, and the string with its password redacted.
type ConnStringError struct {
	// Redacted is the connection string as Redact gives it; empty when it
	// came from the PG* environment variables.
	Redacted string
	// Problem says what is wrong, without the password.
	Problem string
}

func (e *ConnStringError) Error() string {
	if e.Redacted == "" {
		return "the PG* environment variables: " + e.Problem
	}
	return "DATABASE_URL " + e.Redacted + ": " + e.Problem
}

// newConnStringError explains why pgx could not parse connString. pgx says
// what is wrong after the string it quotes ("cannot parse `...`: invalid
// port"); the string is left out here (Redact gives it), and so is the
// password, should a message ever quote it.
func newConnStringError(connString string, err error) *ConnStringError {
	problem := err.Error()
	if i := strings.LastIndex(problem, "`: "); strings.HasPrefix(problem, "cannot parse `") && i >= 0 {
		problem = problem[i+len("`: "):]
	}
	scheme, _, isURL := strings.Cut(connString, "://")
	switch {
	case isURL && strings.Contains(problem, "keyword/value") && scheme != "postgres" && scheme != "postgresql":
		problem = fmt.Sprintf("the scheme is %q; a URL starts postgres:// or postgresql://", scheme)
	case !isURL && strings.Contains(problem, "invalid keyword/value"):
		problem = "neither a postgres:// URL nor keyword=value pairs (host=db dbname=reconcile)"
	case problem == "invalid port":
		problem = "invalid port: want a number from 1 to 65535 (one per host)"
	}
	return &ConnStringError{Redacted: Redact(connString), Problem: oneLine(scrub(problem, passwordOf(connString)))}
}

// passwordOf finds the password of a connection string that may not parse,
// so that it can be scrubbed from messages: a URL's user info after the
// user name, or a password= value.
func passwordOf(connString string) string {
	_, rest, ok := strings.Cut(connString, "://")
	if ok || !strings.Contains(connString, "=") {
		if !ok {
			rest = connString
		}
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				return pw
			}
		}
		return ""
	}
	if m := passwordKV.FindStringSubmatch(connString); m != nil {
		return strings.Trim(m[2], "'")
	}
	return ""
}

// ThroughPooler reports whether conn reaches the server through a connection
// pooler: the process id announced at start-up (a pooler makes up its own
// cancel key) is not the server process's. A pooler in transaction mode
// hands each transaction to any server connection, so a session (LISTEN,
// session advisory locks, SET, temporary tables) does not outlive a
// transaction.
func ThroughPooler(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var pid uint32
	// The simple protocol prepares nothing, whatever the connection's mode.
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`, pgx.QueryExecModeSimpleProtocol).Scan(&pid); err != nil {
		return false, fmt.Errorf("read server process id: %w", err)
	}
	return pid != conn.PgConn().PID(), nil
}

// RegisterTypes teaches conn the SQL types of the Go types the project
// passes as parameters and pgx cannot map without the server's help
// (google/uuid's UUID is a [16]byte): in the exec and simple_protocol exec
// modes pgx encodes parameters without asking the server for their types.
func RegisterTypes(conn *pgx.Conn) {
	m := conn.TypeMap()
	m.RegisterDefaultPgType(uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType(&uuid.UUID{}, "uuid")
	m.RegisterDefaultPgType([]uuid.UUID{}, "_uuid")
}

// hasExecMode reports whether a connection string names a
// default_query_exec_mode, which then wins over the detected choice.
func hasExecMode(connString string) bool {
	return strings.Contains(connString, "default_query_exec_mode")
}

// Describe names the database of a pool config without its password:
// user@host:port/dbname.
func Describe(cfg *pgxpool.Config) string {
	c := cfg.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}

var passwordKV = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// Redact returns a connection string with its password replaced by "xxxxx",
// in URL or keyword/value form.
func Redact(connString string) string {
	if u, err := url.Parse(connString); err == nil && u.Scheme != "" && u.Opaque == "" {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	scheme, rest, ok := strings.Cut(connString, "://")
	if !ok && !strings.Contains(connString, "=") {
		rest = connString // a URL without its scheme: user:password@host/db
	}
	if ok || rest != "" {
		// A URL net/url rejects (a bad port, a stray character) may still
		// carry a password: cut everything between the user name and the
		// last '@', which over-redacts rather than leaks.
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
				rest = user + ":xxxxx" + rest[at:]
			}
		}
		if ok {
			return passwordKV.ReplaceAllString(scheme+"://"+rest, "${1}xxxxx")
		}
		return rest
	}
	return passwordKV.ReplaceAllString(connString, "${1}xxxxx")
}

// scrub removes a secret from an error text, in case a driver echoed it.
func scrub(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "xxxxx")
}

// oneLine joins a driver message that lists each connection attempt on a
// line of its own (pgx does) into one line, without repeating identical
// attempts, so the error stays one line on a terminal and in a log.
func oneLine(s string) string {
	seen := map[string]bool{}
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || seen[l] {
			continue
		}
		seen[l] = true
		parts = append(parts, l)
	}
	return strings.Join(parts, " ")
}

// maxErrText caps the text of an error from ElideValues.
const maxErrText = 400

// ElideValues returns err with a text fit for a log line: pgx quotes the Go
// values of parameters it cannot encode (`unable to encode
// []uuid.UUID{[16]uint8{…}, …}`: 64 UUIDs byte by byte make 10 KB), so every
// brace or bracket group is cut to "{…}" / "[…]" and the text capped at 400
// bytes. errors.Is and errors.As see the original error; nil stays nil.
func ElideValues(err error) error {
	if err == nil {
		return nil
	}
	return elided{err}
}

type elided struct{ err error }

func (e elided) Error() string { return elideValues(e.err.Error()) }
func (e elided) Unwrap() error { return e.err }

// shortGroup is the longest brace or bracket group elideValues keeps
// (args[1], []byte, [16]uint8).
const shortGroup = 12

func elideValues(s string) string {
	var b, group strings.Builder
	depth := 0
	var open rune
	for _, r := range s {
		switch {
		case r == '{' || r == '[':
			if depth == 0 {
				open = r
				group.Reset()
			}
			depth++
		case (r == '}' || r == ']') && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
			continue
		}
		if depth == 0 && (r == '{' || r == '[') {
			continue
		}
		group.WriteRune(r)
		if depth == 0 {
			if g := group.String(); len(g) <= shortGroup {
				b.WriteString(g)
			} else if open == '{' {
				b.WriteString("{…}")
			} else {
				b.WriteString("[…]")
			}
		}
	}
	if depth > 0 { // an unclosed group: keep only its opening
		b.WriteRune(open)
		b.WriteString("…")
	}
	out := b.String()
	if len(out) > maxErrText {
		cut := maxErrText
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut] + "…"
	}
	return out
}
