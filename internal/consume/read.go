package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The consumers' tables for people: the heartbeats (consumers) and the
// providers' circuits (provider_circuits), which consumers write and
// `status` reads. The package owns both tables; nothing else runs SQL on
// them.

// Querier is what the read functions need: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CircuitRow is the circuit of one provider as a consumer last changed it.
type CircuitRow struct {
	// Provider is the providers file's name; empty for a single provider.
	Provider string
	URL      string
	// Open is true while calls are stopped but for a probe; OpenedAt and
	// NextProbeAt are nil when closed.
	Open        bool
	OpenedAt    *time.Time
	NextProbeAt *time.Time
	// Cause is what opened the circuit, or the latest failure since.
	Cause string
	// Probes and Failures count since the circuit opened.
	Probes   int
	Failures int
	// ChangedAt and ChangedBy say when and which consumer last changed it.
	ChangedAt time.Time
	ChangedBy string
}

// Circuits returns every provider's circuit row, by provider: the table
// holds a row per provider and is read whole.
func Circuits(ctx context.Context, db Querier) ([]CircuitRow, error) {
	rows, err := db.Query(ctx, `
		SELECT provider, url, open, opened_at, next_probe_at, cause, probes, failures, changed_at, changed_by
		  FROM provider_circuits ORDER BY provider`)
	if err != nil {
		return nil, fmt.Errorf("read provider circuits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (CircuitRow, error) {
		var c CircuitRow
		err := row.Scan(&c.Provider, &c.URL, &c.Open, &c.OpenedAt, &c.NextProbeAt, &c.Cause, &c.Probes, &c.Failures,
			&c.ChangedAt, &c.ChangedBy)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read provider circuits: %w", err)
	}
	return out, nil
}
