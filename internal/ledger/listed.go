package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Listed is one record of the provider's list for a run's business date
// (list mode), in the ledger's terms: what a lookup of its id would have
// answered.
type Listed struct {
	ID          string
	AmountMinor int64
	Currency    string
	Status      string
	Kind        string
}

// StoreListed adds a page of the provider's records to the run's listing of
// provider, inside the caller's transaction (the one that also moves the
// listing's cursor, so a page is stored exactly when its cursor is). A
// record already stored, from an earlier page that shifted, is kept as it
// was and not counted again. page numbers the page from 1. It returns how
// many of recs were new.
func StoreListed(ctx context.Context, tx DB, runID uuid.UUID, provider string, page int, recs []Listed) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	ids := make([]string, len(recs))
	amounts := make([]int64, len(recs))
	currencies := make([]string, len(recs))
	statuses := make([]string, len(recs))
	kinds := make([]string, len(recs))
	for i, r := range recs {
		ids[i], amounts[i], currencies[i], statuses[i], kinds[i] = r.ID, r.AmountMinor, r.Currency, r.Status, r.Kind
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO provider_records (run_id, provider, record_id, amount_minor, currency, status, kind, page)
		SELECT $1, $2, u.id, u.amount, u.currency, u.status, u.kind, $3
		  FROM unnest($4::text[], $5::bigint[], $6::text[], $7::text[], $8::text[]) AS u(id, amount, currency, status, kind)
		ON CONFLICT (run_id, provider, record_id) DO NOTHING`,
		runID, provider, page, ids, amounts, currencies, statuses, kinds)
	if err != nil {
		return 0, fmt.Errorf("store page %d of the listing of run %s: %w", page, runID, err)
	}
	return int(tag.RowsAffected()), nil
}

// ListedFor returns the records that provider's listing stored for the
// given items, by item; items without a listed record are absent. The
// caller asks for the items of that provider (and, for the default
// provider, those that name none). Each key is one lookup of the primary
// key (run_id, provider, record_id), however many records the run has.
func ListedFor(ctx context.Context, db DB, provider string, keys []Key) (map[Key]Listed, error) {
	runs := make([]uuid.UUID, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		runs[i], ids[i] = k.RunID, k.TransactionID
	}
	rows, err := db.Query(ctx, `
		SELECT p.run_id, p.record_id, p.amount_minor, p.currency, p.status, p.kind
		  FROM unnest($1::uuid[], $2::text[]) AS k(run_id, transaction_id)
		  JOIN provider_records p ON p.run_id = k.run_id AND p.provider = $3 AND p.record_id = k.transaction_id`,
		runs, ids, provider)
	if err != nil {
		return nil, fmt.Errorf("read listed records of %d items: %w", len(keys), err)
	}
	out := make(map[Key]Listed, len(keys))
	var run uuid.UUID
	var r Listed
	_, err = pgx.ForEachRow(rows, []any{&run, &r.ID, &r.AmountMinor, &r.Currency, &r.Status, &r.Kind}, func() error {
		out[Key{run, r.ID}] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read listed records of %d items: %w", len(keys), err)
	}
	return out, nil
}

// ReasonUnexpected is the reason of the transition that records an
// unexpected item.
const ReasonUnexpected = "unexpected"

// FromListed is the from_state of the first transition of an unexpected
// item: it was not in the payment file, it came from the provider's list.
const FromListed = "listed"

// RecordUnexpected joins the run's listed records of provider the other
// way, inside the caller's transaction: each record that no item of the run
// has becomes an item in the terminal state unexpected, with the provider's
// values and one transition (listed → unexpected), and is counted in the
// run's completion counters. The item's expected side is empty (amount 0,
// status empty, no account: the file has no such payment); its currency is
// the provider's, its occurred_at the time it was recorded. The run's
// breakdown counts them and sums the provider's amounts, by currency. Call
// it in the transaction that ends the listing: a run does not complete
// while its listing goes on (see completeRun), so it cannot complete
// without its unexpected items. It returns how many items it added; a
// second call adds none.
func RecordUnexpected(ctx context.Context, tx DB, runID uuid.UUID, provider, actor string, at time.Time) (int, error) {
	args := pgx.NamedArgs{"run_id": runID, "provider": provider, "actor": actor, "at": at,
		"shard": unexpectedShard, "reason": ReasonUnexpected, "from": FromListed}
	var n int
	err := tx.QueryRow(ctx, `
		WITH run AS (SELECT reconciliation_id FROM runs WHERE run_id = @run_id),
		new AS (
		    INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status,
		                       occurred_at, shard, state, provider, kind, provider_amount_minor, provider_currency,
		                       provider_status, last_reason, updated_at, terminal_at)
		    SELECT @run_id, p.record_id, '', run.reconciliation_id || ':' || p.record_id, 0, upper(p.currency), '',
		           @at, @shard, `+Unexpected.literal()+`, p.provider, p.kind, p.amount_minor, p.currency,
		           p.status, @reason, @at, @at
		      FROM provider_records p, run
		     WHERE p.run_id = @run_id AND p.provider = @provider
		       AND NOT EXISTS (SELECT FROM items i WHERE i.run_id = p.run_id AND i.transaction_id = p.record_id)
		    RETURNING transaction_id, currency, provider_amount_minor),
		broken AS (
		    INSERT INTO run_breakdown AS b (run_id, shard, provider, currency, item_count, unexpected, unexpected_minor)
		    SELECT @run_id, @shard, @provider, currency, count(*), count(*), sum(provider_amount_minor)
		      FROM new GROUP BY currency
		    ON CONFLICT (run_id, shard, provider, currency) DO UPDATE
		       SET item_count = b.item_count + excluded.item_count, unexpected = b.unexpected + excluded.unexpected,
		           unexpected_minor = b.unexpected_minor + excluded.unexpected_minor),
		grown AS (UPDATE runs SET item_count = item_count + (SELECT count(*) FROM new) WHERE run_id = @run_id),
		counted AS (
		    INSERT INTO run_shards AS s (run_id, shard, provider, remaining, unexpected)
		    SELECT @run_id, @shard, @provider, 0, count(*) FROM new HAVING count(*) > 0
		    ON CONFLICT (run_id, shard, provider) DO UPDATE SET unexpected = s.unexpected + excluded.unexpected)
		SELECT count(*) FROM new`, args).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("record the unexpected records of run %s: %w", runID, err)
	}
	if n == 0 {
		return 0, nil
	}
	// The chain trigger reads the item row, so the history is written by a
	// statement of its own, after the items exist.
	_, err = tx.Exec(ctx, `
		INSERT INTO transitions (run_id, transaction_id, from_state, to_state, at, attempt, reason, details, actor)
		SELECT run_id, transaction_id, @from, state, @at, 0, @reason,
		       jsonb_build_object('provider', jsonb_build_object('amount_minor', provider_amount_minor,
		                          'currency', provider_currency, 'status', provider_status)),
		       @actor
		  FROM items
		 WHERE run_id = @run_id AND provider = @provider AND state = `+Unexpected.literal()+` AND history_len = 0
		 ORDER BY transaction_id`, args)
	if err != nil {
		return 0, fmt.Errorf("record the history of the unexpected records of run %s: %w", runID, err)
	}
	return n, nil
}

// unexpectedShard is the completion shard unexpected items are counted on.
// They are recorded terminal and never count a shard down, so one shard
// takes them all without contention.
const unexpectedShard = 0

// RunDay is the business date of a run and the time zone it was read in.
type RunDay struct {
	Date     time.Time
	TimeZone string
}

// RunDayOf returns the business date and time zone of run runID.
func RunDayOf(ctx context.Context, db DB, runID uuid.UUID) (RunDay, error) {
	var d RunDay
	err := db.QueryRow(ctx, `SELECT business_date, time_zone FROM runs WHERE run_id = $1`, runID).Scan(&d.Date, &d.TimeZone)
	if errors.Is(err, pgx.ErrNoRows) {
		return RunDay{}, fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return RunDay{}, fmt.Errorf("read the business date of run %s: %w", runID, err)
	}
	return d, nil
}

// ChooseCheckMode returns how run runID's items are checked (runs.check_mode:
// lookup, list or auto): the mode recorded by the first consumer to claim
// one of them, which is mode when this call is that first one. Consumers
// follow the run's mode whatever their own, so that a run is never listed
// by one consumer while another completes it by lookups.
func ChooseCheckMode(ctx context.Context, db DB, runID uuid.UUID, mode string) (string, error) {
	// Two first consumers at once: the second's update waits for the
	// first's and then matches no row, and its snapshot (taken before the
	// first committed) does not see the mode either; a second statement
	// does.
	for range 2 {
		var chosen string
		err := db.QueryRow(ctx, `
			WITH chosen AS (
			    UPDATE runs SET check_mode = $2 WHERE run_id = $1 AND check_mode IS NULL RETURNING check_mode)
			SELECT check_mode FROM chosen
			UNION ALL
			SELECT check_mode FROM runs WHERE run_id = $1 AND check_mode IS NOT NULL
			LIMIT 1`, runID, mode).Scan(&chosen)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("choose how run %s is checked: %w", runID, err)
		}
		return chosen, nil
	}
	return "", fmt.Errorf("choose how run %s is checked: no such run", runID)
}
