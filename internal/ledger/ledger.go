// Package ledger records the durable state of reconciliation runs: the runs
// and their items, item state changes with their append-only history, and
// the completion join. It owns these tables (runs, items, transitions, the
// completion counters run_shards, account_progress and run_breakdown, the
// completion records run_completions, account_completions and
// completion_rounds) and the auditor's views over them: it is the only
// package that writes them, and other packages read them through its read
// functions (the audit package aside, which recomputes the hash chains from
// the rows themselves).
//
// Every change is a conditional update from the state the caller last saw, so
// a duplicate delivery can never record a second terminal outcome. Callers
// run the functions inside their own transaction, together with the queue
// operation that settles the item's message.
//
// Every read function takes the smallest interface it needs (a [Querier]
// for reads), so a caller can pass a pool, or a read-only transaction to
// read several things in one snapshot; each names in its comment the index
// it reads through.
//
// The files follow the topics: state.go the item states and errors, runs.go
// the run rows, items.go creating items and their counters, item.go the item
// record and its reads, record.go recording a batch of changes, complete.go
// the completion join, announce.go the announcement of a completion in the
// outbox (in the completing transaction), deadline.go run deadlines and
// their missed-deadline announcements, requeue.go putting dead letters back,
// cancel.go withdrawing a run, summary.go a run's totals and its accounts',
// breakdown.go its figures by provider and currency, traffic.go its
// transitions over time, and auditor.go the auditor's example queries.
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

// Querier is what the read functions need: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it, and so does a wrapper that counts a page's
// queries. Pass a read-only transaction to read several things in one
// snapshot.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
