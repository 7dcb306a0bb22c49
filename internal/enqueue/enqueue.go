// Package enqueue turns one day's payment export into a reconciliation run:
// the run row, one ledger item per payment and one compact queue message per
// item, written in bulk in a single transaction. Bad input writes nothing.
package enqueue

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	// Open opens the input. For a date that has a run already, the input
	// is read only to compare its SHA-256 with the run's.
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
	// Providers, when not nil, lists the providers of the providers file:
	// a payment naming another is bad input on its line. Defaults to nil:
	// any provider name is accepted and consume checks them.
	Providers []string
	// ProvidersSource names the providers file in those problems.
	ProvidersSource string
	// DefaultProvider is recorded on the items whose payment names no
	// provider (the providers file's default). Defaults to "": the
	// default provider, whichever consume is given.
	DefaultProvider string
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
	// Superseded is the previous generation a RerunAll replaced, and
	// SupersededItems the number of its unfinished items it cancelled.
	Superseded      ledger.Run
	SupersededItems int
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
			// The latest generation is locked, so concurrent re-runs of the
			// date take turns, and withdrawn: its unfinished items would
			// otherwise keep calling the provider next to the new run's.
			prev, err := ledger.LockLatestRun(ctx, tx, req.Date)
			if errors.Is(err, ledger.ErrNotFound) {
				return fmt.Errorf("rerun all of %s: %w", req.Date, ErrNoRun)
			}
			if err != nil {
				return err
			}
			generation = prev.Generation + 1
			res.Superseded = prev
			if res.SupersededItems, _, err = cancelRun(ctx, e.cfg.Queue, tx, prev,
				fmt.Sprintf("superseded by generation %d", generation), e.cfg.Actor); err != nil {
				return err
			}
		}
		res.RunID, res.Generation = uuid.New(), generation
		res.ReconciliationID = PrefixedID(cmp.Or(req.Prefix, "nightly"), req.Date, generation)

		// A concurrent enqueuer of the same date waits here for ours to
		// commit, and then finds the run instead of creating a second one.
		created, err := ledger.CreateRun(ctx, tx, ledger.NewRun{RunID: res.RunID, ReconciliationID: res.ReconciliationID,
			BusinessDate: req.Date, Generation: generation, Trigger: string(req.Trigger), TriggeredBy: e.cfg.Actor,
			Source: req.Source, TimeZone: req.Location.String()})
		if err != nil {
			return err
		}
		if !created {
			run, err := e.existing(ctx, tx, req)
			if err != nil {
				return err
			}
			res = Result{RunID: run.RunID, ReconciliationID: run.ReconciliationID, Generation: run.Generation,
				Items: run.Items, Existing: true}
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
		if err := ledger.FinishRun(ctx, tx, res.RunID, n, sha); err != nil {
			return err
		}
		// The run is new, so its keys cannot be known: no duplicate check.
		// Messages are claimed in whatever order the items come back,
		// usually the source's.
		published, err := e.cfg.Queue.PublishNewQuery(ctx, tx, ledger.RunMessagesQuery, res.RunID, res.ReconciliationID)
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

// existing returns the date's latest run for an enqueue that found the
// date taken, after checking that req's input is the one the run was made
// from: one date, one truth. A different input is a *ChangedSourceError.
func (e *Enqueuer) existing(ctx context.Context, tx pgx.Tx, req Request) (ledger.Run, error) {
	latest, err := ledger.LatestGeneration(ctx, tx, req.Date)
	if err != nil {
		return ledger.Run{}, err
	}
	run, err := ledger.FindRun(ctx, tx, req.Date, latest)
	if err != nil {
		return ledger.Run{}, err
	}
	if req.Open == nil {
		return run, nil
	}
	in, err := req.Open()
	if err != nil {
		return ledger.Run{}, err
	}
	defer in.Close()
	h := sha256.New()
	if _, err := io.Copy(h, in); err != nil {
		return ledger.Run{}, fmt.Errorf("read %s: %w", req.Source, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != run.SourceSHA256 {
		return ledger.Run{}, &ChangedSourceError{Date: req.Date, Run: run, Source: req.Source, SHA256: sum}
	}
	return run, nil
}

// ChangedSourceError says that a date already has a run made from another
// input than the one given: enqueuing it again would give the date two
// truths. Start a new generation from the new input (`--rerun all`), or
// withdraw the run (`reconcile cancel`).
type ChangedSourceError struct {
	// Date is the business date.
	Date payments.Date
	// Run is the date's latest run.
	Run ledger.Run
	// Source names the input given now.
	Source string
	// SHA256 is the SHA-256 (hex) of the input given now.
	SHA256 string
}

func (e *ChangedSourceError) Error() string {
	return fmt.Sprintf("%s already has run %s (generation %d) from another input: its SHA-256 is %s, %s has %s; "+
		"to reconcile the date from the new input run `reconcile enqueue --date %s --source %s --rerun all` "+
		"(it withdraws the unfinished items of %s), or withdraw the run with `reconcile cancel --date %s --reason TEXT`",
		e.Date, e.Run.ReconciliationID, e.Run.Generation, e.Run.SourceSHA256, e.Source, e.SHA256,
		e.Date, e.Source, e.Run.ReconciliationID, e.Date)
}

// copyItems streams the input into the ledger's items. It returns the
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
		Providers:        req.Providers,
		ProvidersSource:  req.ProvidersSource,
	})
	if err != nil {
		return 0, "", err
	}
	// Rows with problems are skipped (the reader collects them) and the
	// transaction is rolled back at the end.
	var readErr error
	n, err := ledger.InsertItems(ctx, tx, run.RunID, func() (ledger.NewItem, error) {
		p, err := r.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = err
			}
			return ledger.NewItem{}, err
		}
		return ledger.NewItem{TransactionID: p.TransactionID, AccountID: p.AccountID,
			IdempotencyKey: IdempotencyKey(run.ReconciliationID, p.TransactionID), AmountMinor: p.AmountMinor,
			Currency: p.Currency, Status: p.Status, OccurredAt: p.OccurredAt, Provider: cmp.Or(p.Provider, req.DefaultProvider),
			Kind: p.Kind}, nil
	})
	if problems := r.Problems(); !problems.Empty() {
		return 0, "", problems
	}
	if readErr != nil {
		return 0, "", fmt.Errorf("read %s: %w", req.Source, readErr)
	}
	if err != nil {
		return 0, "", fmt.Errorf("write items of %s: %w", req.Source, err)
	}
	return n, r.SHA256(), nil
}

// rerunFailed requeues the dead-lettered items of the date's latest
// generation: their messages go back to the queue and each item gets a
// dead_lettered → queued transition, in one transaction.
func (e *Enqueuer) rerunFailed(ctx context.Context, req Request) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		run, err := ledger.LockLatestRun(ctx, tx, req.Date)
		if errors.Is(err, ledger.ErrNotFound) {
			return fmt.Errorf("rerun failed items of %s: %w", req.Date, ErrNoRun)
		}
		if err != nil {
			return err
		}
		res = Result{RunID: run.RunID, ReconciliationID: run.ReconciliationID, Generation: run.Generation, Items: run.Items}
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
