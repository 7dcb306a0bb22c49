package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Querier is what the read functions need: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it, and so does a wrapper that counts a page's
// queries. Pass a read-only transaction to read several things in one
// snapshot.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Split is where a run's ready messages are.
type Split struct {
	Available, InFlight, Delayed int64
}

// RunSplit counts the ready messages of a run by where they are, reading at
// most limit+1 of them (a count past limit says "more than limit") along
// queue_messages_ready, the partial index of ready messages.
func (q *Queue) RunSplit(ctx context.Context, db Querier, runID uuid.UUID, limit int) (Split, error) {
	var s Split
	err := db.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE visible_at <= `+statsNow+`),
		       count(*) FILTER (WHERE visible_at > `+statsNow+` AND lease IS NOT NULL),
		       count(*) FILTER (WHERE visible_at > `+statsNow+` AND lease IS NULL)
		  FROM (SELECT visible_at, lease FROM queue_messages
		         WHERE state = 'ready' AND run_id = $2 LIMIT $3) m`, q.now(), runID, limit+1).
		Scan(&s.Available, &s.InFlight, &s.Delayed)
	if err != nil {
		return Split{}, fmt.Errorf("count queue of run %s: %w", runID, err)
	}
	return s, nil
}

// RunWait is what the queue holds of a run apart from its available
// messages, which RunWaits does not count (see there).
type RunWait struct {
	RunID uuid.UUID
	// InFlight counts the run's claimed messages within their visibility
	// timeout, Delayed those rescheduled for later and DeadLettered its
	// dead letters.
	InFlight, Delayed, DeadLettered int64
	// OldestAvailableAge is how long the run's oldest available message
	// has been in the queue since it was first published; 0 when none is
	// available.
	OldestAvailableAge time.Duration
}

// RunWaits reads, for each of runs, the messages the queue holds of it
// other than its available ones, and the age of its oldest available
// message, without counting the available messages, which can be the
// whole night: their number is the run's ready messages (its open items,
// for the ledger settles an item and its message in one transaction) less
// those in flight or delayed. Each figure is a short range of a partial
// index: the messages visible after now (queue_messages_ready; those in
// flight or delayed, few), the run's dead letters (queue_messages_dead),
// and the run's first available message along queue_messages_ready, found
// at once while one run is open and past the earlier runs' available
// messages otherwise. A run's messages are published together, in the
// transaction that enqueues it, and keep that publication time when
// redriven, so any available message's is the run's oldest. Runs without
// any of these are returned with zeros.
func (q *Queue) RunWaits(ctx context.Context, db Querier, runs []uuid.UUID) ([]RunWait, error) {
	rows, err := db.Query(ctx, runWaitsSQL, q.now(), runs)
	if err != nil {
		return nil, fmt.Errorf("read the queue of %d runs: %w", len(runs), err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RunWait, error) {
		var w RunWait
		var age int64
		err := row.Scan(&w.RunID, &w.InFlight, &w.Delayed, &w.DeadLettered, &age)
		w.OldestAvailableAge = time.Duration(age) * time.Microsecond
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the queue of %d runs: %w", len(runs), err)
	}
	return out, nil
}

// runWaitsSQL reads RunWaits's figures at $1 (NULL: now()) for the runs
// $2, in their order.
const runWaitsSQL = `
		SELECT r.run_id, w.in_flight, w.delayed, d.dead,
		       coalesce((extract(epoch FROM ` + statsNow + ` - o.enqueued_at) * 1000000)::bigint, 0)
		  FROM unnest($2::uuid[]) WITH ORDINALITY AS r(run_id, ord)
		 CROSS JOIN LATERAL (SELECT count(*) FILTER (WHERE lease IS NOT NULL) AS in_flight,
		                            count(*) FILTER (WHERE lease IS NULL) AS delayed
		                       FROM queue_messages
		                      WHERE state = 'ready' AND run_id = r.run_id AND visible_at > ` + statsNow + `) w
		 CROSS JOIN LATERAL (SELECT count(*) AS dead FROM queue_messages
		                      WHERE state = 'dead' AND run_id = r.run_id) d
		  LEFT JOIN LATERAL (SELECT enqueued_at FROM queue_messages
		                      WHERE state = 'ready' AND run_id = r.run_id AND visible_at <= ` + statsNow + `
		                      ORDER BY visible_at LIMIT 1) o ON true
		 ORDER BY r.ord`

// ReasonCount counts the dead letters of one reason.
type ReasonCount struct {
	Reason string
	Count  int64
}

// DeadLetterReasons counts dead letters by reason, most frequent first,
// along queue_messages_dead (run_id, message_id), the partial index of dead
// letters: those of one run, or of every run for the zero UUID; reading at
// most limit+1 of them, or all for a limit of 0.
func (q *Queue) DeadLetterReasons(ctx context.Context, db Querier, runID uuid.UUID, limit int) ([]ReasonCount, error) {
	// Only the conditions given are written, the cap as a literal, so that
	// the statement is planned for what it selects.
	where, args, capped := "", []any{}, ""
	if runID != uuid.Nil {
		where, args = ` AND run_id = $1`, append(args, runID)
	}
	if limit > 0 {
		capped = ` LIMIT ` + strconv.Itoa(limit+1)
	}
	rows, err := db.Query(ctx, `
		SELECT coalesce(reason, ''), count(*)
		  FROM (SELECT reason FROM queue_messages WHERE state = 'dead'`+where+capped+`) m
		 GROUP BY 1 ORDER BY 2 DESC, 1`, args...)
	if err != nil {
		return nil, fmt.Errorf("group dead letters by reason: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ReasonCount])
	if err != nil {
		return nil, fmt.Errorf("group dead letters by reason: %w", err)
	}
	return out, nil
}

// DeadLettersByReason counts every dead letter by reason.
func (q *Queue) DeadLettersByReason(ctx context.Context) ([]ReasonCount, error) {
	return q.DeadLetterReasons(ctx, q.pool, uuid.Nil, 0)
}

// DeadLetterPage selects a page of dead letters.
type DeadLetterPage struct {
	// RunID selects the dead letters of one run; the zero UUID: of every
	// run.
	RunID uuid.UUID
	// After is the message id the page starts after.
	After int64
	// IDs, when not empty, selects these message ids.
	IDs []int64
	// Reason selects the dead letters of one reason; empty: any.
	Reason string
	// Provider selects the messages of one provider ("" for the default
	// one); nil: any.
	Provider *string
	// Limit caps the page; 0: no cap.
	Limit int
}

// ListDeadLetters returns the dead letters p selects, oldest message first,
// along queue_messages_dead (run_id, message_id), the partial index of dead
// letters.
func (q *Queue) ListDeadLetters(ctx context.Context, db Querier, p DeadLetterPage) ([]DeadLetter, error) {
	// Only the conditions p sets are written, so that the statement is
	// planned for what it selects.
	where := []string{`state = 'dead'`}
	args := pgx.StrictNamedArgs{}
	add := func(cond, name string, v any) {
		where = append(where, cond)
		args[name] = v
	}
	if p.RunID != uuid.Nil {
		add(`run_id = @run_id`, "run_id", p.RunID)
	}
	if p.After > 0 {
		add(`message_id > @after`, "after", p.After)
	}
	if len(p.IDs) > 0 {
		add(`message_id = ANY (@ids)`, "ids", p.IDs)
	}
	if p.Reason != "" {
		add(`coalesce(reason, '') = @reason`, "reason", p.Reason)
	}
	if p.Provider != nil {
		add(`provider = @provider`, "provider", *p.Provider)
	}
	age := `now()`
	if now := q.now(); now != nil {
		age = `@now::timestamptz`
		args["now"] = *now
	}
	limit := ""
	if p.Limit > 0 {
		limit = "\n LIMIT " + strconv.Itoa(p.Limit)
	}
	rows, err := db.Query(ctx, `
		SELECT message_id, coalesce(reason, ''), coalesce(last_error, ''), deliveries, enqueued_at, changed_at,
		       (extract(epoch FROM `+age+` - changed_at) * 1000000)::bigint,
		       run_id, reconciliation_id, transaction_id, idempotency_key, attempt, provider
		  FROM queue_messages
		 WHERE `+strings.Join(where, " AND ")+`
		 ORDER BY message_id`+limit, args)
	if err != nil {
		return nil, fmt.Errorf("list dead letters of run %s: %w", p.RunID, err)
	}
	dls, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, fmt.Errorf("list dead letters of run %s: %w", p.RunID, err)
	}
	return dls, nil
}

// DeadLetterIDs returns the ids of a run's dead letters, of the given ids
// (all when empty) and reason (any when empty), in message id order, along
// queue_messages_dead (run_id, message_id): what an operator's redrive of a
// selection acts on.
func (q *Queue) DeadLetterIDs(ctx context.Context, db Querier, runID uuid.UUID, ids []int64, reason string) ([]int64, error) {
	if len(ids) == 0 {
		ids = nil
	}
	rows, err := db.Query(ctx, `
		SELECT message_id FROM queue_messages
		 WHERE state = 'dead' AND run_id = $1
		   AND ($2::bigint[] IS NULL OR message_id = ANY ($2))
		   AND ($3 = '' OR coalesce(reason, '') = $3)
		 ORDER BY message_id`, runID, ids, reason)
	if err != nil {
		return nil, fmt.Errorf("select dead letters of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("select dead letters of run %s: %w", runID, err)
	}
	return out, nil
}

// scanDeadLetter scans a dead letter's columns, provider last.
func scanDeadLetter(row pgx.CollectableRow) (DeadLetter, error) {
	var d DeadLetter
	var ageMicros int64
	err := row.Scan(&d.ID, &d.Reason, &d.LastError, &d.Deliveries, &d.EnqueuedAt, &d.DeadAt, &ageMicros,
		&d.RunID, &d.ReconciliationID, &d.TransactionID, &d.IdempotencyKey, &d.Attempt, &d.Provider)
	d.Age = time.Duration(ageMicros) * time.Microsecond
	return d, err
}

// DeadLetterOf returns the id of the dead letter of one item, false when
// its message is not dead-lettered: queue_messages_dead's range of the run,
// filtered on the transaction id.
func (q *Queue) DeadLetterOf(ctx context.Context, db Querier, runID uuid.UUID, transactionID string) (int64, bool, error) {
	var id int64
	err := db.QueryRow(ctx, `SELECT message_id FROM queue_messages
		WHERE state = 'dead' AND run_id = $1 AND transaction_id = $2`, runID, transactionID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read the message of %q: %w", transactionID, err)
	}
	return id, true, nil
}
