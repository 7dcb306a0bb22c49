// Package queue is the PostgreSQL-backed, at-least-once work queue between the
// enqueuer and the consumers.
//
// Messages live in the queue_messages table (migrations/00002_queue.sql), one
// row each, with typed columns. Publishing is deduplicated by idempotency key
// forever: acked rows are kept, so a key is never enqueued twice. Claim hands
// out a batch with FOR UPDATE SKIP LOCKED, a lease token and a visibility
// timeout; a message that is not acked in time becomes claimable again with
// its delivery count incremented. Ack, RetryAt and DeadLetter are conditional
// updates on (message id, lease) inside a transaction the caller supplies, so
// the ledger change and the message's fate commit or roll back together, and a
// holder whose lease has been superseded changes nothing (ErrStaleLease).
//
// Every statement takes its time from the database clock (now()) unless
// Config.Now is set, which tests use to move time without sleeping.
//
// Idle consumers wait with a Listener: publish, release and redrive NOTIFY the
// channel, and the listener sleeps no longer than the next time a delayed
// retry or an expiring lease becomes due, so polling is only the fallback.
//
// The package owns queue_messages: nothing else runs SQL on it. Stats and
// the dead-letter listing are in admin.go, the reads of a page (a run's
// split, dead letters by reason) in read.go, pruning in prune.go.
package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/logthrottle"
)

// ErrStaleLease is returned by Ack, RetryAt, DeadLetter and Extend when the
// delivery's lease is no longer current: the message was redelivered to
// another consumer after its visibility timeout, or its fate was already
// settled. Nothing was changed.
var ErrStaleLease = errors.New("stale lease")

// Channel is the LISTEN/NOTIFY channel on which the queue announces newly
// available messages.
const Channel = "reconcile_queue"

// copyThreshold is the batch size from which Publish stages messages with
// COPY instead of sending them as arrays in one INSERT: below it the single
// round trip of the array form is faster.
const copyThreshold = 1000

// DB is what the queue needs to run statements: pgx.Tx, *pgxpool.Pool and
// *pgx.Conn satisfy it. Pass a pgx.Tx to make a queue change part of the
// caller's transaction.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// Message is the compact content of a queue message: what a consumer needs
// to find its ledger item.
type Message struct {
	// RunID is the run of the item.
	RunID uuid.UUID
	// ReconciliationID names the run, for example nightly-2026-10-24.
	ReconciliationID string
	// TransactionID is the item's transaction id.
	TransactionID string
	// IdempotencyKey is "<reconciliation_id>:<transaction_id>", unique forever.
	IdempotencyKey string
	// Attempt counts the provider attempts made so far for the item (0 when
	// first published, +1 on each RetryAt).
	Attempt int
	// Provider names the provider that answers for the item, so each
	// provider's messages can be claimed on their own (ClaimProviders);
	// empty: the default provider.
	Provider string
}

// Delivery is one claimed message.
type Delivery struct {
	// ID identifies the message.
	ID int64
	// Lease is the token of this claim; settling the message requires it.
	Lease uuid.UUID
	// Deliveries counts the claims of the message since it was published,
	// last rescheduled or redriven, this one included.
	Deliveries int
	// Poison is set when the message has been claimed more than
	// Config.MaxDeliveries times without being acked, rescheduled or
	// dead-lettered: consumers keep dying on it. The caller should
	// dead-letter it together with its ledger item.
	Poison bool
	Message
}

// Defaults of Config.
const (
	// DefaultVisibility is the default visibility timeout of a claim.
	DefaultVisibility = 30 * time.Second
	// DefaultMaxDeliveries is the default number of unsettled claims after
	// which a message is poison.
	DefaultMaxDeliveries = 5
)

// Config configures a Queue.
type Config struct {
	// Visibility is how long a claimed message stays invisible to other
	// consumers before it is delivered again. Defaults to DefaultVisibility.
	Visibility time.Duration
	// MaxDeliveries is how many times a message may be claimed without being
	// settled before Claim marks it Poison. Defaults to DefaultMaxDeliveries.
	MaxDeliveries int
	// Now, when set, replaces the database clock in every statement (tests
	// use it to move time without sleeping). Defaults to nil: the database's
	// now().
	Now func() time.Time
	// ListenURL, when set, is the connection string of the Listener's
	// connection, which must reach the server directly or through a pooler
	// in session mode: LISTEN needs a session, which a transaction pooler
	// does not keep between transactions. Defaults to "": the Listener takes
	// a connection out of the pool, or, when the pool goes through a pooler,
	// polls the table instead of listening.
	ListenURL string
	// Logger receives listener connection problems, throttled to a line per
	// kind every 30 s. Defaults to discarding them.
	Logger *slog.Logger
}

