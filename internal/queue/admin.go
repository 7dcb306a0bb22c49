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

// DeadLetters lists the dead letters selected by f, oldest message first
// (see ListDeadLetters).
func (q *Queue) DeadLetters(ctx context.Context, f Filter) ([]DeadLetter, error) {
	return q.ListDeadLetters(ctx, q.pool, DeadLetterPage{RunID: f.RunID, IDs: f.IDs, Limit: f.Limit})
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
	// Total counts every message kept (acked ones included): the open ones
	// and Acked.
	Total int64 `json:"total"`
	// Available counts ready messages that can be claimed now.
	Available int64 `json:"available"`
	// InFlight counts messages claimed and within their visibility timeout.
	InFlight int64 `json:"in_flight"`
	// Delayed counts messages rescheduled for a later retry.
	Delayed int64 `json:"delayed"`
	// DeadLettered counts dead letters.
	DeadLettered int64 `json:"dead_lettered"`
	// Acked counts messages done, which are kept for the retention period.
	Acked int64 `json:"acked"`
	// Estimated is true when Acked, and with it Total, is an estimate from
	// the table's statistics rather than a count (see Stats).
	Estimated bool `json:"estimated"`
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
	// RunsAcked is true when the runs' Acked and Total were counted
	// (ExactStats); Stats leaves them zero.
	RunsAcked bool `json:"runs_acked"`
}

// openCountsSQL counts the open messages (ready or dead) in total and per
// run, and the age of the oldest available one, at $1 (NULL: now()). Each
// half of the union reads one partial index, queue_messages_ready or
// queue_messages_dead: it costs what is open, however many acked messages
// the retention keeps.
const openCountsSQL = `
WITH open AS (
    SELECT run_id, reconciliation_id, state, visible_at, lease, enqueued_at FROM queue_messages WHERE state = 'ready'
    UNION ALL
    SELECT run_id, reconciliation_id, state, visible_at, lease, enqueued_at FROM queue_messages WHERE state = 'dead')
SELECT grouping(run_id) = 1, coalesce(run_id, '00000000-0000-0000-0000-000000000000'), coalesce(min(reconciliation_id), ''),
       count(*) FILTER (WHERE state = 'ready' AND visible_at <= ` + statsNow + `),
       count(*) FILTER (WHERE state = 'ready' AND visible_at > ` + statsNow + ` AND lease IS NOT NULL),
       count(*) FILTER (WHERE state = 'ready' AND visible_at > ` + statsNow + ` AND lease IS NULL),
       count(*) FILTER (WHERE state = 'dead'),
       0::bigint,
       ` + oldestAvailable + `
  FROM open
 GROUP BY GROUPING SETS ((), (run_id))
 ORDER BY 1 DESC, 3`

// exactCountsSQL counts every message, acked ones included, in total and
// per run with open messages: a sequential scan of the whole table.
const exactCountsSQL = `
SELECT grouping(run_id) = 1, coalesce(run_id, '00000000-0000-0000-0000-000000000000'), coalesce(min(reconciliation_id), ''),
       count(*) FILTER (WHERE state = 'ready' AND visible_at <= ` + statsNow + `),
       count(*) FILTER (WHERE state = 'ready' AND visible_at > ` + statsNow + ` AND lease IS NOT NULL),
       count(*) FILTER (WHERE state = 'ready' AND visible_at > ` + statsNow + ` AND lease IS NULL),
       count(*) FILTER (WHERE state = 'dead'),
       count(*) FILTER (WHERE state = 'acked'),
       ` + oldestAvailable + `
  FROM queue_messages
 GROUP BY GROUPING SETS ((), (run_id))
HAVING grouping(run_id) = 1 OR count(*) FILTER (WHERE state <> 'acked') > 0
 ORDER BY 1 DESC, 3`

const (
	statsNow        = "coalesce($1::timestamptz, now())"
	oldestAvailable = `coalesce((extract(epoch FROM ` + statsNow + ` - min(enqueued_at) FILTER (WHERE state = 'ready' AND visible_at <= ` + statsNow + `))
                 * 1000000)::bigint, 0)`
)

// ackedEstimateSQL estimates the acked messages as the planner estimates a
// table's rows: the tuple density of the last VACUUM or ANALYZE
// (pg_class.reltuples per relpages) times the table's pages now, less the
// open messages ($1). It is NULL for a table that has no statistics yet
// (never vacuumed or analysed, or empty when last analysed), which is then
// counted.
const ackedEstimateSQL = `
SELECT CASE WHEN c.reltuples < 0 OR c.relpages = 0 THEN NULL
            ELSE greatest(round(c.reltuples / c.relpages
                                * (pg_relation_size(c.oid) / current_setting('block_size')::float8)) - $1, 0)::bigint
       END
  FROM pg_class c WHERE c.oid = 'queue_messages'::regclass`

// Stats counts the queue's open messages (available, in flight, delayed,
// dead-lettered), in total and per run with open messages, through the
// partial indexes of ready and dead messages, so it costs what is open
// however long the retention keeps acked messages. The acked messages are
// estimated from the table's statistics (Counts.Estimated; exact on a table
// without statistics yet) and not counted per run: ExactStats counts them,
// with a scan of the whole table.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	s, err := q.OpenStats(ctx)
	if err != nil {
		return Stats{}, err
	}
	open := s.Available + s.InFlight + s.Delayed + s.DeadLettered
	var estimate *int64
	if err := q.pool.QueryRow(ctx, ackedEstimateSQL, open).Scan(&estimate); err != nil {
		return Stats{}, fmt.Errorf("estimate acked messages: %w", err)
	}
	if estimate != nil {
		s.Acked, s.Estimated = *estimate, true
	} else if err := q.pool.QueryRow(ctx, `SELECT count(*) FROM queue_messages WHERE state = 'acked'`).Scan(&s.Acked); err != nil {
		return Stats{}, fmt.Errorf("count acked messages: %w", err)
	}
	s.Total = open + s.Acked
	return s, nil
}

// OpenStats is Stats without the acked messages (Acked is zero and Total
// counts the open messages): one statement through the partial indexes, for
// callers that show only the open work.
func (q *Queue) OpenStats(ctx context.Context) (Stats, error) {
	return q.stats(ctx, openCountsSQL, false)
}

// ExactStats is Stats with the acked messages counted, in total and per
// run: a sequential scan of every message the retention keeps (a second or
// so per few million).
func (q *Queue) ExactStats(ctx context.Context) (Stats, error) {
	return q.stats(ctx, exactCountsSQL, true)
}

// stats reads the counts query's rows: the total first, then the runs,
// whose acked messages it counted when exact.
func (q *Queue) stats(ctx context.Context, query string, exact bool) (Stats, error) {
	rows, err := q.pool.Query(ctx, query, q.now())
	if err != nil {
		return Stats{}, fmt.Errorf("count messages: %w", err)
	}
	s := Stats{RunsAcked: exact}
	var (
		total bool
		r     RunStats
		age   int64
	)
	_, err = pgx.ForEachRow(rows, []any{&total, &r.RunID, &r.ReconciliationID, &r.Available, &r.InFlight,
		&r.Delayed, &r.DeadLettered, &r.Acked, &age}, func() error {
		r.OldestAvailableAge = time.Duration(age) * time.Microsecond
		r.Total = 0
		if total || exact {
			r.Total = r.Available + r.InFlight + r.Delayed + r.DeadLettered + r.Acked
		}
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
