package console

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/limiter"
)

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

// loadHistory reads a page of the limiters' history, newest first, of
// every limiter or of one (limiter.History). It returns the cursor of the
// next page, nil on the last.
func loadHistory(ctx context.Context, rd *reader, name string, before *historyCursor, page int) ([]limiter.Record, *historyCursor, error) {
	var key *limiter.HistoryKey
	if before != nil {
		key = &limiter.HistoryKey{At: before.At, ID: before.ID}
	}
	hs, err := limiter.History(ctx, rd, name, key, page+1)
	if err != nil {
		return nil, nil, err
	}
	if len(hs) <= page {
		return hs, nil, nil
	}
	hs = hs[:page]
	last := hs[page-1]
	return hs, &historyCursor{At: last.At, ID: last.ID}, nil
}