// Queue is the PostgreSQL-backed queue. It is safe for concurrent use.
type Queue struct {
	pool *pgxpool.Pool
	cfg  Config
	// warn throttles the listeners' failure lines; pollOnce says once that
	// the listeners poll.
	warn     *logthrottle.Logger
	pollOnce sync.Once
}

// New returns a queue on pool. cfg's zero fields take their defaults.
func New(pool *pgxpool.Pool, cfg Config) *Queue {
	cfg.Visibility = cmp.Or(cfg.Visibility, DefaultVisibility)
	cfg.MaxDeliveries = cmp.Or(cfg.MaxDeliveries, DefaultMaxDeliveries)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Queue{pool: pool, cfg: cfg, warn: logthrottle.New(cfg.Logger, logthrottle.Config{})}
}

// Visibility returns the visibility timeout given to each claim.
func (q *Queue) Visibility() time.Duration { return q.cfg.Visibility }

// MaxDeliveries returns the number of claims after which a delivery is
// marked Poison.
func (q *Queue) MaxDeliveries() int { return q.cfg.MaxDeliveries }

// now returns the injected time, or nil so that SQL's coalesce($n, now())
// falls back to the database clock.
func (q *Queue) now() *time.Time {
	if q.cfg.Now == nil {
		return nil
	}
	t := q.cfg.Now()
	return &t
}

// PublishResult counts what a publish did.
type PublishResult struct {
	// Published is the number of new messages.
	Published int
	// Duplicates is the number of messages skipped because their idempotency
	// key was already in the queue (in any state) or repeated in the batch.
	Duplicates int
}

// Publish adds msgs to the queue, skipping (and counting) those whose
// idempotency key is already known. Run it in the caller's transaction to
// publish atomically with the ledger rows; waiting listeners are notified on
// commit. Large batches are staged with COPY.
func (q *Queue) Publish(ctx context.Context, db DB, msgs []Message) (PublishResult, error) {
	if len(msgs) == 0 {
		return PublishResult{}, nil
	}
	if len(msgs) < copyThreshold {
		return q.publishArrays(ctx, db, msgs)
	}
	if tx, ok := db.(pgx.Tx); ok {
		return q.publishCopy(ctx, tx, msgs)
	}
	// COPY and the staging table must share one connection: a transaction.
	var res PublishResult
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		res, err = q.publishCopy(ctx, tx, msgs)
		return err
	})
	return res, err
}

// insertTail is the end of a publish statement: it inserts the rows of the
// CTE src and notifies listeners when any was new. Parameter @now is the
// injected time or NULL.
const insertTail = `,
ins AS (
    INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider,
                                visible_at, enqueued_at, changed_at)
    SELECT run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider,
           coalesce(@now::timestamptz, now()), coalesce(@now::timestamptz, now()),
           coalesce(@now::timestamptz, now())
      FROM src
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING 1)
SELECT c.total, c.inserted, CASE WHEN c.inserted > 0 THEN pg_notify('` + Channel + `', '') END IS NULL
  FROM (SELECT (SELECT count(*) FROM src) AS total, (SELECT count(*) FROM ins) AS inserted) c`

func (q *Queue) publishArrays(ctx context.Context, db DB, msgs []Message) (PublishResult, error) {
	runIDs := make([]uuid.UUID, len(msgs))
	recIDs := make([]string, len(msgs))
	txIDs := make([]string, len(msgs))
	keys := make([]string, len(msgs))
	attempts := make([]int32, len(msgs))
	providers := make([]string, len(msgs))
	for i, m := range msgs {
		runIDs[i], recIDs[i], txIDs[i], keys[i], attempts[i] = m.RunID, m.ReconciliationID, m.TransactionID, m.IdempotencyKey, int32(m.Attempt)
		providers[i] = m.Provider
	}
	sql := `WITH src AS (
    SELECT * FROM unnest(@runs::uuid[], @reconciliations::text[], @transactions::text[], @keys::text[], @attempts::int4[], @providers::text[])
        AS s(run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider))` + insertTail
	return q.insert(ctx, db, sql, pgx.StrictNamedArgs{"now": q.now(), "runs": runIDs, "reconciliations": recIDs,
		"transactions": txIDs, "keys": keys, "attempts": attempts, "providers": providers})
}

