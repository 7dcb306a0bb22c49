// Package enqueue turns one day's payment export into a reconciliation run:
// the run row, one ledger item per payment and one compact queue message per
// item, written in bulk in a single transaction. Bad input writes nothing.
package enqueue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
)

// Rerun says what to do when the date already has a run.
type Rerun string

// Rerun modes.
const (
	// RerunNone creates generation 1 or, when it exists, reports it and
	// writes nothing.
	RerunNone Rerun = ""
	// RerunFailed requeues the dead-lettered items of the latest generation.
	RerunFailed Rerun = "failed"
	// RerunAll creates generation N+1 that checks every payment again.
	RerunAll Rerun = "all"
)

// ParseRerun parses the value of a --rerun flag.
func ParseRerun(s string) (Rerun, error) {
	switch Rerun(s) {
	case RerunNone, RerunFailed, RerunAll:
		return Rerun(s), nil
	}
	return "", fmt.Errorf("unknown rerun mode %q: want failed or all", s)
}

// Trigger says what started a run.
type Trigger string

// Triggers.
const (
	Manual Trigger = "manual"
	Cron   Trigger = "cron"
)

// ErrNoRun is returned by a re-run of a date that has no run yet.
var ErrNoRun = errors.New("no run exists for this date")

// Config configures an Enqueuer.
type Config struct {
	// Queue publishes the run's messages. Required.
	Queue *queue.Queue
	// Actor names who enqueues, recorded as the run's triggered_by and on
	// requeue transitions. Defaults to "reconcile".
	Actor string
	// Logger receives progress messages. Defaults to discarding them.
	Logger *slog.Logger
}

// Enqueuer creates runs. It is safe for concurrent use; concurrent enqueues
// of the same date create one run.
type Enqueuer struct {
	pool *pgxpool.Pool
	cfg  Config
}

// New returns an Enqueuer writing to pool.
func New(pool *pgxpool.Pool, cfg Config) (*Enqueuer, error) {
	if cfg.Queue == nil {
		return nil, errors.New("enqueue: Config.Queue is required")
	}
	cfg.Actor = cmp.Or(cfg.Actor, "reconcile")
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Enqueuer{pool: pool, cfg: cfg}, nil
}

// Request describes one enqueue.
type Request struct {
	// Date is the business date. Required.
	Date payments.Date
	// Location is the zone in which Date is read. Defaults to UTC.
	Location *time.Location
	// Source names the input for the ledger and for error messages: a file
	// path, "-" for standard input, or table:NAME.
	Source string
	// Open opens the input. It is called only when a run is to be created,
	// so an existing run is reported without reading the file.
	Open func() (io.ReadCloser, error)
	// Format is the input's syntax. Defaults to payments.FormatAuto.
	Format payments.Format
	// AllowOutsideDate accepts payments whose occurred_at falls outside
	// the business date.
	AllowOutsideDate bool
	// Trigger records what started the run. Defaults to Manual.
	Trigger Trigger
	// Rerun says what to do with a date that already has a run.
	Rerun Rerun
	// Prefix starts the run's reconciliation id: PREFIX-YYYY-MM-DD, then
	// PREFIX-YYYY-MM-DD-g2, ... `reconcile demo` on a shared database uses
	// "demo". Defaults to "nightly".
	Prefix string
}

// Result describes what an enqueue did.
type Result struct {
	RunID            uuid.UUID
	ReconciliationID string
	Generation       int
	// Items is the number of items of the run.
	Items int
	// Existing is true when the run already existed and nothing was written.
	Existing bool
	// Requeued is the number of items a RerunFailed put back on the queue.
	Requeued int
	// Elapsed is the time the enqueue took.
	Elapsed time.Duration
}

// ReconciliationID names the run of a date and generation:
// nightly-2026-10-24, then nightly-2026-10-24-g2, ...
func ReconciliationID(d payments.Date, generation int) string {
	return PrefixedID("nightly", d, generation)
}

// PrefixedID is [ReconciliationID] with another prefix than "nightly".
func PrefixedID(prefix string, d payments.Date, generation int) string {
	if generation <= 1 {
		return prefix + "-" + d.String()
	}
	return fmt.Sprintf("%s-%s-g%d", prefix, d, generation)
}

// IdempotencyKey is the key sent to the provider for every call about one
// item: the same on every retry, different for each run.
func IdempotencyKey(reconciliationID, transactionID string) string {
	return reconciliationID + ":" + transactionID
}

