package schedule

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/payments"
)

// Querier is what the read functions need: pgx.Tx, *pgx.Conn and
// *pgxpool.Pool satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Failure is one failed tick as schedule_ticks recorded it.
type Failure struct {
	RecordedAt   time.Time
	ScheduledAt  time.Time
	BusinessDate payments.Date
	Source       string
	Scheduler    string
	Error        string
}

// Failures returns the latest n failed ticks, of date d unless d is zero,
// newest first: schedule_ticks_failed (recorded_at DESC) WHERE outcome =
// 'failed', walked from its newest entry.
func Failures(ctx context.Context, db Querier, d payments.Date, n int) ([]Failure, error) {
	var date *string
	if !d.IsZero() {
		s := d.String()
		date = &s
	}
	rows, err := db.Query(ctx, `
		SELECT recorded_at, scheduled_at, business_date::text, source, scheduler, coalesce(error, '')
		  FROM schedule_ticks
		 WHERE outcome = 'failed' AND ($1::date IS NULL OR business_date = $1::date)
		 ORDER BY recorded_at DESC, tick_id DESC
		 LIMIT $2`, date, n)
	if err != nil {
		return nil, fmt.Errorf("read scheduler failures: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
		var f Failure
		var day string
		if err := row.Scan(&f.RecordedAt, &f.ScheduledAt, &day, &f.Source, &f.Scheduler, &f.Error); err != nil {
			return f, err
		}
		var err error
		f.BusinessDate, err = payments.ParseDate(day)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("read scheduler failures: %w", err)
	}
	return out, nil
}
