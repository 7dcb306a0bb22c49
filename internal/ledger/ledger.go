// Package ledger records the durable state of reconciliation runs: the runs
// and their items, item state changes with their append-only history, and
// the completion join. It is the only package that writes these tables.
//
// Every change is a conditional update from the state the caller last saw, so
// a duplicate delivery can never record a second terminal outcome. Callers
// run the functions inside their own transaction, together with the queue
// operation that settles the item's message.
//
// The files follow the topics: state.go the item states and errors, runs.go
// the run rows, items.go loading and creating items and their counters,
// record.go recording a batch of changes, complete.go the completion join,
// announce.go the announcement of a completion in the outbox (in the
// completing transaction), deadline.go run deadlines and their missed-
// deadline announcements, and requeue.go putting dead letters back.
package ledger

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the ledger needs from a connection: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool all satisfy it. Callers pass a transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}
