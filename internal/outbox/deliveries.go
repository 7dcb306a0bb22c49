package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrStaleLease is returned when an attempt is settled under a lease that is
// no longer current: the attempt outlived its lease and another process
// claimed the delivery. Nothing was changed.
var ErrStaleLease = errors.New("stale delivery lease")

// The states of a delivery.
const (
	Pending   = "pending"
	Delivered = "delivered"
	Failed    = "failed"
)

// Destination is a webhook as the outbox knows it: never its URL, which can
// hold a credential.
type Destination struct {
	// ID identifies the webhook: a hash of its URL.
	ID string
	// Target is the URL with its path and query hidden, for people.
	Target string
	// Format is standard or slack.
	Format string
}

// Delivery is one claimed attempt to deliver an announcement to a webhook.
type Delivery struct {
	Event Event
	// Destination is the webhook's Destination.ID.
	Destination string
	// Attempt is this attempt's number: 1 for the first.
	Attempt int
	// Lease must be presented to settle the attempt.
	Lease uuid.UUID
}

// Deliveries runs the delivery lifecycle. It is safe for concurrent use.
type Deliveries struct {
	db  DB
	now func() time.Time
}

// NewDeliveries returns the delivery statements on db. now, when not nil,
// replaces the database clock (tests move time with it).
func NewDeliveries(db DB, now func() time.Time) *Deliveries {
	return &Deliveries{db: db, now: now}
}

// clock returns the injected time, or nil so that SQL's coalesce(@now,
// now()) takes the database clock.
func (d *Deliveries) clock() *time.Time {
	if d.now == nil {
		return nil
	}
	t := d.now()
	return &t
}

