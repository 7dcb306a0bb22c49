// Command river compares the reconcile queue with River
// (github.com/riverqueue/river) in one run on one database: both insert the
// same number of trivial messages in the same batches, then work them with a
// no-op handler, and the rates and their ratio are printed.
//
// The database is DATABASE_URL's server when set, otherwise a throwaway
// cluster with stock durability (fsync and synchronous_commit on) started
// with pgserver. A fresh database is created and dropped on that server.
//
//	go run . -n 100000
//
// It lives in its own module so River never enters the product's go.mod.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/migrations"
)

// noopArgs is River's trivial job.
type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

type options struct {
	n             int
	batch         int
	consumers     int
	riverWorkers  int
	fetchCooldown time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 100000, "messages (jobs) to insert and work on each side")
	flag.IntVar(&o.batch, "batch", 100, "insert batch size on both sides, and claim batch size of the reconcile queue")
	flag.IntVar(&o.consumers, "consumers", 4, "concurrent consumers of the reconcile queue (claim a batch, ack it in one transaction)")
	flag.IntVar(&o.riverWorkers, "river-workers", 2000, "River MaxWorkers of the queue")
	flag.DurationVar(&o.fetchCooldown, "river-fetch-cooldown", 2*time.Millisecond, "River FetchCooldown")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	pool, cleanup, err := database(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	var fsync, syncCommit, version string
	if err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit'), current_setting('server_version')`).
		Scan(&fsync, &syncCommit, &version); err != nil {
		return err
	}
	fmt.Printf("PostgreSQL %s, fsync=%s synchronous_commit=%s; n=%d batch=%d\n", version, fsync, syncCommit, o.n, o.batch)

	riverFast, err := riverInsert(ctx, pool, o, true)
	if err != nil {
		return fmt.Errorf("river InsertManyFast: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}
	riverInsertRate, err := riverInsert(ctx, pool, o, false)
	if err != nil {
		return fmt.Errorf("river InsertMany: %w", err)
	}
	riverWork, err := riverWorkAll(ctx, pool, o)
	if err != nil {
		return fmt.Errorf("river work: %w", err)
	}

	q := queue.New(pool, queue.Config{})
	publish, err := queuePublish(ctx, pool, q, o)
	if err != nil {
		return fmt.Errorf("queue publish: %w", err)
	}
	work, err := queueWorkAll(ctx, pool, q, o)
	if err != nil {
		return fmt.Errorf("queue work: %w", err)
	}

	fmt.Printf("%-44s %12s\n", "", "msgs/s")
	fmt.Printf("%-44s %12.0f\n", "river InsertManyFast (COPY)", riverFast)
	fmt.Printf("%-44s %12.0f\n", "river InsertMany", riverInsertRate)
	fmt.Printf("%-44s %12.0f\n", "queue Publish", publish)
	fmt.Printf("%-44s %12.0f\n", fmt.Sprintf("river work (no-op, MaxWorkers %d)", o.riverWorkers), riverWork)
	fmt.Printf("%-44s %12.0f\n", fmt.Sprintf("queue claim+ack (%d consumers)", o.consumers), work)
	fmt.Printf("ratio publish/InsertMany %.2f, publish/InsertManyFast %.2f, work %.2f\n",
		publish/riverInsertRate, publish/riverFast, work/riverWork)
	return nil
}

// database creates a fresh database with both schemas and returns a pool on
// it and a function that drops it (and stops the throwaway server).
func database(ctx context.Context) (*pgxpool.Pool, func(), error) {
	var stops []func()
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	admin := os.Getenv("DATABASE_URL")
	connFor := func(name string) string { return "" }
	if admin == "" {
		c, err := pgserver.Start(ctx, pgserver.Config{Durable: true})
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, func() { _ = c.Stop() })
		admin, connFor = c.ConnString("postgres"), c.ConnString
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	defer conn.Close(ctx)
	name := "bench_" + uuid.NewString()[:8]
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		cleanup()
		return nil, nil, err
	}
	stops = append(stops, func() {
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	url := connFor(name)
	if url == "" {
		cfg := conn.Config()
		url = fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s", cfg.Host, cfg.Port, cfg.User, cfg.Password, name)
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		cleanup()
		return nil, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	pcfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	stops = append(stops, pool.Close)
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		cleanup()
		return nil, nil, err
	}
	return pool, cleanup, nil
}

func riverClient(pool *pgxpool.Pool, o options, work bool) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{Logger: slog.New(slog.DiscardHandler)}
	if work {
		workers := river.NewWorkers()
		river.AddWorker(workers, noopWorker{})
		cfg.Workers = workers
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.riverWorkers}}
		cfg.FetchCooldown = o.fetchCooldown
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// riverInsert inserts o.n no-op jobs in batches and returns jobs/s.
func riverInsert(ctx context.Context, pool *pgxpool.Pool, o options, fast bool) (float64, error) {
	client, err := riverClient(pool, o, false)
	if err != nil {
		return 0, err
	}
	params := make([]river.InsertManyParams, o.batch)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	start := time.Now()
	for i := 0; i < o.n; i += o.batch {
		p := params[:min(o.batch, o.n-i)]
		if fast {
			_, err = client.InsertManyFast(ctx, p)
		} else {
			_, err = client.InsertMany(ctx, p)
		}
		if err != nil {
			return 0, err
		}
	}
	return float64(o.n) / time.Since(start).Seconds(), nil
}

// riverWorkAll works the o.n jobs already inserted and returns jobs/s,
// counted until River reports the last completion.
func riverWorkAll(ctx context.Context, pool *pgxpool.Pool, o options) (float64, error) {
	client, err := riverClient(pool, o, true)
	if err != nil {
		return 0, err
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: o.n + 1000,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer cancel()
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	timeout := time.After(10 * time.Minute)
	for done := 0; done < o.n; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return 0, fmt.Errorf("job %d failed", ev.Job.ID)
			}
			done++
		case <-timeout:
			return 0, fmt.Errorf("only %d of %d jobs completed", done, o.n)
		}
	}
	elapsed := time.Since(start)
	if err := client.Stop(ctx); err != nil {
		return 0, err
	}
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return 0, err
	}
	if completed != o.n {
		return 0, fmt.Errorf("%d of %d jobs completed", completed, o.n)
	}
	return float64(o.n) / elapsed.Seconds(), nil
}