// Enqueue performs req. Bad input is returned as a payments.ProblemList
// (errors.As) and nothing is written.
func (e *Enqueuer) Enqueue(ctx context.Context, req Request) (Result, error) {
	start := time.Now()
	if req.Date.IsZero() {
		return Result{}, errors.New("enqueue: no business date")
	}
	if req.Location == nil {
		req.Location = time.UTC
	}
	req.Trigger = cmp.Or(req.Trigger, Manual)
	var res Result
	var err error
	switch req.Rerun {
	case RerunFailed:
		res, err = e.rerunFailed(ctx, req)
	case RerunAll:
		res, err = e.create(ctx, req, true)
	default:
		res, err = e.create(ctx, req, false)
	}
	res.Elapsed = time.Since(start)
	return res, err
}

// create inserts a new run and streams its items. With next it creates the
// generation after the latest; otherwise generation 1, or reports the
// existing one.
func (e *Enqueuer) create(ctx context.Context, req Request, next bool) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		generation := 1
		if next {
			var latest int
			if err := tx.QueryRow(ctx, `SELECT coalesce(max(generation), 0) FROM runs WHERE business_date = $1`,
				req.Date.String()).Scan(&latest); err != nil {
				return fmt.Errorf("find latest generation of %s: %w", req.Date, err)
			}
			if latest == 0 {
				return fmt.Errorf("rerun all of %s: %w", req.Date, ErrNoRun)
			}
			generation = latest + 1
		}
		res = Result{RunID: uuid.New(), Generation: generation, ReconciliationID: PrefixedID(cmp.Or(req.Prefix, "nightly"), req.Date, generation)}

		// The unique (business_date, generation) key makes a concurrent
		// enqueuer of the same date wait here for ours to commit, and then
		// find the run instead of creating a second one.
		tag, err := tx.Exec(ctx, `
			INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by,
			                  source, source_sha256, time_zone, item_count)
			VALUES ($1, $2, $3, $4, $5, $6, $7, '', $8, 0)
			ON CONFLICT DO NOTHING`,
			res.RunID, res.ReconciliationID, req.Date.String(), generation, string(req.Trigger), e.cfg.Actor,
			req.Source, req.Location.String())
		if err != nil {
			return fmt.Errorf("create run %s: %w", res.ReconciliationID, err)
		}
		if tag.RowsAffected() == 0 {
			existing, err := e.existing(ctx, tx, req.Date, generation)
			if err != nil {
				return err
			}
			res = existing
			return nil
		}

		phase := time.Now()
		n, sha, err := e.copyItems(ctx, tx, req, res)
		if err != nil {
			return err
		}
		res.Items = n
		e.cfg.Logger.Debug("items copied", "items", n, "elapsed", time.Since(phase))
		phase = time.Now()
		if err := ledger.InitCounters(ctx, tx, res.RunID); err != nil {
			return err
		}
		e.cfg.Logger.Debug("completion counters created", "elapsed", time.Since(phase))
		phase = time.Now()
		if _, err := tx.Exec(ctx, `UPDATE runs SET item_count = $2, source_sha256 = $3 WHERE run_id = $1`,
			res.RunID, n, sha); err != nil {
			return fmt.Errorf("finish run %s: %w", res.ReconciliationID, err)
		}
		// The run is new, so its keys cannot be known: no duplicate check.
		// No ORDER BY either: sorting a large run costs more than the
		// publish saves, and messages are claimed in whatever order the
		// items come back, usually the source's.
		published, err := e.cfg.Queue.PublishNewQuery(ctx, tx,
			`SELECT run_id, $2::text, transaction_id, idempotency_key, 0 FROM items WHERE run_id = $1`,
			res.RunID, res.ReconciliationID)
		if err != nil {
			return fmt.Errorf("publish messages of run %s: %w", res.ReconciliationID, err)
		}
		e.cfg.Logger.Debug("messages published", "messages", published, "elapsed", time.Since(phase))
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	if res.Existing {
		e.cfg.Logger.Info("run exists already; nothing enqueued", "run_id", res.RunID, "reconciliation_id", res.ReconciliationID)
	}
	return res, nil
}

// existing reports the run of date and generation that a concurrent or
// earlier enqueue created.
func (e *Enqueuer) existing(ctx context.Context, tx pgx.Tx, d payments.Date, generation int) (Result, error) {
	res := Result{Existing: true}
	err := tx.QueryRow(ctx, `SELECT run_id, reconciliation_id, generation, item_count FROM runs
		WHERE business_date = $1 AND generation = $2`, d.String(), generation).
		Scan(&res.RunID, &res.ReconciliationID, &res.Generation, &res.Items)
	if err != nil {
		return Result{}, fmt.Errorf("find existing run of %s: %w", d, err)
	}
	return res, nil
}

