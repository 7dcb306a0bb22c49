package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/queue"
)

func cmdDLQ(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(e.usageOut(args), "Usage: reconcile dlq list [--run ID] [--json]\n       reconcile dlq redrive --run ID | --id ID [ID ...] | --all  [--dry-run]\n\n"+
			"List dead-lettered messages, or send them back to the queue with their ledger items requeued.\n\n"+
			"Example:\n  reconcile dlq redrive --run nightly-2026-10-24 --dry-run\n")
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
	fs := newFlagSet(e, "dlq redrive", "--run ID | --id ID [ID ...] | --all  [--dry-run]",
		"Send dead-lettered messages back to the queue (delivery count reset) and move their ledger items\n"+
			"from dead_lettered to queued, with a recorded transition, in one transaction. Say which:\n"+
			"--run (a run's UUID or its reconciliation id, e.g. nightly-2026-10-24), --id (message ids from\n"+
			"`reconcile dlq list`; each must be a dead letter) or --all (every dead letter of every run).\n"+
			"Dead letters of a cancelled run (reason cancelled) are never redriven.\n"+
			"--dry-run lists what would be redriven and changes nothing.",
		"reconcile dlq redrive --run nightly-2026-10-24 --dry-run")
	run := fs.String("run", "", "redrive only the dead letters of this run (UUID or reconciliation id)")
	var ids stringList
	fs.Var(&ids, "id", "redrive these message ids: --id 3038 3266, --id 3038,3266 or --id 3038 --id 3266")
	all := fs.Bool("all", false, "redrive every dead letter of every run")
	dryRun := fs.Bool("dry-run", false, "list what would be redriven; change nothing")
	// --id takes one id or several: --id 3038 3266, --id 3038,3266 and
	// --id 3038 --id 3266 are the same. The flag package stops at the first
	// argument that is not a flag, so the ids after it are taken here and
	// the flags after them parsed again.
	for rest := args; ; {
		if err := parseFlagsAndArgs(fs, rest); err != nil {
			return err
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		n := 0
		for n < len(rest) && rest[n] != "" && strings.Trim(rest[n], "0123456789,") == "" {
			n++
		}
		if n == 0 || len(ids) == 0 {
			return usageErrorf("dlq redrive: unexpected argument %q (message ids go after --id)", rest[0])
		}
		ids = append(ids, rest[:n]...)
		rest = rest[n:]
	}
	var f queue.Filter
	for _, list := range ids {
		for _, s := range strings.Split(list, ",") {
			id, err := strconv.ParseInt(s, 10, 64)
			if err != nil || id <= 0 {
				return usageErrorf("dlq redrive: --id %q: not a message id", s)
			}
			f.IDs = append(f.IDs, id)
		}
	}
	switch {
	case *all && (*run != "" || len(ids) > 0):
		return usageErrorf("dlq redrive: --all cannot go with --run or --id")
	case !*all && *run == "" && len(ids) == 0:
		return usageErrorf("dlq redrive: say which dead letters: --run ID, --id ID or --all (add --dry-run to see them first)")
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if f.RunID, err = resolveRun(ctx, pool, "dlq redrive", *run); err != nil {
		return err
	}
	q := queue.New(pool, queue.Config{Logger: logger})
	dls, err := q.DeadLetters(ctx, f)
	if err != nil {
		return err
	}
	if err := missingIDs(f.IDs, dls); err != nil {
		return err
	}
	n := len(dls)
	dls = slices.DeleteFunc(dls, func(d queue.DeadLetter) bool { return d.Reason == queue.ReasonCancelled })
	stay := ""
	if withdrawn := n - len(dls); withdrawn > 0 {
		stay = fmt.Sprintf("; %d of cancelled runs stay (never redriven: `reconcile enqueue --rerun all` checks a date again)", withdrawn)
	}
	if *dryRun {
		for _, d := range dls {
			fmt.Fprintf(e.stdout, "would redrive %d\t%s\t%s\t%s\n", d.ID, d.ReconciliationID, d.TransactionID, d.Reason)
		}
		fmt.Fprintf(e.stdout, "%d dead-lettered message(s) would go back to the queue%s (dry run: nothing changed)\n", len(dls), stay)
		return nil
	}
	var redriven int
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		redriven, err = enqueue.Requeue(ctx, q, tx, f, "redrive", actorName())
		return err
	})
	if err != nil {
		return fmt.Errorf("redrive dead letters: %w", err)
	}
	fmt.Fprintf(e.stdout, "redrove %d dead-lettered message(s) back to the queue%s\n", redriven, stay)
	return nil
}

// missingIDs returns a usage error naming the ids that are not among dls.
func missingIDs(ids []int64, dls []queue.DeadLetter) error {
	found := map[int64]bool{}
	for _, d := range dls {
		found[d.ID] = true
	}
	var missing, cancelled []string
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, strconv.FormatInt(id, 10))
		}
	}
	for _, d := range dls {
		if d.Reason == queue.ReasonCancelled && slices.Contains(ids, d.ID) {
			cancelled = append(cancelled, strconv.FormatInt(d.ID, 10))
		}
	}
	if len(missing) > 0 {
		return usageErrorf("dlq redrive: --id %s: no such dead letter (see `reconcile dlq list`)", strings.Join(missing, ", "))
	}
	if len(cancelled) > 0 {
		return usageErrorf("dlq redrive: --id %s: its run was cancelled, so it is not redriven (`reconcile enqueue --rerun all` checks the date again)",
			strings.Join(cancelled, ", "))
	}
	return nil
}

// resolveRun returns the run named by a --run flag, a UUID or a
// reconciliation id such as nightly-2026-10-24; the zero UUID when run is
// empty. An unknown run is bad input.
func resolveRun(ctx context.Context, pool *pgxpool.Pool, cmd, run string) (uuid.UUID, error) {
	if run == "" {
		return uuid.Nil, nil
	}
	id, err := ledger.ResolveRun(ctx, pool, run)
	if errors.Is(err, ledger.ErrNotFound) {
		return uuid.Nil, usageErrorf("%s: --run %q: no such run (want its UUID or reconciliation id, as `reconcile status` shows)", cmd, run)
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("find run %q: %w", run, err)
	}
	return id, nil
}
