package consume

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/circuit"
)

// saveCircuit writes the state of provider's circuit to its row in
// provider_circuits (migrations/00007_providers.sql), which `status` reads:
// the consumer writes it when the circuit opens, fails a probe or closes.
// Consumers are the only writers of the table.
func saveCircuit(ctx context.Context, pool *pgxpool.Pool, name, url string, st circuit.State, actor string, at time.Time) error {
	var openedAt, nextProbe *time.Time
	if st.Open {
		openedAt, nextProbe = &st.OpenedAt, &st.NextProbe
	}
	_, err := pool.Exec(ctx, `
INSERT INTO provider_circuits AS c (provider, url, open, opened_at, cause, next_probe_at, probes, failures, changed_at, changed_by)
VALUES (@provider, @url, @open, @opened_at, @cause, @next_probe_at, @probes, @failures, @at, @actor)
ON CONFLICT (provider) DO UPDATE
   SET url = excluded.url, open = excluded.open, opened_at = excluded.opened_at, cause = excluded.cause,
       next_probe_at = excluded.next_probe_at, probes = excluded.probes, failures = excluded.failures,
       changed_at = excluded.changed_at, changed_by = excluded.changed_by`,
		pgx.StrictNamedArgs{"provider": name, "url": url, "open": st.Open, "opened_at": openedAt, "cause": st.Cause,
			"next_probe_at": nextProbe, "probes": st.Probes, "failures": st.Failures, "at": at, "actor": actor})
	if err != nil {
		return fmt.Errorf("save circuit of provider %q: %w", name, err)
	}
	return nil
}
