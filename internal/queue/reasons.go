package queue

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DeadLettersByReason counts the dead-lettered messages by the reason they
// were dead-lettered with (index queue_messages_dead: only dead messages
// are read).
func (q *Queue) DeadLettersByReason(ctx context.Context) (map[string]int64, error) {
	rows, err := q.pool.Query(ctx, `
		SELECT coalesce(reason, ''), count(*) FROM queue_messages
		 WHERE state = 'dead'
		 GROUP BY 1`)
	if err != nil {
		return nil, fmt.Errorf("count dead letters by reason: %w", err)
	}
	out := map[string]int64{}
	var reason string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&reason, &n}, func() error {
		out[reason] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("count dead letters by reason: %w", err)
	}
	return out, nil
}
