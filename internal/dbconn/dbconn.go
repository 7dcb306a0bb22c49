// Package dbconn opens the connection pool to the reconcile database and
// keeps its credentials out of logs and errors.
package dbconn

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

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
		// pgx's parse errors may quote the input; never echo it.
		return nil, fmt.Errorf("parse DATABASE_URL %s: invalid connection string", Redact(cfg.URL))
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	app := cfg.ApplicationName
	if app == "" {
		app = "reconcile"
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open database %s: %w", Describe(pcfg), err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database %s: %s", Describe(pcfg), oneLine(scrub(err.Error(), pcfg.ConnConfig.Password)))
	}
	if cfg.Logger != nil {
		cfg.Logger.Debug("database connected", "database", Describe(pcfg))
	}
	return pool, nil
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
	if u, err := url.Parse(connString); err == nil && u.Scheme != "" {
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
	if scheme, rest, ok := strings.Cut(connString, "://"); ok {
		// A URL net/url rejects (a bad port, a stray character) may still
		// carry a password: cut everything between the user name and the
		// last '@', which over-redacts rather than leaks.
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
				rest = user + ":xxxxx" + rest[at:]
			}
		}
		connString = scheme + "://" + rest
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