func (q *Queue) publishCopy(ctx context.Context, tx pgx.Tx, msgs []Message) (PublishResult, error) {
	// The staging table lives only as long as the transaction (ON COMMIT
	// DROP), so no state outlives it on the server connection, which a
	// transaction pooler hands to other clients next; the DELETE below
	// empties it for a second Publish in the same transaction.
	_, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS queue_publish_staging (
        run_id uuid, reconciliation_id text, transaction_id text, idempotency_key text, attempt int4, provider text
    ) ON COMMIT DROP`)
	if err != nil {
		return PublishResult{}, fmt.Errorf("create staging table: %w", err)
	}
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"queue_publish_staging"},
		[]string{"run_id", "reconciliation_id", "transaction_id", "idempotency_key", "attempt", "provider"},
		pgx.CopyFromSlice(len(msgs), func(i int) ([]any, error) {
			m := msgs[i]
			return []any{m.RunID, m.ReconciliationID, m.TransactionID, m.IdempotencyKey, int32(m.Attempt), m.Provider}, nil
		}))
	if err != nil {
		return PublishResult{}, fmt.Errorf("copy %d messages: %w", len(msgs), err)
	}
	sql := `WITH src AS (DELETE FROM queue_publish_staging RETURNING *)` + insertTail
	return q.insert(ctx, tx, sql, pgx.StrictNamedArgs{"now": q.now()})
}

// PublishNewQuery publishes the messages yielded by query, which must return
// the columns (run_id uuid, reconciliation_id text, transaction_id text,
// idempotency_key text, attempt int, provider text) and may use the parameters $1..$n bound
// to args. The messages are derived in the database, so an enqueuer that has
// just copied a run's items publishes their messages without sending them
// again. It is for messages whose idempotency keys cannot be known yet, such
// as those of a run created in the same transaction: it skips the duplicate
// check (on a million messages that saves about a fifth), and a key that is
// known after all fails the whole publish with a unique violation instead of
// being skipped. It returns the number of messages published.
func (q *Queue) PublishNewQuery(ctx context.Context, db DB, query string, args ...any) (int, error) {
	tag, err := db.Exec(ctx, `
INSERT INTO queue_messages (run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider,
                            visible_at, enqueued_at, changed_at)
SELECT run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider, t.now, t.now, t.now
  FROM (`+query+`) AS src(run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider),
       (SELECT coalesce($`+strconv.Itoa(len(args)+1)+`::timestamptz, now()) AS now) t`,
		append(slices.Clip(args), q.now())...)
	if err != nil {
		return 0, fmt.Errorf("publish new messages: %w", err)
	}
	n := int(tag.RowsAffected())
	if n > 0 {
		if _, err := db.Exec(ctx, `SELECT pg_notify($1, '')`, Channel); err != nil {
			return 0, fmt.Errorf("notify listeners of %d new messages: %w", n, err)
		}
	}
	return n, nil
}

func (q *Queue) insert(ctx context.Context, db DB, sql string, args pgx.StrictNamedArgs) (PublishResult, error) {
	var total, inserted int
	var notified bool
	if err := db.QueryRow(ctx, sql, args).Scan(&total, &inserted, &notified); err != nil {
		return PublishResult{}, fmt.Errorf("publish messages: %w", dbconn.ElideValues(err))
	}
	return PublishResult{Published: inserted, Duplicates: total - inserted}, nil
}

// Claim takes up to n visible messages, oldest first, skipping messages other
// consumers are claiming. Each returned delivery carries a new lease, is
// invisible to others for Config.Visibility, and has its delivery count
// incremented. It commits on its own: a consumer that dies afterwards leaves
// its messages to come back after the visibility timeout.
func (q *Queue) Claim(ctx context.Context, n int) ([]Delivery, error) {
	return q.claim(ctx, n, nil)
}

// ClaimProviders is Claim restricted to the messages of the named providers
// ("" names the default provider's), so a consumer of several providers
// claims each provider's messages at that provider's own pace. It claims
// from the first provider, then fills what is left from the next: one
// ordered index range per provider, never a sort across them.
func (q *Queue) ClaimProviders(ctx context.Context, n int, providers []string) ([]Delivery, error) {
	var out []Delivery
	for _, p := range providers {
		if len(out) >= n {
			break
		}
		ds, err := q.claim(ctx, n-len(out), &p)
		if err != nil && len(out) > 0 {
			return out, nil // the leases taken are the caller's; the error comes again
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// claim claims for Claim (provider nil: any message) and ClaimProviders.
func (q *Queue) claim(ctx context.Context, n int, provider *string) ([]Delivery, error) {
	if n <= 0 {
		return nil, nil
	}
	lease := uuid.New()
	filter := ""
	args := pgx.StrictNamedArgs{"now": q.now(), "n": n, "lease": lease, "visibility_us": q.cfg.Visibility.Microseconds()}
	if provider != nil {
		filter = " AND provider = @provider"
		args["provider"] = *provider
	}
	return q.lease(ctx, fmt.Sprintf("claim %d messages", n), lease, `
WITH picked AS (
    SELECT message_id FROM queue_messages
     WHERE state = 'ready' AND visible_at <= coalesce(@now::timestamptz, now())`+filter+`
     ORDER BY visible_at, message_id
     LIMIT @n
       FOR UPDATE SKIP LOCKED)`+leasePicked, args)
}

// ClaimKeys claims the visible ready messages among those with the given
// idempotency keys and one of providers, skipping messages other consumers
// are claiming, as Claim does. List mode claims the messages of a stored
// page's items with it while later pages are being fetched; keys without a
// claimable message are skipped.
func (q *Queue) ClaimKeys(ctx context.Context, keys, providers []string) ([]Delivery, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	lease := uuid.New()
	args := pgx.StrictNamedArgs{"now": q.now(), "keys": keys, "providers": providers, "lease": lease,
		"visibility_us": q.cfg.Visibility.Microseconds()}
	return q.lease(ctx, fmt.Sprintf("claim the messages of %d keys", len(keys)), lease, `
WITH picked AS (
    SELECT message_id FROM queue_messages
     WHERE idempotency_key = ANY(@keys::text[]) AND state = 'ready' AND visible_at <= coalesce(@now::timestamptz, now())
       AND provider = ANY(@providers::text[])
     ORDER BY message_id
       FOR UPDATE SKIP LOCKED)`+leasePicked, args)
}

// leasePicked leases the messages of a query's CTE "picked" (see lease).
const leasePicked = `
UPDATE queue_messages m
   SET lease = @lease, deliveries = m.deliveries + 1,
       visible_at = coalesce(@now::timestamptz, now()) + @visibility_us::bigint * interval '1 microsecond'
  FROM picked
 WHERE m.message_id = picked.message_id
RETURNING m.message_id, m.deliveries, m.run_id, m.reconciliation_id, m.transaction_id, m.idempotency_key, m.attempt, m.provider`

// lease runs a claim statement ending in leasePicked and returns its
// deliveries in message order; what names the claim in errors.
func (q *Queue) lease(ctx context.Context, what string, lease uuid.UUID, sql string, args pgx.StrictNamedArgs) ([]Delivery, error) {
	rows, err := q.pool.Query(ctx, sql, args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, dbconn.ElideValues(err))
	}
	ds, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		d := Delivery{Lease: lease}
		err := row.Scan(&d.ID, &d.Deliveries, &d.RunID, &d.ReconciliationID, &d.TransactionID, &d.IdempotencyKey, &d.Attempt, &d.Provider)
		d.Poison = d.Deliveries > q.cfg.MaxDeliveries
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	slices.SortFunc(ds, func(a, b Delivery) int { return cmp.Compare(a.ID, b.ID) })
	return ds, nil
}

// settle runs a conditional update of message d under its lease and returns
// ErrStaleLease when no row matched. The statement names the message @id and
// its lease @lease; args holds its other parameters.
func settle(ctx context.Context, db DB, d Delivery, what, sql string, args pgx.StrictNamedArgs) error {
	args["id"], args["lease"] = d.ID, d.Lease
	tag, err := db.Exec(ctx, sql, args)
	if err != nil {
		return fmt.Errorf("%s message %d: %w", what, d.ID, dbconn.ElideValues(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s message %d: %w", what, d.ID, ErrStaleLease)
	}
	return nil
}

// Ack marks the delivered message done, in the caller's transaction. It
// returns ErrStaleLease, changing nothing, when d's lease is no longer
// current. The acked row is kept so its idempotency key stays taken.
func (q *Queue) Ack(ctx context.Context, db DB, d Delivery) error {
	return settle(ctx, db, d, "ack", `
UPDATE queue_messages SET state = 'acked', lease = NULL, changed_at = coalesce(@now::timestamptz, now())
 WHERE message_id = @id AND lease = @lease AND state = 'ready'`, pgx.StrictNamedArgs{"now": q.now()})
}

// AckBatch acks every delivery of ds in one statement, in the caller's
// transaction, and returns those whose lease was no longer current (left
// unchanged).
func (q *Queue) AckBatch(ctx context.Context, db DB, ds []Delivery) (stale []Delivery, err error) {
	if len(ds) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(ds))
	leases := make([]uuid.UUID, len(ds))
	for i, d := range ds {
		ids[i], leases[i] = d.ID, d.Lease
	}
	rows, err := db.Query(ctx, `
UPDATE queue_messages m SET state = 'acked', lease = NULL, changed_at = coalesce($3::timestamptz, now())
  FROM unnest($1::bigint[], $2::uuid[]) AS a(id, lease)
 WHERE m.message_id = a.id AND m.lease = a.lease AND m.state = 'ready'
RETURNING m.message_id`, ids, leases, q.now())
	if err != nil {
		return nil, fmt.Errorf("ack %d messages: %w", len(ds), dbconn.ElideValues(err))
	}
	acked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("ack %d messages: %w", len(ds), err)
	}
	if len(acked) == len(ds) {
		return nil, nil
	}
	done := make(map[int64]bool, len(acked))
	for _, id := range acked {
		done[id] = true
	}
	for _, d := range ds {
		if !done[d.ID] {
			stale = append(stale, d)
		}
	}
	return stale, nil
}

// RetryAt reschedules the delivered message for another attempt at time at,
// in the caller's transaction: the message's Attempt becomes d.Attempt (the
// caller counts attempts: a throttled call may not use one up) and the
// delivery count is reset (the consumer did process it). It returns ErrStaleLease, changing
// nothing, when d's lease is no longer current. Listeners are notified on
// commit and wake when at arrives.
func (q *Queue) RetryAt(ctx context.Context, db DB, d Delivery, at time.Time, reason string) error {
	// The notification lets sleeping listeners shorten their sleep to at.
	return settle(ctx, db, d, "reschedule", `
WITH moved AS (
    UPDATE queue_messages
       SET visible_at = @at, lease = NULL, attempt = @attempt, deliveries = 0, reason = @reason,
           changed_at = coalesce(@now::timestamptz, now())
     WHERE message_id = @id AND lease = @lease AND state = 'ready'
    RETURNING 1)
SELECT pg_notify('`+Channel+`', 'retry') FROM moved`,
		pgx.StrictNamedArgs{"at": at, "reason": reason, "now": q.now(), "attempt": d.Attempt})
}

// DeadLetter moves the delivered message to the dead letters with a reason
// (for example max_attempts or poison) and the last error, in the caller's
// transaction. It returns ErrStaleLease, changing nothing, when d's lease is
// no longer current.
func (q *Queue) DeadLetter(ctx context.Context, db DB, d Delivery, reason, lastError string) error {
	return settle(ctx, db, d, "dead-letter", `
UPDATE queue_messages
   SET state = 'dead', lease = NULL, reason = @reason, last_error = @last_error,
       changed_at = coalesce(@now::timestamptz, now())
 WHERE message_id = @id AND lease = @lease AND state = 'ready'`,
		pgx.StrictNamedArgs{"reason": reason, "last_error": lastError, "now": q.now()})
}

// Extend keeps the delivered message invisible for another by from now, for
// a slow call. It returns ErrStaleLease when d's lease is no longer current.
func (q *Queue) Extend(ctx context.Context, d Delivery, by time.Duration) error {
	return settle(ctx, q.pool, d, "extend", `
UPDATE queue_messages SET visible_at = coalesce(@now::timestamptz, now()) + @by_us::bigint * interval '1 microsecond'
 WHERE message_id = @id AND lease = @lease AND state = 'ready'`, pgx.StrictNamedArgs{"now": q.now(), "by_us": by.Microseconds()})
}

// Release gives back claimed deliveries that were not processed (on a
// graceful shutdown): they become visible now and their delivery count
// increment is undone. Deliveries whose lease is no longer current are left
// alone.
func (q *Queue) Release(ctx context.Context, ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	ids := make([]int64, len(ds))
	leases := make([]uuid.UUID, len(ds))
	for i, d := range ds {
		ids[i], leases[i] = d.ID, d.Lease
	}
	_, err := q.pool.Exec(ctx, `
WITH released AS (
    UPDATE queue_messages m
       SET lease = NULL, deliveries = greatest(m.deliveries - 1, 0), visible_at = coalesce($3::timestamptz, now())
      FROM unnest($1::bigint[], $2::uuid[]) AS a(id, lease)
     WHERE m.message_id = a.id AND m.lease = a.lease AND m.state = 'ready'
    RETURNING 1)
SELECT pg_notify('`+Channel+`', '') FROM (SELECT count(*) AS n FROM released) c WHERE c.n > 0`,
		ids, leases, q.now())
	if err != nil {
		return fmt.Errorf("release %d messages: %w", len(ds), dbconn.ElideValues(err))
	}
	return nil
}
