package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
)

// Migration is one schema migration: embedded in this binary, recorded as
// applied in a database, or both.
type Migration struct {
	// Version is the migration's number (the file name's prefix).
	Version int64
	// Name is the embedded file's name; empty for a migration the database
	// has and this binary does not know (a newer binary applied it).
	Name string
	// Applied is true when the database records the migration as applied.
	Applied bool
	// AppliedAt is when it was applied; zero when pending.
	AppliedAt time.Time
}

// Querier runs a query: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Latest returns the version of the newest embedded migration: the schema
// version this binary needs.
func Latest() int64 {
	list := embedded()
	if len(list) == 0 {
		return 0
	}
	return list[len(list)-1].Version
}

// embedded lists the embedded migrations, oldest first.
func embedded() []Migration {
	names, _ := fs.Glob(files, "*.sql") // the pattern is valid
	var list []Migration
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			continue // not a migration file; goose ignores it too
		}
		list = append(list, Migration{Version: v, Name: name})
	}
	slices.SortFunc(list, func(a, b Migration) int { return int(a.Version - b.Version) })
	return list
}

// Status lists every migration known to this binary or recorded in the
// database at q, oldest first, with whether and when it was applied, and the
// database's schema version (the highest applied, 0 for an unmigrated
// database). It only reads: unlike goose's own status, it never creates the
// version table, so it works for the read-only auditor role too.
func Status(ctx context.Context, q Querier) (current int64, list []Migration, err error) {
	list = embedded()
	applied, err := appliedVersions(ctx, q)
	if err != nil {
		return 0, nil, err
	}
	for i := range list {
		if at, ok := applied[list[i].Version]; ok {
			list[i].Applied, list[i].AppliedAt = true, at
			delete(applied, list[i].Version)
		}
	}
	for v, at := range applied {
		list = append(list, Migration{Version: v, Applied: true, AppliedAt: at})
	}
	slices.SortFunc(list, func(a, b Migration) int { return int(a.Version - b.Version) })
	for _, m := range list {
		if m.Applied {
			current = max(current, m.Version)
		}
	}
	return current, list, nil
}

// undefinedTable is PostgreSQL's SQLSTATE for a relation that does not
// exist.
const undefinedTable = "42P01"

// appliedVersions reads goose's version table: version → time applied. A
// database without the table has none. It is one statement, run by every
// command before its work: the table's absence is the server's
// undefined_table error rather than a second statement asking first. (In a
// transaction that error would end it; no caller reads the version inside
// one.)
func appliedVersions(ctx context.Context, q Querier) (map[int64]time.Time, error) {
	// goose's provider deletes the row of a migration it rolls back; its
	// older API adds a row with is_applied false instead, so the latest row
	// of each version decides.
	rows, err := q.Query(ctx, `
		SELECT version_id, tstamp
		  FROM (SELECT DISTINCT ON (version_id) version_id, is_applied, tstamp
		          FROM goose_db_version WHERE version_id > 0
		         ORDER BY version_id, id DESC) v
		 WHERE is_applied
		 ORDER BY version_id`)
	applied := map[int64]time.Time{}
	if err == nil {
		var v int64
		var at time.Time
		_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error {
			applied[v] = at
			return nil
		})
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == undefinedTable {
		return map[int64]time.Time{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schema version: %w", err)
	}
	return applied, nil
}

// VersionError says that a database's schema is not the version this
// binary needs.
type VersionError struct {
	// Database is the database's schema version.
	Database int64
	// Binary is the version this binary needs ([Latest]).
	Binary int64
}

func (e *VersionError) Error() string {
	if e.Database < e.Binary {
		return fmt.Sprintf("database schema is at version %d, this reconcile needs %d: run `reconcile migrate`", e.Database, e.Binary)
	}
	return fmt.Sprintf("this reconcile is older than the database schema (%d < %d): use the newer reconcile that migrated it", e.Binary, e.Database)
}

// Check returns a *VersionError when the schema version of the database at
// q differs from the one this binary needs, and nil when it is the same.
// Every command that uses the schema calls it first.
func Check(ctx context.Context, q Querier) error {
	current, _, err := Status(ctx, q)
	if err != nil {
		return err
	}
	if latest := Latest(); current != latest {
		return &VersionError{Database: current, Binary: latest}
	}
	return nil
}
