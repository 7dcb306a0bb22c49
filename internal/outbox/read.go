package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Querier runs read-only queries: a pool, a connection, a transaction (the
// console's read-only one included).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Announcement is an announcement of a run with its deliveries so far.
type Announcement struct {
	ID        uuid.UUID
	RunID     uuid.UUID
	Type      string
	Round     int
	CreatedAt time.Time
	// Deliveries lists its deliveries by target; empty while no process
	// with a webhook has taken it up.
	Deliveries []DeliveryState
}

// DeliveryState is where one delivery stands.
type DeliveryState struct {
	// Target is the webhook's URL with its path and query hidden.
	Target string
	Format string
	// State is Pending, Delivered or Failed.
	State    string
	Attempts int
	// LastStatus is the HTTP status of the latest answer, 0 for none;
	// LastError why the latest attempt failed, empty after a success.
	LastStatus int
	LastError  string
	// NextAttemptAt is when a pending delivery is next tried.
	NextAttemptAt time.Time
	// FinishedAt is when it was delivered or given up; zero while pending.
	FinishedAt time.Time
}

// ForRuns returns the announcements of the runs with their deliveries,
// oldest first (index notifications_run, then the deliveries' primary key).
func ForRuns(ctx context.Context, db Querier, runIDs []uuid.UUID) ([]Announcement, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `
		SELECT n.event_id, n.run_id, n.type, coalesce(n.round, 0), n.created_at,
		       d.target, d.format, d.state, d.attempts, coalesce(d.last_status, 0), coalesce(d.last_error, ''),
		       d.next_attempt_at, d.finished_at
		  FROM notifications n
		  LEFT JOIN notification_deliveries d USING (event_id)
		 WHERE n.run_id = ANY(@runs)
		 ORDER BY n.created_at, n.event_id, d.target`, pgx.StrictNamedArgs{"runs": runIDs})
	if err != nil {
		return nil, fmt.Errorf("read announcements: %w", err)
	}
	var out []Announcement
	var (
		a                       Announcement
		target, format, state   *string
		attempts, lastStatus    *int
		lastError               *string
		nextAttempt, finishedAt *time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&a.ID, &a.RunID, &a.Type, &a.Round, &a.CreatedAt,
		&target, &format, &state, &attempts, &lastStatus, &lastError, &nextAttempt, &finishedAt}, func() error {
		if len(out) == 0 || out[len(out)-1].ID != a.ID {
			out = append(out, Announcement{ID: a.ID, RunID: a.RunID, Type: a.Type, Round: a.Round, CreatedAt: a.CreatedAt})
		}
		if target == nil {
			return nil
		}
		ds := DeliveryState{Target: *target, Format: *format, State: *state, Attempts: *attempts,
			LastStatus: *lastStatus, LastError: *lastError, NextAttemptAt: *nextAttempt}
		if finishedAt != nil {
			ds.FinishedAt = *finishedAt
		}
		last := &out[len(out)-1]
		last.Deliveries = append(last.Deliveries, ds)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read announcements: %w", err)
	}
	return out, nil
}

// Stats counts the deliveries by state.
type Stats struct {
	Pending, Delivered, Failed int64
	// OldestPending is the age of the oldest pending delivery; 0 when none
	// is pending.
	OldestPending time.Duration
}

// ReadStats counts every delivery by state (a scan of a table of a few rows
// a day per webhook).
func ReadStats(ctx context.Context, db Querier) (Stats, error) {
	var s Stats
	var oldest float64
	err := db.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'delivered'),
		       count(*) FILTER (WHERE state = 'failed'),
		       coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE state = 'pending')), 0)::float8
		  FROM notification_deliveries`).Scan(&s.Pending, &s.Delivered, &s.Failed, &oldest)
	if err != nil {
		return Stats{}, fmt.Errorf("count deliveries: %w", err)
	}
	s.OldestPending = time.Duration(oldest * float64(time.Second))
	return s, nil
}

// Announced returns those of the runs that already have an announcement of
// type typ (index notifications_run).
func Announced(ctx context.Context, db Querier, typ string, runIDs []uuid.UUID) (map[uuid.UUID]bool, error) {
	out := map[uuid.UUID]bool{}
	if len(runIDs) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, `SELECT DISTINCT run_id FROM notifications WHERE run_id = ANY($1) AND type = $2`, runIDs, typ)
	if err != nil {
		return nil, fmt.Errorf("find announced runs: %w", err)
	}
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error {
		out[id] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("find announced runs: %w", err)
	}
	return out, nil
}
