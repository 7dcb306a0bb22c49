package queue

import (
	"cmp"
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DefaultPruneBatch is the number of message ids PruneAcked walks per
// statement.
const DefaultPruneBatch = 10000

// PruneResult counts what a prune did or, in a dry run, would do.
type PruneResult struct {
	// Messages is the number of acked messages deleted (or to delete).
	Messages int64
	// Batches is the number of delete statements run.
	Batches int
}

// PruneAcked deletes the acked messages of the given runs (the caller
// passes the runs completed before the retention, as the ledger lists them:
// ledger.RunsCompletedBefore), walking the message ids batch at a time, each
// batch a statement (and a transaction) of its own, so no lock is held for
// long and claims go on meanwhile. Dead-lettered and ready messages are
// kept, and so are the ledger's rows: the run's unique (business_date,
// generation) key and the items' keys still stop a second enqueue of the
// date, which is why the idempotency keys of the deleted messages need not
// stay taken. With dryRun it only counts. batch defaults to
// DefaultPruneBatch when 0 or less.
func (q *Queue) PruneAcked(ctx context.Context, runs []uuid.UUID, batch int, dryRun bool) (PruneResult, error) {
	batch = cmp.Or(max(batch, 0), DefaultPruneBatch)
	if len(runs) == 0 {
		return PruneResult{}, nil
	}
	const doomed = `state = 'acked' AND run_id = ANY (@runs)`
	if dryRun {
		var n int64
		err := q.pool.QueryRow(ctx, `SELECT count(*) FROM queue_messages WHERE `+doomed,
			pgx.StrictNamedArgs{"runs": runs}).Scan(&n)
		if err != nil {
			return PruneResult{}, fmt.Errorf("count acked messages of %d runs: %w", len(runs), err)
		}
		return PruneResult{Messages: n}, nil
	}
	var lo, hi *int64
	err := q.pool.QueryRow(ctx, `SELECT min(message_id), max(message_id) FROM queue_messages WHERE `+doomed,
		pgx.StrictNamedArgs{"runs": runs}).Scan(&lo, &hi)
	if err != nil {
		return PruneResult{}, fmt.Errorf("find acked messages of %d runs: %w", len(runs), err)
	}
	var res PruneResult
	if lo == nil {
		return res, nil
	}
	for from := *lo; from <= *hi; from += int64(batch) {
		tag, err := q.pool.Exec(ctx, `DELETE FROM queue_messages
 WHERE message_id >= @from AND message_id < @to AND `+doomed,
			pgx.StrictNamedArgs{"from": from, "to": from + int64(batch), "runs": runs})
		if err != nil {
			return res, fmt.Errorf("prune acked messages %d to %d: %w", from, from+int64(batch)-1, err)
		}
		res.Messages += tag.RowsAffected()
		res.Batches++
	}
	return res, nil
}
