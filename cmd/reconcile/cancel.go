package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
)

func cmdCancel(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "cancel", "--date YYYY-MM-DD [--generation N] --reason TEXT",
		"Withdraw a run: its open items (queued or waiting for a retry) become cancelled through recorded\n"+
			"transitions naming you and the reason, their queue messages are dead-lettered with reason\n"+
			"cancelled (a consumer holding one cannot settle it any more), and the run's completion is\n"+
			"written. No provider call is made for them afterwards, and `dlq redrive` leaves them alone.\n"+
			"Items already checked keep their outcome. Cancelling a complete run changes nothing.",
		"reconcile cancel --date 2026-10-24 --reason \"wrong export; re-run from payments-2026-10-24-fixed.csv\"")
	date := fs.String("date", "", "business date of the run, YYYY-MM-DD (required)")
	generation := fs.Int("generation", 0, "generation of the run (default: the latest)")
	reason := fs.String("reason", "", "why the run is withdrawn, recorded in the ledger (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *date == "" {
		return usageErrorf("cancel: --date is required (YYYY-MM-DD)")
	}
	d, err := payments.ParseDate(*date)
	if err != nil {
		return usageErrorf("cancel: --date: %v", err)
	}
	if *generation < 0 {
		return usageErrorf("cancel: --generation %d: want 1 or more", *generation)
	}
	if *reason == "" {
		return usageErrorf("cancel: --reason is required: say why the run is withdrawn")
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	enq, err := enqueue.New(pool, enqueue.Config{Queue: queue.New(pool, queue.Config{Logger: logger}),
		Actor: actorName(), Logger: logger})
	if err != nil {
		return err
	}
	res, err := enq.Cancel(ctx, enqueue.CancelRequest{Date: d, Generation: *generation, Reason: *reason})
	if errors.Is(err, enqueue.ErrNoRun) {
		return usageError(err)
	}
	if err != nil {
		return err
	}
	if res.Cancelled == 0 {
		_, err := fmt.Fprintf(e.stdout, "run %s (%s, generation %d) has no open item: nothing cancelled\n",
			res.RunID, res.ReconciliationID, res.Generation)
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "run %s (%s, generation %d): %d open items cancelled, %d queue messages dead-lettered; the run is complete\n",
		res.RunID, res.ReconciliationID, res.Generation, res.Cancelled, res.DeadLettered)
	return err
}
