// Package migrations holds the numbered SQL migrations of the reconcile
// schema, embedded into the binary, and applies them with goose. `reconcile
// migrate`, `reconcile demo` and the test helpers all go through Up.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Result reports what Up did.
type Result struct {
	// Applied lists the versions applied by this call, oldest first.
	Applied []int64
	// Current is the schema version after the call.
	Current int64
}

// Up applies every migration not yet applied to the database at connString.
// Each migration runs in its own transaction; goose serialises concurrent
// callers with an advisory lock, so re-running is a no-op.
func Up(ctx context.Context, connString string) (Result, error) {
	db, err := sql.Open("pgx", connString)
	if err != nil {
		return Result{}, fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	return up(ctx, db)
}

func up(ctx context.Context, db *sql.DB) (Result, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return Result{}, fmt.Errorf("create migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return Result{}, fmt.Errorf("load migrations: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("apply migrations: %w", err)
	}
	var r Result
	for _, m := range results {
		r.Applied = append(r.Applied, m.Source.Version)
	}
	if r.Current, err = p.GetDBVersion(ctx); err != nil {
		return r, fmt.Errorf("read schema version: %w", err)
	}
	return r, nil
}
