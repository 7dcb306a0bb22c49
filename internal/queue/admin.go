package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Filter selects dead letters. The zero value selects all of them.
type Filter struct {
	// RunID, when not the zero UUID, selects the messages of one run.
	RunID uuid.UUID
	// IDs, when not empty, selects these message ids.
	IDs []int64
	// Limit caps the number of rows DeadLetters returns. Defaults to 0: no
	// cap. Redrive ignores it.
	Limit int
}

// args returns the filter's parameters $1 (run or NULL) and $2 (ids or NULL).
func (f Filter) args() (run *uuid.UUID, ids []int64) {
	if f.RunID != uuid.Nil {
		run = &f.RunID
	}
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	return run, ids
}

// filterSQL matches the dead letters selected by $1 and $2.
const filterSQL = `state = 'dead'
   AND ($1::uuid IS NULL OR run_id = $1)
   AND ($2::bigint[] IS NULL OR message_id = ANY ($2))`

// ReasonCancelled is the dead-letter reason of the messages of a withdrawn
// run (DeadLetterKeys). Redrive leaves them alone: their items are
// cancelled, not failed.
const ReasonCancelled = "cancelled"

// DeadLetter is one dead-lettered message.
type DeadLetter struct {
	// ID identifies the message.
	ID int64
	// Reason is why it was dead-lettered (for example max_attempts, poison,
	// http_400).
	Reason string
	// LastError is the error text recorded with it.
	LastError string
	// Deliveries is its delivery count when it was dead-lettered.
	Deliveries int
	// EnqueuedAt is when it was first published.
	EnqueuedAt time.Time
	// DeadAt is when it was dead-lettered.
	DeadAt time.Time
	// Age is how long it has been dead-lettered.
	Age time.Duration
	Message
}

// DeadLetters lists the dead letters selected by f, oldest message first.
func (q *Queue) DeadLetters(ctx context.Context, f Filter) ([]DeadLetter, error) {
	run, ids := f.args()
	var limit *int
	if f.Limit > 0 {
		limit = &f.Limit
	}
	rows, err := q.pool.Query(ctx, `
SELECT message_id, coalesce(reason, ''), coalesce(last_error, ''), deliveries, enqueued_at, changed_at,
       (extract(epoch FROM coalesce($3::timestamptz, now()) - changed_at) * 1000000)::bigint,
       run_id, reconciliation_id, transaction_id, idempotency_key, attempt
  FROM queue_messages
 WHERE `+filterSQL+`
 ORDER BY message_id
 LIMIT $4`, run, ids, q.now(), limit)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	dls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadLetter, error) {
		var d DeadLetter
		var ageMicros int64
		err := row.Scan(&d.ID, &d.Reason, &d.LastError, &d.Deliveries, &d.EnqueuedAt, &d.DeadAt, &ageMicros,
			&d.RunID, &d.ReconciliationID, &d.TransactionID, &d.IdempotencyKey, &d.Attempt)
		d.Age = time.Duration(ageMicros) * time.Microsecond
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return dls, nil
}

// Redrive moves the dead letters selected by f, except those of a
// withdrawn run (reason ReasonCancelled), back to the queue, visible now, with their delivery count and Attempt reset: a redriven item gets a
// fresh failure budget (the ledger item keeps counting every provider call).
// It runs in the caller's transaction and returns the messages
// it moved, so the caller can record the ledger transitions in the same
// transaction. Waiting listeners are notified on commit.
func (q *Queue) Redrive(ctx context.Context, db DB, f Filter) ([]Message, error) {
	run, ids := f.args()
	rows, err := db.Query(ctx, `
WITH moved AS (
    UPDATE queue_messages
       SET state = 'ready', visible_at = coalesce($3::timestamptz, now()), deliveries = 0, attempt = 0, lease = NULL,
           reason = 'redrive', changed_at = coalesce($3::timestamptz, now())
     WHERE `+filterSQL+` AND reason IS DISTINCT FROM '`+ReasonCancelled+`'
    RETURNING message_id, run_id, reconciliation_id, transaction_id, idempotency_key, attempt),
notified AS (
    SELECT pg_notify('`+Channel+`', '') FROM (SELECT count(*) AS n FROM moved) c WHERE c.n > 0)
SELECT run_id, reconciliation_id, transaction_id, idempotency_key, attempt
  FROM moved, (SELECT count(*) FROM notified) n
 ORDER BY message_id`, run, ids, q.now())
	if err != nil {
		return nil, fmt.Errorf("redrive dead letters: %w", err)
	}
	msgs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Message, error) {
		var m Message
		err := row.Scan(&m.RunID, &m.ReconciliationID, &m.TransactionID, &m.IdempotencyKey, &m.Attempt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("redrive dead letters: %w", err)
	}
	return msgs, nil
}

