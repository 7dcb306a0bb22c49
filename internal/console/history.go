package console

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// historyRow is a row of rate_limiter_history as the Limits page shows it:
// a change of a limiter's effective rate, and for `limit set` who made it
// and why.
type historyRow struct {
	ID         int64
	Limiter    string
	RecordedAt time.Time
	Cause      string
	Rate       float64
	Estimate   *float64
	Burst      *float64
	Detail     string
	Actor      *string
	Reason     *string
}

// historyCursor is the key of the history's pages: rows strictly older
// than (At, ID), newest first.
type historyCursor struct {
	At time.Time
	ID int64
}

func (c historyCursor) String() string {
	return c.At.UTC().Format(time.RFC3339Nano) + "_" + strconv.FormatInt(c.ID, 10)
}

func parseHistoryCursor(s string) (*historyCursor, error) {
	if s == "" {
		return nil, nil
	}
	at, id, ok := strings.Cut(s, "_")
	t, err := time.Parse(time.RFC3339Nano, at)
	n, nerr := strconv.ParseInt(id, 10, 64)
	if !ok || err != nil || nerr != nil {
		return nil, badRequest("before=%q: want a timestamp and an id as the page's links give them", s)
	}
	return &historyCursor{At: t, ID: n}, nil
}

// loadHistory reads a page of the limiters' history, newest first: of
// every limiter along the history's recorded_at index, or of one along its
// (limiter, recorded_at) index. It returns the cursor of the next page,
// nil on the last.
func loadHistory(ctx context.Context, rd *reader, name string, before *historyCursor, page int) ([]historyRow, *historyCursor, error) {
	var at *time.Time
	var id int64
	if before != nil {
		at, id = &before.At, before.ID
	}
	where := `($1::timestamptz IS NULL OR (recorded_at, id) < ($1, $2))`
	args := []any{at, id, page + 1}
	if name != "" {
		where += ` AND limiter = $4`
		args = append(args, name)
	}
	rows, err := rd.Query(ctx, `
		SELECT id, limiter, recorded_at, cause, rate, estimate, burst, detail, actor, reason
		  FROM rate_limiter_history
		 WHERE `+where+`
		 ORDER BY recorded_at DESC, id DESC LIMIT $3`, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("read limiter history: %w", err)
	}
	hs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[historyRow])
	if err != nil {
		return nil, nil, fmt.Errorf("read limiter history: %w", err)
	}
	if len(hs) <= page {
		return hs, nil, nil
	}
	hs = hs[:page]
	last := hs[page-1]
	return hs, &historyCursor{At: last.RecordedAt, ID: last.ID}, nil
}
