// Package consume is the worker loop of reconcile: it claims queue messages,
// paces provider calls with the shared limiter, decides what each answer
// means, and records the outcome, the transition and the message's fate in
// one transaction.
//
// One claimer goroutine per process claims batches sized to the free worker
// slots and hands deliveries to Concurrency workers, so the number of leased
// but unstarted messages stays small. Idle claimers sleep on the queue's
// LISTEN/NOTIFY listener.
package consume

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/queue"
)

// ErrProviderAuth is returned when the provider refuses the credentials (401
// or 403). Consuming stops and every message stays queued: a bad key must not
// dead-letter a whole run.
var ErrProviderAuth = errors.New("provider refused the credentials")

// Config configures a Consumer.
type Config struct {
	// Concurrency is the number of workers calling the provider at once.
	// Defaults to 4.
	Concurrency int
	// Policy decides retries, backoff and dead letters. Zero fields take
	// decision's defaults.
	Policy decision.Policy
	// UntilDone makes Run return once every run in the ledger is complete.
	// Defaults to false: consume until the context ends.
	UntilDone bool
	// Grace is how long in-flight calls may take to finish after the
	// context ends; what is left is released to the queue. Defaults to 10s.
	Grace time.Duration
	// IdleWait is the longest an idle claimer sleeps before looking at the
	// queue again when no notification arrives. Defaults to 2s.
	IdleWait time.Duration
	// Actor names this process in transitions and completions. Defaults to
	// host:pid.
	Actor string
	// Logger receives progress and problems. Defaults to discarding them.
	Logger *slog.Logger
	// Now is the clock used for retry times and decisions. Defaults to
	// time.Now.
	Now func() time.Time
	// Seed seeds the jitter. Defaults to a random seed.
	Seed uint64
	// RecordBatch is the most results recorded in one transaction. Workers
	// hand their results to one recorder, which writes whatever has
	// gathered while the previous transaction committed, so a busy consumer
	// pays one commit (one WAL flush) per batch instead of per item, and
	// acks the batch's messages in one statement. 1 records each result in
	// its own transaction. Defaults to 64.
	RecordBatch int
	// LeaseRenewal is how often the lease of a message whose call is still
	// running is extended, so a slow call is not redelivered elsewhere.
	// Defaults to a third of the queue's visibility timeout; negative turns
	// renewal off (then a call slower than the visibility timeout is
	// redelivered, which tests use to provoke duplicate deliveries).
	LeaseRenewal time.Duration
}

func (c Config) withDefaults() Config {
	c.Concurrency = cmp.Or(c.Concurrency, 4)
	c.Policy = c.Policy.WithDefaults()
	c.Grace = cmp.Or(c.Grace, 10*time.Second)
	c.IdleWait = cmp.Or(c.IdleWait, 2*time.Second)
	c.RecordBatch = cmp.Or(c.RecordBatch, 64)
	if c.Actor == "" {
		host, _ := os.Hostname()
		c.Actor = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// Consumer processes queue messages until its context ends, the ledger's runs
// are all complete (UntilDone), or the provider refuses the credentials.
type Consumer struct {
	pool    *pgxpool.Pool
	queue   *queue.Queue
	limiter *limiter.Shared
	client  *provider.Client
	cfg     Config
	stats   Stats
	results chan<- result // to the recorder; nil: record in the worker
	// runDone wakes an idle claimer when a recorded change completed a
	// run, so UntilDone returns without waiting out IdleWait.
	runDone chan struct{}

	rndMu sync.Mutex
	rnd   *rand.Rand
}

// New returns a Consumer. The queue, limiter and client are shared with the
// caller, who closes them.
func New(pool *pgxpool.Pool, q *queue.Queue, lim *limiter.Shared, client *provider.Client, cfg Config) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	if cfg.Concurrency < 1 {
		return nil, fmt.Errorf("consume: Concurrency %d: want at least 1", cfg.Concurrency)
	}
	if cfg.RecordBatch < 1 {
		return nil, fmt.Errorf("consume: RecordBatch %d: want at least 1", cfg.RecordBatch)
	}
	return &Consumer{pool: pool, queue: q, limiter: lim, client: client, cfg: cfg,
		runDone: make(chan struct{}, 1), rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1))}, nil
}