// Counts are message counts by condition.
type Counts struct {
	// Total counts every message ever published (acked ones included).
	Total int64 `json:"total"`
	// Available counts ready messages that can be claimed now.
	Available int64 `json:"available"`
	// InFlight counts messages claimed and within their visibility timeout.
	InFlight int64 `json:"in_flight"`
	// Delayed counts messages rescheduled for a later retry.
	Delayed int64 `json:"delayed"`
	// DeadLettered counts dead letters.
	DeadLettered int64 `json:"dead_lettered"`
	// Acked counts messages done.
	Acked int64 `json:"acked"`
	// OldestAvailableAge is how long the oldest available message has been
	// in the queue since it was first published; 0 when none is available.
	OldestAvailableAge time.Duration `json:"oldest_available_age_ns"`
}

// RunStats are the counts of one run.
type RunStats struct {
	// RunID is the run.
	RunID uuid.UUID `json:"run_id"`
	// ReconciliationID names the run.
	ReconciliationID string `json:"reconciliation_id"`
	Counts
}

// Stats is a snapshot of the queue.
type Stats struct {
	Counts
	// Runs holds the counts of each run that has messages not yet acked,
	// ordered by reconciliation id.
	Runs []RunStats `json:"runs"`
}

// Stats counts the queue's messages, in total and per run with open
// messages, in one consistent snapshot.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	const now = "coalesce($1::timestamptz, now())"
	rows, err := q.pool.Query(ctx, `
SELECT grouping(run_id) = 1, coalesce(run_id, '00000000-0000-0000-0000-000000000000'), coalesce(min(reconciliation_id), ''),
       count(*),
       count(*) FILTER (WHERE state = 'ready' AND visible_at <= `+now+`),
       count(*) FILTER (WHERE state = 'ready' AND visible_at > `+now+` AND lease IS NOT NULL),
       count(*) FILTER (WHERE state = 'ready' AND visible_at > `+now+` AND lease IS NULL),
       count(*) FILTER (WHERE state = 'dead'),
       count(*) FILTER (WHERE state = 'acked'),
       coalesce((extract(epoch FROM `+now+` - min(enqueued_at) FILTER (WHERE state = 'ready' AND visible_at <= `+now+`))
                 * 1000000)::bigint, 0)
  FROM queue_messages
 GROUP BY GROUPING SETS ((), (run_id))
HAVING grouping(run_id) = 1 OR count(*) FILTER (WHERE state <> 'acked') > 0
 ORDER BY 1 DESC, 3`, q.now())
	if err != nil {
		return Stats{}, fmt.Errorf("count messages: %w", err)
	}
	var s Stats
	var (
		total bool
		r     RunStats
		age   int64
	)
	_, err = pgx.ForEachRow(rows, []any{&total, &r.RunID, &r.ReconciliationID, &r.Total, &r.Available, &r.InFlight,
		&r.Delayed, &r.DeadLettered, &r.Acked, &age}, func() error {
		r.OldestAvailableAge = time.Duration(age) * time.Microsecond
		if total {
			s.Counts = r.Counts
		} else {
			s.Runs = append(s.Runs, r)
		}
		return nil
	})
	if err != nil {
		return Stats{}, fmt.Errorf("count messages: %w", err)
	}
	return s, nil
}

// DeadLetterKeys dead-letters the messages with the given idempotency keys
// that are still ready (available, delayed or in flight), with reason and
// lastError, in the caller's transaction: the messages of a withdrawn run's
// items. A lease in flight is voided, so its holder's ack, retry or
// dead-letter changes nothing (ErrStaleLease). It returns the number of
// messages dead-lettered.
func (q *Queue) DeadLetterKeys(ctx context.Context, db DB, keys []string, reason, lastError string) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	tag, err := db.Exec(ctx, `
UPDATE queue_messages
   SET state = 'dead', lease = NULL, reason = $2, last_error = $3, changed_at = coalesce($4::timestamptz, now())
 WHERE idempotency_key = ANY ($1) AND state = 'ready'`, keys, reason, lastError, q.now())
	if err != nil {
		return 0, fmt.Errorf("dead-letter %d messages: %w", len(keys), err)
	}
	return int(tag.RowsAffected()), nil
}

// ReadyByProvider counts the ready messages (available, in flight or
// delayed) of each provider named on them ("" for the default provider's).
func (q *Queue) ReadyByProvider(ctx context.Context) (map[string]int64, error) {
	rows, err := q.pool.Query(ctx, `SELECT provider, count(*) FROM queue_messages WHERE state = 'ready' GROUP BY provider`)
	if err != nil {
		return nil, fmt.Errorf("count ready messages by provider: %w", err)
	}
	out := map[string]int64{}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		out[name] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count ready messages by provider: %w", err)
	}
	return out, nil
}