// TakeUp adds a pending delivery to each destination of every announcement
// recorded within backlog that the destination does not have yet, and
// returns how many it added. A webhook added to a process later thus gets
// the last day's announcements once, and never older ones.
func (d *Deliveries) TakeUp(ctx context.Context, dests []Destination, backlog time.Duration) (int, error) {
	if len(dests) == 0 {
		return 0, nil
	}
	ids, targets, formats := make([]string, len(dests)), make([]string, len(dests)), make([]string, len(dests))
	for i, dst := range dests {
		ids[i], targets[i], formats[i] = dst.ID, dst.Target, dst.Format
	}
	tag, err := d.db.Exec(ctx, `
		INSERT INTO notification_deliveries (event_id, destination, target, format, next_attempt_at, created_at)
		SELECT n.event_id, w.id, w.target, w.format, coalesce(@now::timestamptz, now()), coalesce(@now::timestamptz, now())
		  FROM notifications n
		 CROSS JOIN unnest(@ids::text[], @targets::text[], @formats::text[]) AS w(id, target, format)
		 WHERE n.created_at >= coalesce(@now::timestamptz, now()) - @backlog_us::bigint * interval '1 microsecond'
		ON CONFLICT DO NOTHING`,
		pgx.StrictNamedArgs{"now": d.clock(), "ids": ids, "targets": targets, "formats": formats,
			"backlog_us": backlog.Microseconds()})
	if err != nil {
		return 0, fmt.Errorf("take up announcements: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// Claim takes up to n due deliveries of the destinations, oldest first,
// skipping those another process is claiming. Each gets a new lease, its
// attempt counted, and stays invisible to other claims for lease: an
// attempt cut short by a crash is claimed again after it.
func (d *Deliveries) Claim(ctx context.Context, dests []string, n int, lease time.Duration) ([]Delivery, error) {
	if n <= 0 || len(dests) == 0 {
		return nil, nil
	}
	token := uuid.New()
	rows, err := d.db.Query(ctx, `
		WITH picked AS (
		    SELECT event_id, destination FROM notification_deliveries
		     WHERE state = 'pending' AND destination = ANY(@dests) AND next_attempt_at <= coalesce(@now::timestamptz, now())
		     ORDER BY next_attempt_at
		     LIMIT @n
		       FOR UPDATE SKIP LOCKED)
		UPDATE notification_deliveries d
		   SET lease = @lease, attempts = d.attempts + 1,
		       next_attempt_at = coalesce(@now::timestamptz, now()) + @lease_us::bigint * interval '1 microsecond'
		  FROM picked, notifications n
		 WHERE d.event_id = picked.event_id AND d.destination = picked.destination AND n.event_id = d.event_id
		RETURNING d.event_id, d.destination, d.attempts, n.type, n.payload, n.created_at`,
		pgx.StrictNamedArgs{"now": d.clock(), "dests": dests, "n": n, "lease": token, "lease_us": lease.Microseconds()})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		dl := Delivery{Lease: token}
		var payload []byte
		if err := row.Scan(&dl.Event.ID, &dl.Destination, &dl.Attempt, &dl.Event.Type, &payload, &dl.Event.CreatedAt); err != nil {
			return dl, err
		}
		if err := json.Unmarshal(payload, &dl.Event.Run); err != nil {
			return dl, fmt.Errorf("decode announcement %s: %w", dl.Event.ID, err)
		}
		return dl, nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim deliveries: %w", err)
	}
	return out, nil
}

// Delivered records that the webhook accepted the attempt with status.
func (d *Deliveries) Delivered(ctx context.Context, dl Delivery, status int) error {
	return d.settle(ctx, dl, "record delivery", `
		UPDATE notification_deliveries
		   SET state = 'delivered', lease = NULL, last_status = @status, last_error = NULL,
		       finished_at = coalesce(@now::timestamptz, now())
		 WHERE event_id = @id AND destination = @dest AND lease = @lease AND state = 'pending'`,
		pgx.StrictNamedArgs{"status": status})
}

// Retry records a failed attempt (status 0: no answer) and makes the
// delivery due again after wait.
func (d *Deliveries) Retry(ctx context.Context, dl Delivery, wait time.Duration, status int, reason string) error {
	return d.settle(ctx, dl, "reschedule delivery", `
		UPDATE notification_deliveries
		   SET lease = NULL, last_status = @status, last_error = @reason,
		       next_attempt_at = coalesce(@now::timestamptz, now()) + @wait_us::bigint * interval '1 microsecond'
		 WHERE event_id = @id AND destination = @dest AND lease = @lease AND state = 'pending'`,
		pgx.StrictNamedArgs{"status": nullStatus(status), "reason": reason, "wait_us": wait.Microseconds()})
}

// Fail records a failed attempt and gives the delivery up.
func (d *Deliveries) Fail(ctx context.Context, dl Delivery, status int, reason string) error {
	return d.settle(ctx, dl, "give up delivery", `
		UPDATE notification_deliveries
		   SET state = 'failed', lease = NULL, last_status = @status, last_error = @reason,
		       finished_at = coalesce(@now::timestamptz, now())
		 WHERE event_id = @id AND destination = @dest AND lease = @lease AND state = 'pending'`,
		pgx.StrictNamedArgs{"status": nullStatus(status), "reason": reason})
}

// settle runs a conditional update of dl under its lease; the statement
// names the delivery @id, @dest and @lease, and the time @now.
func (d *Deliveries) settle(ctx context.Context, dl Delivery, what, sql string, args pgx.StrictNamedArgs) error {
	args["id"], args["dest"], args["lease"], args["now"] = dl.Event.ID, dl.Destination, dl.Lease, d.clock()
	tag, err := d.db.Exec(ctx, sql, args)
	if err != nil {
		return fmt.Errorf("%s of %s to %s: %w", what, dl.Event.ID, dl.Destination, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s of %s to %s: %w", what, dl.Event.ID, dl.Destination, ErrStaleLease)
	}
	return nil
}

func nullStatus(status int) *int32 {
	if status == 0 {
		return nil
	}
	s := int32(status)
	return &s
}
