package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/schedule"
)

func cmdSchedule(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "schedule", "--cron EXPR (--source-template PATH | --source-table NAME) [flags]",
		"Run until stopped, enqueuing a business date at each tick of a cron expression, exactly as\n"+
			"`reconcile enqueue` does (trigger cron). Run it on as many machines as you like: each date is\n"+
			"enqueued once. At start-up, dates missed within --catch-up are enqueued. A missing source is\n"+
			"logged and shown by `reconcile status`; the scheduler carries on. With --consume it also runs\n"+
			"a consumer (the consume flags apply). With --prune-after it runs `reconcile prune` after\n"+
			"every tick. With --notify it announces each run's completion (and, with --deadline, a\n"+
			"missed deadline) to webhooks.",
		"reconcile schedule --cron '0 2 * * *' --tz Europe/Berlin --source-template '/data/payments-{date}.csv' --catch-up 3d")
	expr := fs.String("cron", "", "cron expression, 5 fields or a descriptor such as @daily; CRON_TZ=ZONE prefix allowed (required)")
	tz := fs.String("tz", "", "IANA time zone of the expression and of the business date (default: CRON_TZ of the expression, else UTC)")
	offset := fs.Int("date-offset", -1, "business date = tick's day in --tz plus this many days (-1: yesterday)")
	template := fs.String("source-template", "", "payment file of a date, with {date} for YYYY-MM-DD: /data/payments-{date}.csv")
	table := fs.String("source-table", "", "Postgres table (NAME or SCHEMA.NAME) with the payment columns; rows whose occurred_at is within the date in --tz")
	catchUp := fs.String("catch-up", "3d", "at start-up, enqueue dates of ticks missed within this long (e.g. 3d, 36h; 0 turns it off)")
	allowOutside := fs.Bool("allow-outside-date", false, "accept payments whose occurred_at falls outside the business date")
	withConsumer := fs.Bool("consume", false, "also run a consumer in this process (for small deployments)")
	pruneAfter := fs.String("prune-after", "", "after every tick, prune what served the queue for runs completed this long ago (90d; see `reconcile prune`; default: never)")
	var cf consumeFlags
	cf.register(fs)
	var nf notifyFlags
	nf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if _, _, err := nf.notifierConfig(e); err != nil {
		return err
	}
	if *expr == "" {
		return usageErrorf("schedule: --cron is required, e.g. --cron '0 2 * * *'")
	}
	var loc *time.Location
	if *tz != "" {
		l, err := time.LoadLocation(*tz)
		if err != nil {
			return usageErrorf("schedule: --tz %q: unknown time zone", *tz)
		}
		loc = l
	}
	spec, err := schedule.ParseSpec(*expr, loc)
	if err != nil {
		return usageErrorf("schedule: --cron: %v", err)
	}
	window, err := parseCatchUp(*catchUp)
	if err != nil {
		return err
	}
	var keep time.Duration
	if *pruneAfter != "" {
		if keep, err = parseAge("schedule: --prune-after", *pruneAfter); err != nil {
			return err
		}
	}
	if (*template == "") == (*table == "") {
		return usageErrorf("schedule: give exactly one of --source-template and --source-table")
	}
	if *withConsumer {
		if err := cf.validate(); err != nil {
			return err
		}
		if cf.untilDone {
			return usageErrorf("schedule: --until-done makes no sense with a scheduler that runs until stopped")
		}
	}
	logger, pool, err := e.open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()

	var source schedule.SourceFunc
	if *template != "" {
		source, err = schedule.FileTemplate(*template)
	} else {
		source, err = schedule.Table(pool, *table, spec.Location)
	}
	if err != nil {
		return usageErrorf("schedule: %v", err)
	}
	enq, err := enqueue.New(pool, enqueue.Config{Queue: queue.New(pool, queue.Config{}), Actor: actorName(), Logger: logger})
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	s, err := schedule.New(pool, enq, schedule.Config{Spec: spec, DateOffset: *offset, Source: source, CatchUp: window,
		AllowOutsideDate: *allowOutside, Name: host + ":" + strconv.Itoa(os.Getpid()), Logger: logger,
		PruneAfter: keep, Prune: func(ctx context.Context, before time.Time) error {
			res, err := prune(ctx, pool, logger, before, queue.DefaultPruneBatch, false)
			if err == nil {
				logger.Info("pruned", "before", before, "messages", res.messages, "ticks", res.ticks, "elapsed", res.elapsed)
			}
			return err
		}})
	if err != nil {
		return err
	}

	stopNotifier, err := startNotifier(ctx, e, logger, nf)
	if err != nil {
		return err
	}
	defer stopNotifier(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumerDone := make(chan error, 1)
	if *withConsumer {
		go func() {
			err := runConsume(ctx, e, pool, logger, cf, nil)
			cancel() // a consumer that stops (bad provider key) stops the scheduler too
			consumerDone <- err
		}()
	} else {
		consumerDone <- nil
	}
	err = s.Run(ctx)
	cancel()
	if cerr := <-consumerDone; cerr != nil && !errors.Is(cerr, context.Canceled) {
		return fmt.Errorf("consumer: %w", cerr)
	}
	if errors.Is(err, context.Canceled) {
		logger.Info("scheduler stopped")
		return nil
	}
	return err
}

// parseCatchUp reads a --catch-up window: a Go duration, or whole days
// written Nd.
func parseCatchUp(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= 366 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	} else if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return d, nil
	}
	return 0, usageErrorf("schedule: --catch-up %q: want days (3d), a duration (36h) or 0", s)
}
