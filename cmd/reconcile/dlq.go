package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/queue"
)

func cmdDLQ(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stderr, "Usage: reconcile dlq list [--run ID] [--json]\n       reconcile dlq redrive [--run ID | --id ID ...]\n\n"+
			"List dead-lettered messages, or send them back to the queue with their ledger items requeued.\n\n"+
			"Example:\n  reconcile dlq redrive --run 3f6c2a9e-0d3b-4c55-9a7e-2b1f0c9d8e7a\n")
		if len(args) == 0 {
			return usageErrorf("dlq: want list or redrive")
		}
		return nil
	}
	switch args[0] {
	case "list":
		return cmdDLQList(ctx, e, args[1:])
	case "redrive":
		return cmdDLQRedrive(ctx, e, args[1:])
	}
	return usageErrorf("dlq: unknown action %q: want list or redrive", args[0])
}

func cmdDLQRedrive(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "dlq redrive", "[--run ID | --id ID ...]",
		"Send dead-lettered messages back to the queue (delivery count reset) and move their ledger items\n"+
			"from dead_lettered to queued, with a recorded transition, in one transaction. Without flags,\n"+
			"every dead letter is redriven.",
		"reconcile dlq redrive --id 1042 --id 1043")
	run := fs.String("run", "", "redrive only the dead letters of this run id")
	var ids stringList
	fs.Var(&ids, "id", "redrive this message id (repeatable)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f, err := runFilter("dlq redrive", *run)
	if err != nil {
		return err
	}
	for _, s := range ids {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil || id <= 0 {
			return usageErrorf("dlq redrive: --id %q: not a message id", s)
		}
		f.IDs = append(f.IDs, id)
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	q := queue.New(pool, queue.Config{Logger: logger})
	var n int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		n, err = enqueue.Requeue(ctx, q, tx, f, "redrive", actorName())
		return err
	})
	if err != nil {
		return fmt.Errorf("redrive dead letters: %w", err)
	}
	fmt.Fprintf(e.stdout, "redrove %d dead-lettered message(s) back to the queue\n", n)
	return nil
}

// runFilter selects the dead letters of the run named by a --run flag, or
// all of them when it is empty.
func runFilter(cmd, run string) (queue.Filter, error) {
	var f queue.Filter
	if run == "" {
		return f, nil
	}
	id, err := uuid.Parse(run)
	if err != nil {
		return f, usageErrorf("%s: --run %q: not a run id (UUID)", cmd, run)
	}
	f.RunID = id
	return f, nil
}