// Stats counts what a consumer did. Read it with Snapshot; it is safe for
// concurrent use.
type Stats struct {
	calls, throttles, acked, retried, deadLettered, stale, conflicts, released atomic.Int64
	byClass                                                                    [6]atomic.Int64 // 0: no answer, 1..5: 1xx..5xx
	outcomes                                                                   sync.Map        // outcome word → *atomic.Int64
}

// Snapshot is a copy of a consumer's counters.
type Snapshot struct {
	// Calls is the number of provider calls made.
	Calls int64
	// Throttles is the number of calls answered 429.
	Throttles int64
	// ByClass counts calls by status class: "2xx" ... "5xx", and "error"
	// for calls without an answer.
	ByClass map[string]int64
	// Acked, Retried and DeadLettered count recorded decisions.
	Acked, Retried, DeadLettered int64
	// Outcomes counts terminal outcomes recorded by this consumer.
	Outcomes map[string]int64
	// Stale counts results dropped because the message had been redelivered
	// elsewhere; Conflicts those dropped because the item had moved on.
	Stale, Conflicts int64
	// Released counts deliveries handed back unprocessed at shutdown.
	Released int64
}

// Snapshot returns the consumer's counters so far.
func (c *Consumer) Snapshot() Snapshot {
	s := &c.stats
	out := Snapshot{Calls: s.calls.Load(), Throttles: s.throttles.Load(), Acked: s.acked.Load(),
		Retried: s.retried.Load(), DeadLettered: s.deadLettered.Load(), Stale: s.stale.Load(),
		Conflicts: s.conflicts.Load(), Released: s.released.Load(),
		ByClass: map[string]int64{}, Outcomes: map[string]int64{}}
	names := [6]string{"error", "1xx", "2xx", "3xx", "4xx", "5xx"}
	for i := range s.byClass {
		out.ByClass[names[i]] = s.byClass[i].Load()
	}
	s.outcomes.Range(func(k, v any) bool {
		out.Outcomes[k.(string)] = v.(*atomic.Int64).Load()
		return true
	})
	return out
}

