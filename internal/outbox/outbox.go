// Package outbox keeps the announcements of runs waiting for their webhooks:
// the notifications table, written in the transaction that completes a run
// (or finds it past its deadline), and notification_deliveries, one row per
// announcement and webhook. It is the only package that touches these
// tables.
//
// An announcement is added by the ledger inside its own transaction (Add),
// so a crash neither loses one nor invents one. A process that delivers to
// webhooks takes up the announcements of the last day for each of its
// destinations (TakeUp), claims the due deliveries with FOR UPDATE SKIP
// LOCKED and a lease (Claim), and settles each attempt (Delivered, Retry,
// Fail) under that lease, so an attempt cut short by a crash is claimed
// again once its lease ends. Every statement takes its time from the
// database clock unless Store.Now is set, as tests do.
//
// The files follow the topics: outbox.go the announcement and Add,
// deliveries.go the delivery lifecycle and read.go the reads for status,
// the console and the metrics.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what the outbox needs to run statements: pgx.Tx, *pgxpool.Pool and
// *pgx.Conn satisfy it. Add takes the caller's transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// The types of announcement.
const (
	// Completed announces that a run's last open item reached a terminal
	// state: once per completion round.
	Completed = "run.completed"
	// DeadlineMissed announces that a run was still open at its deadline:
	// at most once per run.
	DeadlineMissed = "run.deadline_missed"
)

// Event is one announcement.
type Event struct {
	// ID is the announcement's id, the same in every delivery attempt (the
	// webhook-id header). Add generates one when it is zero.
	ID uuid.UUID
	// Type is Completed or DeadlineMissed.
	Type string
	// Run is what the announcement says about its run.
	Run Run
	// CreatedAt is when the completion or the missed deadline was recorded;
	// zero takes the database clock.
	CreatedAt time.Time
}

// Run is what an announcement says about its run: the payload stored with
// it and the data of the event a webhook receives. Field names are part of
// the webhook's contract: fields may be added, never renamed or removed.
type Run struct {
	RunID            uuid.UUID `json:"run_id"`
	ReconciliationID string    `json:"reconciliation_id"`
	// BusinessDate is YYYY-MM-DD.
	BusinessDate string `json:"business_date"`
	Generation   int    `json:"generation"`
	// Round is the completion round (1, then +1 each time redriven items
	// finish the run again); 0 for a missed deadline.
	Round int `json:"round,omitempty"`
	// Trigger is cron or manual.
	Trigger string `json:"trigger"`
	// Items is the run's item count; Open those not yet terminal (0 for a
	// completion).
	Items int `json:"items"`
	Open  int `json:"open"`
	// Outcomes counts the terminal items by outcome (matched, mismatched,
	// missing, dead_lettered, cancelled), every outcome present.
	Outcomes map[string]int `json:"outcomes"`
	// AtStake sums the expected amounts of the items that did not match, per
	// currency, in minor units.
	AtStake []Amount `json:"at_stake"`
	// DeadLetters counts the dead-lettered items by reason (max_attempts,
	// http_400, throttle_deadline, ...).
	DeadLetters map[string]int `json:"dead_letters_by_reason"`
	// ProviderCalls and Throttles count the calls made for the items and
	// those answered 429.
	ProviderCalls int64 `json:"provider_calls"`
	Throttles     int64 `json:"throttles"`
	// EnqueuedAt is when the run was enqueued; CompletedAt when this round
	// completed (nil for a missed deadline); DeadlineAt the run's deadline
	// (nil when it has none).
	EnqueuedAt  time.Time  `json:"enqueued_at"`
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	DeadlineAt  *time.Time `json:"deadline_at,omitempty"`
	// DurationSeconds is from enqueue to completion (to the deadline for a
	// missed one).
	DurationSeconds float64 `json:"duration_seconds"`
}

// Amount is what is at stake in one currency: the expected amounts of the
// items that did not match, in minor units.
type Amount struct {
	Currency          string `json:"currency"`
	MismatchedMinor   int64  `json:"mismatched_minor"`
	MissingMinor      int64  `json:"missing_minor"`
	DeadLetteredMinor int64  `json:"dead_lettered_minor"`
}

// Total is the sum of the three amounts.
func (a Amount) Total() int64 { return a.MismatchedMinor + a.MissingMinor + a.DeadLetteredMinor }

// Add records e inside the caller's transaction and reports whether it was
// added: a completion round or a run's missed deadline that is already
// announced is not announced again (whoever recorded it first wins).
func Add(ctx context.Context, tx DB, e Event) (bool, error) {
	if e.Type != Completed && e.Type != DeadlineMissed {
		return false, fmt.Errorf("announce run %s: unknown type %q", e.Run.RunID, e.Type)
	}
	if e.ID == uuid.Nil {
		e.ID = uuid.New()
	}
	payload, err := json.Marshal(e.Run)
	if err != nil {
		return false, fmt.Errorf("announce run %s: encode: %w", e.Run.RunID, err)
	}
	var round *int
	if e.Type == Completed {
		round = &e.Run.Round
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO notifications (event_id, run_id, type, round, payload, created_at)
		VALUES (@id, @run_id, @type, @round, @payload, coalesce(@created_at::timestamptz, now()))
		ON CONFLICT DO NOTHING`,
		pgx.StrictNamedArgs{"id": e.ID, "run_id": e.Run.RunID, "type": e.Type, "round": round,
			"payload": string(payload), "created_at": nullTime(e.CreatedAt)})
	if err != nil {
		return false, fmt.Errorf("announce %s of run %s: %w", e.Type, e.Run.RunID, err)
	}
	return tag.RowsAffected() > 0, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