// queuePublish publishes o.n messages in batches and returns msgs/s.
func queuePublish(ctx context.Context, pool *pgxpool.Pool, q *queue.Queue, o options) (float64, error) {
	run := uuid.New()
	msgs := make([]queue.Message, o.n)
	for i := range msgs {
		tx := fmt.Sprintf("tx%08d", i)
		msgs[i] = queue.Message{RunID: run, ReconciliationID: "nightly-2026-10-24", TransactionID: tx,
			IdempotencyKey: "nightly-2026-10-24:" + tx}
	}
	start := time.Now()
	for i := 0; i < o.n; i += o.batch {
		if _, err := q.Publish(ctx, pool, msgs[i:min(i+o.batch, o.n)]); err != nil {
			return 0, err
		}
	}
	return float64(o.n) / time.Since(start).Seconds(), nil
}

// queueWorkAll claims and acks every message with o.consumers consumers,
// each acking its claimed batch in one transaction, and returns msgs/s.
func queueWorkAll(ctx context.Context, pool *pgxpool.Pool, q *queue.Queue, o options) (float64, error) {
	var wg sync.WaitGroup
	errs := make(chan error, o.consumers)
	start := time.Now()
	for range o.consumers {
		wg.Go(func() {
			for {
				ds, err := q.Claim(ctx, o.batch)
				if err != nil || len(ds) == 0 {
					errs <- err
					return
				}
				err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					stale, err := q.AckBatch(ctx, tx, ds)
					if err == nil && len(stale) > 0 {
						err = fmt.Errorf("%d stale leases", len(stale))
					}
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	var errAll error
	for err := range errs {
		errAll = errors.Join(errAll, err)
	}
	if errAll != nil {
		return 0, errAll
	}
	var acked int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM queue_messages WHERE state = 'acked'`).Scan(&acked); err != nil {
		return 0, err
	}
	if acked != o.n {
		return 0, fmt.Errorf("%d of %d messages acked", acked, o.n)
	}
	return float64(o.n) / elapsed.Seconds(), nil
}