func (s *Stats) outcome(word string) {
	v, _ := s.outcomes.LoadOrStore(word, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// job is one claimed delivery with its ledger item.
type job struct {
	d         queue.Delivery
	item      ledger.Item
	ok        bool      // the item exists
	claimedAt time.Time // when the lease started, by the local clock
}

// Run consumes until ctx ends (then it lets in-flight calls finish within
// Config.Grace, releases what is left and returns nil), until every run is
// complete with UntilDone, or until a fatal error such as ErrProviderAuth.
func (c *Consumer) Run(ctx context.Context) error {
	// Workers finish their current call after ctx ends, within the grace
	// period; fatal cancels everything at once.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	stopGrace := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(c.cfg.Grace, cancelWork)
		context.AfterFunc(workCtx, func() { t.Stop() })
	})
	defer stopGrace()

	claimCtx, stopClaiming := context.WithCancel(ctx)
	defer stopClaiming()

	var fatalOnce sync.Once
	var fatal error
	fail := func(err error) {
		fatalOnce.Do(func() {
			fatal = err
			stopClaiming()
		})
	}

	// Workers hand results to the recorder without waiting for its
	// commit: a full batch fits in the channel.
	var recorded chan struct{}
	if c.cfg.RecordBatch > 1 {
		results := make(chan result, c.cfg.RecordBatch)
		c.results = results
		recorded = make(chan struct{})
		go func() {
			defer close(recorded)
			c.recordLoop(workCtx, results)
		}()
	}

	// The buffer holds a second batch while the workers run the first, so
	// the claimer fetches full batches instead of one message per freed
	// slot (two queries and a commit each). At least 64: fast workers
	// empty a small buffer before the next claim commits.
	jobs := make(chan job, max(2*c.cfg.Concurrency, 64))
	taken := make(chan struct{}, 1)
	var wg sync.WaitGroup
	var busy atomic.Int64
	for range c.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				select {
				case taken <- struct{}{}:
				default:
				}
				if claimCtx.Err() != nil {
					// Stopping: hand back what was not started.
					c.release(workCtx, j.d)
					continue
				}
				busy.Add(1)
				if err := c.process(workCtx, claimCtx, j); err != nil {
					fail(err)
					c.release(workCtx, j.d)
				}
				busy.Add(-1)
			}
		}()
	}

	err := c.claimLoop(claimCtx, jobs, taken, &busy)
	close(jobs)
	wg.Wait()
	if c.results != nil {
		close(c.results)
		<-recorded
	}
	if fatal != nil {
		return fatal
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// claimLoop claims batches for free worker slots until ctx ends or, with
// UntilDone, every run is complete. It claims once at least half of the
// buffer is free (or the buffer is empty), so batches stay large when the
// workers are fast; taken signals that a worker took a job.
func (c *Consumer) claimLoop(ctx context.Context, jobs chan<- job, taken <-chan struct{}, busy *atomic.Int64) error {
	listener, err := c.queue.Listen(ctx)
	if err != nil {
		return fmt.Errorf("listen for queue messages: %w", err)
	}
	defer listener.Close(context.WithoutCancel(ctx))
	failures := 0
	for ctx.Err() == nil {
		free := cap(jobs) - len(jobs)
		if free < cap(jobs)/2 && len(jobs) > 0 {
			// Wait for the workers to make room for a full batch.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-taken:
			}
			continue
		}
		// A claim is not cancelled half way: messages leased by a claim
		// whose answer was lost would stay invisible for a whole lease.
		batch, err := c.claim(context.WithoutCancel(ctx), free)
		if ctx.Err() != nil {
			for _, j := range batch {
				c.release(context.WithoutCancel(ctx), j.d)
			}
			return ctx.Err()
		}
		if err != nil {
			failures++
			wait := backoffDB(failures)
			c.cfg.Logger.Warn("claim failed; retrying", "err", err, "retry_in", wait)
			if err := sleep(ctx, wait); err != nil {
				return err
			}
			continue
		}
		failures = 0
		for _, j := range batch {
			jobs <- j
		}
		if len(batch) > 0 {
			continue
		}
		if c.cfg.UntilDone && len(jobs) == 0 && busy.Load() == 0 {
			done, err := c.allRunsComplete(ctx)
			if err == nil && done {
				return nil
			}
		}
		if err := c.idle(ctx, listener); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// idle waits for the queue listener; with UntilDone, also for a run to
// complete, which may be the last one.
func (c *Consumer) idle(ctx context.Context, listener *queue.Listener) error {
	if !c.cfg.UntilDone {
		return listener.Wait(ctx, c.cfg.IdleWait)
	}
	waitCtx, wake := context.WithCancel(ctx)
	defer wake()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-c.runDone:
			wake()
		case <-stop:
		}
	}()
	if err := listener.Wait(waitCtx, c.cfg.IdleWait); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// completed notes the runs a recorded transaction completed.
func (c *Consumer) completed(res ledger.Result) {
	if len(res.RunsCompleted) == 0 {
		return
	}
	select {
	case c.runDone <- struct{}{}:
	default:
	}
}

// claim claims up to n messages and loads their items in one query.
func (c *Consumer) claim(ctx context.Context, n int) ([]job, error) {
	ds, err := c.queue.Claim(ctx, n)
	if err != nil || len(ds) == 0 {
		return nil, err
	}
	keys := make([]ledger.Key, len(ds))
	for i, d := range ds {
		keys[i] = ledger.Key{RunID: d.RunID, TransactionID: d.TransactionID}
	}
	items, err := ledger.Items(ctx, c.pool, keys)
	if err != nil {
		if rerr := c.queue.Release(ctx, ds); rerr != nil {
			c.cfg.Logger.Warn("release claimed messages failed; they return after their lease", "messages", len(ds), "err", rerr)
		}
		return nil, err
	}
	batch := make([]job, len(ds))
	claimedAt := time.Now()
	for i, d := range ds {
		it, ok := items[keys[i]]
		batch[i] = job{d: d, item: it, ok: ok, claimedAt: claimedAt}
	}
	return batch, nil
}

func (c *Consumer) allRunsComplete(ctx context.Context) (bool, error) {
	var open int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE completed_at IS NULL`).Scan(&open)
	return open == 0, err
}

// release hands an unprocessed delivery back to the queue.
func (c *Consumer) release(ctx context.Context, d queue.Delivery) {
	if err := c.queue.Release(ctx, []queue.Delivery{d}); err != nil {
		c.cfg.Logger.Warn("release message failed; it returns after its lease", "message_id", d.ID, "err", err)
		return
	}
	c.stats.released.Add(1)
}

// process handles one delivery. It returns an error only when consuming must
// stop (the provider refused the credentials); other failures leave the
// message to come back.
func (c *Consumer) process(ctx, claimCtx context.Context, j job) error {
	logger := c.cfg.Logger.With("run_id", j.d.RunID, "transaction_id", j.d.TransactionID)
	switch {
	case !j.ok:
		// A message without an item cannot be reconciled; keep it visible
		// for an operator rather than acking it away.
		return c.settle(ctx, logger, j, settlement{deadLetter: true, reason: "no_item", detail: "no ledger item for this message"})
	case j.item.State.Terminal():
		// The outcome is recorded already (a redelivery): just ack.
		return c.settle(ctx, logger, j, settlement{ackOnly: true})
	case j.d.Poison:
		return c.settle(ctx, logger, j, settlement{to: ledger.DeadLettered, deadLetter: true, reason: "poison",
			detail: fmt.Sprintf("claimed %d times without a result", j.d.Deliveries)})
	}

	if err := c.limiter.Wait(claimCtx); err != nil {
		// Stopping while waiting for a token: nothing was called.
		c.release(ctx, j.d)
		return nil
	}
	if err := c.keepLease(ctx, j); err != nil {
		logger.Debug("lease lost before the call", "err", err)
		c.stats.stale.Add(1)
		return nil
	}
	now := c.cfg.Now()
	stopRenewal := c.renewLease(ctx, logger, j.d)
	resp, callErr := c.client.Get(ctx, j.d.TransactionID, j.d.IdempotencyKey)
	stopRenewal()
	if provider.KindOf(callErr) == provider.KindCanceled {
		c.release(context.WithoutCancel(ctx), j.d)
		return nil
	}
	c.observe(resp, callErr, now)

	firstAttempt := j.item.FirstAttemptAt
	if firstAttempt.IsZero() {
		firstAttempt = now
	}
	dec := decision.Decide(c.cfg.Policy, decision.Input{
		Expected:     provider.Record{ID: j.item.TransactionID, AmountMinor: j.item.AmountMinor, Currency: j.item.Currency, Status: j.item.Status},
		Response:     resp,
		Err:          callErr,
		Attempt:      j.d.Attempt + 1,
		Throttles:    j.item.Throttles,
		FirstAttempt: firstAttempt,
		Now:          now,
	}, c.random)
	if dec.Throttled || dec.Penalty > 0 {
		if err := c.limiter.Throttled(ctx, dec.Penalty); err != nil {
			logger.Warn("throttle not shared with other consumers", "err", err)
		}
	}
	if dec.Action == decision.Stop {
		return fmt.Errorf("%w: %s answered %d for transaction %q; fix RECONCILE_PROVIDER_TOKEN and run again (every message is still queued)",
			ErrProviderAuth, c.client.BaseURL(), resp.Status, j.d.TransactionID)
	}
	s := settlement{called: true, throttled: dec.CountsThrottle, status: resp.Status, reason: dec.Reason,
		detail: dec.Detail, differences: dec.Differences, delay: dec.Delay, at: now}
	if resp.Status >= 200 && resp.Status < 300 && callErr == nil {
		s.provider = &ledger.Provider{AmountMinor: resp.Record.AmountMinor, Currency: resp.Record.Currency, Status: resp.Record.Status}
	}
	switch dec.Action {
	case decision.Ack:
		s.to = ledger.State(dec.Outcome)
	case decision.Retry:
		s.to = ledger.RetryScheduled
		s.retry = true
		// Throttles do not use up the failure budget.
		s.keepAttempt = !dec.CountsAttempt
	case decision.DeadLetter:
		s.to = ledger.DeadLettered
		s.deadLetter = true
	}
	return c.settle(ctx, logger, j, s)
}

// observe feeds the limiter and the counters with a call's result.
func (c *Consumer) observe(resp provider.Response, err error, now time.Time) {
	c.stats.calls.Add(1)
	class := 0
	if err == nil || resp.Status != 0 {
		class = min(max(resp.Status/100, 0), 5)
	}
	c.stats.byClass[class].Add(1)
	if resp.Status == 429 {
		c.stats.throttles.Add(1)
	} else if resp.Status != 0 {
		c.limiter.Succeeded()
	}
	if resp.Header != nil {
		c.limiter.Observe(limiter.ParseHints(resp.Header, now))
	}
}

// keepLease extends the delivery's lease when the wait for a token ate into
// half of it, so the call and the recording fit in what remains. Most
// deliveries are called long before that and cost no extra round trip.
func (c *Consumer) keepLease(ctx context.Context, j job) error {
	visibility := c.queue.Visibility()
	if time.Since(j.claimedAt) < visibility/2 {
		return nil
	}
	return c.queue.Extend(ctx, j.d, visibility)
}

// renewLease extends d's lease every LeaseRenewal until the returned stop
// function is called.
func (c *Consumer) renewLease(ctx context.Context, logger *slog.Logger, d queue.Delivery) (stop func()) {
	every := c.cfg.LeaseRenewal
	if every == 0 {
		every = c.queue.Visibility() / 3
	}
	if every < 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := c.queue.Extend(ctx, d, c.queue.Visibility()); err != nil {
					logger.Debug("lease not extended", "err", err)
					return
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// settlement is what to record for one delivery.
type settlement struct {
	ackOnly     bool // outcome recorded already: only ack the message
	to          ledger.State
	called      bool
	throttled   bool
	status      int
	reason      string
	detail      string
	differences []decision.Difference
	provider    *ledger.Provider
	retry       bool
	keepAttempt bool
	delay       time.Duration
	deadLetter  bool
	at          time.Time
}

// result is a settlement waiting for the recorder.
type result struct {
	j      job
	s      settlement
	logger *slog.Logger
}

// settle hands s to the recorder or, without one, records it at once. It
// returns nil: recording failures leave the message to come back after its
// lease.
func (c *Consumer) settle(ctx context.Context, logger *slog.Logger, j job, s settlement) error {
	if s.at.IsZero() {
		s.at = c.cfg.Now()
	}
	if c.results == nil {
		return c.settleOne(ctx, logger, j, s)
	}
	select {
	case c.results <- result{j: j, s: s, logger: logger}:
	case <-ctx.Done():
	}
	return nil
}

// recordLoop records the results it receives until in is closed, in
// batches of what has gathered, at most RecordBatch.
func (c *Consumer) recordLoop(ctx context.Context, in <-chan result) {
	batch := make([]result, 0, c.cfg.RecordBatch)
	for first := range in {
		batch = append(batch[:0], first)
	gather:
		for len(batch) < c.cfg.RecordBatch {
			select {
			case r, ok := <-in:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		c.settleBatch(ctx, batch)
	}
}

// settleBatch records a batch in one transaction. If any part of it fails
// (a stale lease, an item that moved on, a database error), the transaction
// rolls back and every result is recorded on its own with settleOne, which
// sorts out which ones still apply.
func (c *Consumer) settleBatch(ctx context.Context, batch []result) {
	if len(batch) > 1 {
		slices.SortFunc(batch, func(a, b result) int {
			return cmp.Or(bytes.Compare(a.j.d.RunID[:], b.j.d.RunID[:]), cmp.Compare(a.j.d.TransactionID, b.j.d.TransactionID))
		})
		var res ledger.Result
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
			res, err = c.recordBatch(ctx, tx, batch)
			return err
		})
		if err == nil {
			for _, r := range batch {
				c.count(r.s)
			}
			c.completed(res)
			return
		}
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Debug("batch not recorded; recording its results one by one", "results", len(batch), "err", err)
	}
	for _, r := range batch {
		_ = c.settleOne(ctx, r.logger, r.j, r.s)
	}
}

// recordBatch records a batch sorted by item in tx: every item's change in
// one ledger batch, the rare retries and dead letters one by one, and the
// acks in one statement.
func (c *Consumer) recordBatch(ctx context.Context, tx pgx.Tx, batch []result) (ledger.Result, error) {
	changes := make([]ledger.Change, 0, len(batch))
	for _, r := range batch {
		if ch, ok := c.changeOf(r.j, r.s); ok {
			changes = append(changes, ch)
		}
	}
	res, err := ledger.RecordBatch(ctx, tx, changes)
	if err != nil {
		return res, err
	}
	var acks []queue.Delivery
	for _, r := range batch {
		if r.s.retry || r.s.deadLetter {
			if err := c.settleMessage(ctx, tx, r.j, r.s); err != nil {
				return res, err
			}
			continue
		}
		acks = append(acks, r.j.d)
	}
	stale, err := c.queue.AckBatch(ctx, tx, acks)
	if err != nil {
		return res, err
	}
	if len(stale) > 0 {
		return res, fmt.Errorf("ack %d messages: %w", len(stale), queue.ErrStaleLease)
	}
	return res, nil
}

// settleOne records s in one transaction: the item's state change and
// transition, the completion join, and the message's ack, reschedule or dead
// letter. A database failure is retried with backoff while the lease lasts;
// after that the message comes back by itself.
func (c *Consumer) settleOne(ctx context.Context, logger *slog.Logger, j job, s settlement) error {
	for failures := 0; ; failures++ {
		var res ledger.Result
		err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
			res, err = c.record(ctx, tx, j, s)
			return err
		})
		switch {
		case err == nil:
			c.count(s)
			c.completed(res)
			return nil
		case errors.Is(err, queue.ErrStaleLease):
			c.stats.stale.Add(1)
			logger.Debug("result dropped: message was redelivered elsewhere")
			return nil
		case errors.Is(err, ledger.ErrConflict):
			c.stats.conflicts.Add(1)
			logger.Debug("result dropped: item moved on")
			c.release(ctx, j.d)
			return nil
		case ctx.Err() != nil:
			return nil
		}
		wait := backoffDB(failures + 1)
		if failures >= 8 {
			logger.Error("recording failed; the message returns after its lease", "err", err)
			return nil
		}
		logger.Warn("recording failed; retrying", "err", err, "retry_in", wait)
		if sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// record records s in tx: the item's change, if any, and the message's ack,
// reschedule or dead letter.
func (c *Consumer) record(ctx context.Context, tx pgx.Tx, j job, s settlement) (ledger.Result, error) {
	var res ledger.Result
	if ch, ok := c.changeOf(j, s); ok {
		var err error
		if res, err = ledger.Record(ctx, tx, ch); err != nil {
			return res, err
		}
	}
	return res, c.settleMessage(ctx, tx, j, s)
}

// settleMessage acks, reschedules or dead-letters j's message in tx.
func (c *Consumer) settleMessage(ctx context.Context, tx pgx.Tx, j job, s settlement) error {
	switch {
	case s.retry:
		d := j.d
		if !s.keepAttempt {
			d.Attempt++
		}
		return c.queue.RetryAt(ctx, tx, d, s.at.Add(s.delay), s.reason)
	case s.deadLetter:
		return c.queue.DeadLetter(ctx, tx, j.d, s.reason, s.detail)
	default:
		return c.queue.Ack(ctx, tx, j.d)
	}
}

// changeOf returns the item's state change s records, if it records one.
func (c *Consumer) changeOf(j job, s settlement) (ledger.Change, bool) {
	if s.ackOnly || s.to == "" {
		return ledger.Change{}, false
	}
	attempt := 0
	if s.called {
		attempt = j.d.Attempt + 1
	}
	diffs := make([]ledger.Difference, len(s.differences))
	for i, d := range s.differences {
		diffs[i] = ledger.Difference{Field: d.Field, Expected: d.Expected, Provider: d.Provider}
	}
	var details map[string]any
	if s.detail != "" {
		details = map[string]any{"detail": s.detail}
	}
	if s.retry {
		if details == nil {
			details = map[string]any{}
		}
		details["next_attempt_at"] = s.at.Add(s.delay).UTC().Format(time.RFC3339Nano)
	}
	return ledger.Change{
		RunID: j.d.RunID, TransactionID: j.d.TransactionID, From: j.item.State, To: s.to,
		Called: s.called, Throttled: s.throttled, Attempt: attempt, HTTPStatus: s.status,
		Reason: s.reason, RetryAfter: s.delay, Details: details, Provider: s.provider,
		Differences: diffs, Actor: c.cfg.Actor, At: s.at,
	}, true
}

func (c *Consumer) count(s settlement) {
	switch {
	case s.retry:
		c.stats.retried.Add(1)
	case s.deadLetter:
		c.stats.deadLettered.Add(1)
		c.stats.outcome(string(ledger.DeadLettered))
	default:
		c.stats.acked.Add(1)
		if s.to != "" {
			c.stats.outcome(string(s.to))
		}
	}
}

func (c *Consumer) random() float64 {
	c.rndMu.Lock()
	defer c.rndMu.Unlock()
	return c.rnd.Float64()
}

// backoffDB is the wait before retrying a database operation: 100ms doubling
// to 10s.
func backoffDB(failures int) time.Duration {
	return min(100*time.Millisecond<<min(failures-1, 7), 10*time.Second)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