// copyItems streams the input into the items table with COPY. It returns the
// item count and the input's SHA-256, or the input's problems.
func (e *Enqueuer) copyItems(ctx context.Context, tx pgx.Tx, req Request, run Result) (int, string, error) {
	if req.Open == nil {
		return 0, "", errors.New("enqueue: no input to read")
	}
	in, err := req.Open()
	if err != nil {
		return 0, "", err
	}
	defer in.Close()
	r, err := payments.NewReader(in, req.Source, payments.Options{
		Format:           req.Format,
		BusinessDate:     req.Date,
		Location:         req.Location,
		AllowOutsideDate: req.AllowOutsideDate,
	})
	if err != nil {
		return 0, "", err
	}
	src := &itemSource{r: r, run: run}
	n, err := tx.CopyFrom(ctx, pgx.Identifier{"items"},
		[]string{"run_id", "transaction_id", "account_id", "idempotency_key", "amount_minor", "currency",
			"status", "occurred_at", "shard"}, src)
	if problems := r.Problems(); !problems.Empty() {
		return 0, "", problems
	}
	if src.readErr != nil {
		return 0, "", fmt.Errorf("read %s: %w", req.Source, src.readErr)
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" {
			return 0, "", fmt.Errorf("write items of %s: a transaction id occurs twice (%s)", req.Source, pgErr.Detail)
		}
		return 0, "", fmt.Errorf("write items of %s: %w", req.Source, err)
	}
	return int(n), r.SHA256(), nil
}

// itemSource adapts the payments reader to pgx.CopyFromSource, one row at a
// time, so memory does not grow with the input. Rows with problems are
// skipped (the reader collects them) and the transaction is rolled back at
// the end.
type itemSource struct {
	r       *payments.Reader
	run     Result
	cur     payments.Payment
	row     [9]any
	readErr error
}

func (s *itemSource) Next() bool {
	p, err := s.r.Next()
	if err != nil {
		if !errors.Is(err, io.EOF) {
			s.readErr = err
		}
		return false
	}
	s.cur = p
	return true
}

func (s *itemSource) Values() ([]any, error) {
	p := s.cur
	s.row = [9]any{s.run.RunID, p.TransactionID, p.AccountID, IdempotencyKey(s.run.ReconciliationID, p.TransactionID),
		p.AmountMinor, p.Currency, p.Status, p.OccurredAt, ledger.ShardOf(p.TransactionID)}
	return s.row[:], nil
}

func (s *itemSource) Err() error { return s.readErr }

// rerunFailed requeues the dead-lettered items of the date's latest
// generation: their messages go back to the queue and each item gets a
// dead_lettered → queued transition, in one transaction.
func (e *Enqueuer) rerunFailed(ctx context.Context, req Request) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT run_id, reconciliation_id, generation, item_count FROM runs
			WHERE business_date = $1 ORDER BY generation DESC LIMIT 1 FOR NO KEY UPDATE`, req.Date.String()).
			Scan(&res.RunID, &res.ReconciliationID, &res.Generation, &res.Items)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("rerun failed items of %s: %w", req.Date, ErrNoRun)
		}
		if err != nil {
			return fmt.Errorf("find latest run of %s: %w", req.Date, err)
		}
		n, err := Requeue(ctx, e.cfg.Queue, tx, queue.Filter{RunID: res.RunID}, "rerun_failed", e.cfg.Actor)
		res.Requeued = n
		return err
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// Requeue redrives the dead-lettered messages selected by f back to the
// queue and moves their ledger items back to queued, with a transition
// giving reason, in the caller's transaction. It returns how many items were
// requeued. `dlq redrive` and `enqueue --rerun failed` both use it.
func Requeue(ctx context.Context, q *queue.Queue, tx pgx.Tx, f queue.Filter, reason, actor string) (int, error) {
	msgs, err := q.Redrive(ctx, tx, f)
	if err != nil {
		return 0, err
	}
	byRun := map[uuid.UUID][]string{}
	for _, m := range msgs {
		byRun[m.RunID] = append(byRun[m.RunID], m.TransactionID)
	}
	total := 0
	for runID, ids := range byRun {
		done, err := ledger.Requeue(ctx, tx, runID, ids, reason, actor, time.Time{})
		if err != nil {
			return 0, err
		}
		total += len(done)
	}
	return total, nil
}
