// Package report reads the ledger for people: Status shows how far runs are
// (counts by state, rate, ETA, queue, scheduler failures) and Report lists
// what a run found (discrepancies, missing ids, dead letters, and optionally
// every item), as a table, CSV or JSON.
//
// Both only read, through the read functions of the packages that own the
// tables (ledger, queue, limiter, consume, schedule): the package runs no
// SQL of its own. Neither prints connection details: they know only the
// pool.
package report

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/schedule"
)

// ErrNoRun is returned for a business date (or generation) without a run.
var ErrNoRun = errors.New("no run for this date")

// StatusOptions select what Status shows.
type StatusOptions struct {
	// Date limits the status to the runs of one business date. Defaults to
	// the zero Date: every open run and the runs of the latest date.
	Date payments.Date
	// Now is the instant ages and the ETA are measured from. Required.
	Now time.Time
	// Deadline, when set, is the instant by which every run should be done;
	// a run whose estimated completion passes it gets a warning. Defaults to
	// none.
	Deadline time.Time
	// Failures is how many of the latest scheduler failures to show.
	// Defaults to 5.
	Failures int
	// Limiter names the provider's limiter. Defaults to limiter.DefaultName.
	Limiter string
	// ConsumerWindow is how recent a consumer's heartbeat must be for the
	// consumer to count as running. Without one, open runs get no ETA but
	// a note that nobody works on them. Defaults to 30s.
	ConsumerWindow time.Duration
}

// Status is a snapshot of the runs' progress.
type Status struct {
	// Now is the instant of the snapshot.
	Now time.Time `json:"now"`
	// Deadline is StatusOptions.Deadline; omitted when none.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Limiter is the shared provider limiter.
	Limiter LimiterStatus `json:"limiter"`
	// Runs are ordered by business date and generation.
	Runs []RunStatus `json:"runs"`
	// SchedulerFailures are the latest failed scheduler ticks, newest first.
	SchedulerFailures []SchedulerFailure `json:"scheduler_failures"`
	// Consumers counts the consumers whose heartbeat is within
	// ConsumerWindowSeconds of Now; with none, open runs have no ETA.
	Consumers int `json:"consumers"`
	// ConsumerWindowSeconds is StatusOptions.ConsumerWindow in seconds.
	ConsumerWindowSeconds float64 `json:"consumer_window_seconds"`
	// Warnings are problems an operator must act on (a deadline that will
	// be missed).
	Warnings []string `json:"warnings"`
	// ProviderLimiters are the limiters of a providers file's providers
	// (provider:NAME); omitted when there are none.
	ProviderLimiters []LimiterStatus `json:"provider_limiters,omitempty"`
	// Circuits are the providers' circuits as consumers last changed them;
	// omitted before any circuit has changed.
	Circuits []CircuitStatus `json:"circuits,omitempty"`
}

// LimiterStatus is the shared limiter's settings and state.
type LimiterStatus struct {
	Name string `json:"name"`
	// ConfiguredRate is the ceiling set with `reconcile limit set`, calls/s.
	ConfiguredRate float64 `json:"configured_rate"`
	Burst          int     `json:"burst"`
	// EffectiveRate is the adaptive rate in force, calls/s.
	EffectiveRate float64 `json:"effective_rate"`
	// Throttles counts the 429s reported by all consumers.
	Throttles int64 `json:"throttles"`
	// PenaltyUntil is when the current throttle penalty ends and
	// PenaltySeconds how much of it is left, both by the database's clock;
	// omitted when none is running.
	PenaltyUntil   *time.Time `json:"penalty_until,omitempty"`
	PenaltySeconds float64    `json:"penalty_seconds,omitempty"`
	// History is the limiter's last changes of its effective rate, oldest
	// first; omitted when there are none.
	History []LimiterChange `json:"history,omitempty"`
}

// pause fills the penalty from a limiter's state when one is running by the
// database's clock.
func (l *LimiterStatus) pause(ls limiter.State) {
	if ls.PenaltyLeft > 0 {
		until := ls.PenaltyUntil
		l.PenaltyUntil, l.PenaltySeconds = &until, ls.PenaltyLeft.Seconds()
	}
}

// LimiterChange is one change of the limiter's effective rate.
type LimiterChange struct {
	At time.Time `json:"at"`
	// Cause is throttle, probe, hint, limit set or estimate.
	Cause string `json:"cause"`
	// Rate is the effective rate from then on, calls/s.
	Rate float64 `json:"rate"`
	// Estimate is the provider's estimated rate then, calls/s; 0 unknown.
	Estimate float64 `json:"estimate"`
	Detail   string  `json:"detail"`
}

// historyRows is how many of the limiter's latest changes status shows.
const historyRows = 5

// StateCounts counts a run's items by state.
type StateCounts struct {
	Queued         int `json:"queued"`
	RetryScheduled int `json:"retry_scheduled"`
	Matched        int `json:"matched"`
	Mismatched     int `json:"mismatched"`
	Missing        int `json:"missing"`
	DeadLettered   int `json:"dead_lettered"`
	Cancelled      int `json:"cancelled"`
	// Unexpected counts the records the provider listed that the file
	// lacks (list mode).
	Unexpected int `json:"unexpected"`
}

// Open is the number of items not yet in a terminal state.
func (c StateCounts) Open() int { return c.Queued + c.RetryScheduled }

// QueueStatus is the queue's view of one run.
type QueueStatus struct {
	Available    int64 `json:"available"`
	InFlight     int64 `json:"in_flight"`
	Delayed      int64 `json:"delayed"`
	DeadLettered int64 `json:"dead_lettered"`
	// OldestWaitingSeconds is the age of the oldest message waiting to be
	// claimed, since it was first published.
	OldestWaitingSeconds float64 `json:"oldest_waiting_seconds"`
}

// RunStatus is the progress of one run.
type RunStatus struct {
	RunID            uuid.UUID   `json:"run_id"`
	ReconciliationID string      `json:"reconciliation_id"`
	BusinessDate     string      `json:"business_date"`
	Generation       int         `json:"generation"`
	Trigger          string      `json:"trigger"`
	Source           string      `json:"source"`
	Items            int         `json:"items"`
	States           StateCounts `json:"states"`
	Open             int         `json:"open"`
	// ProgressPercent is the share of items in a terminal state, 0 to 100.
	ProgressPercent float64 `json:"progress_percent"`
	ProviderCalls   int64   `json:"provider_calls"`
	Throttles       int64   `json:"throttles"`
	// CheckMode is how the run's items are checked against the provider:
	// lookup (each item by its id), list (the provider's list of the date
	// first) or auto; omitted until a consumer claims one of them.
	CheckMode string      `json:"check_mode,omitempty"`
	Queue     QueueStatus `json:"queue"`
	// ETASeconds is the estimated time to completion at the effective rate
	// in whole seconds, rounded up, counting the open items of runs
	// enqueued before this one (consumers share one limiter) and any
	// running penalty; omitted when complete.
	ETASeconds *float64 `json:"eta_seconds,omitempty"`
	// EstimatedCompletion is Now plus the ETA; omitted when complete.
	EstimatedCompletion *time.Time `json:"estimated_completion,omitempty"`
	CreatedAt           time.Time  `json:"created_at"`
	// CompletedAt is when the last item reached a terminal state; omitted
	// while items are open.
	CompletedAt *time.Time `json:"completed_at,omitempty"`
	// Providers breaks the items down by provider; omitted when they name
	// none.
	Providers []ledger.ProviderTotal `json:"providers,omitempty"`
	// CancelledAt, CancelledBy and CancelReason say when, by whom and why
	// the run was withdrawn; omitted if it never was.
	CancelledAt  *time.Time `json:"cancelled_at,omitempty"`
	CancelledBy  string     `json:"cancelled_by,omitempty"`
	CancelReason string     `json:"cancel_reason,omitempty"`
	// DeadlineAt is the run's deadline (consume or schedule --deadline);
	// omitted when it has none.
	DeadlineAt *time.Time `json:"deadline_at,omitempty"`
	// Announcements are the run's announcements to webhooks, oldest
	// first; omitted when it has none.
	Announcements []Announcement `json:"announcements,omitempty"`
}

// SchedulerFailure is one failed scheduler tick.
type SchedulerFailure struct {
	RecordedAt   time.Time `json:"recorded_at"`
	ScheduledAt  time.Time `json:"scheduled_at"`
	BusinessDate string    `json:"business_date"`
	Source       string    `json:"source"`
	Scheduler    string    `json:"scheduler"`
	Error        string    `json:"error"`
	// Resolved is true when the date has a run by now (a later tick, a
	// catch-up or an operator enqueued it).
	Resolved bool `json:"resolved"`
}

// LoadStatus reads the status of the runs opts selects.
func LoadStatus(ctx context.Context, pool *pgxpool.Pool, opts StatusOptions) (Status, error) {
	if opts.Now.IsZero() {
		return Status{}, errors.New("load status: StatusOptions.Now is required")
	}
	opts.Failures = cmp.Or(opts.Failures, 5)
	opts.Limiter = cmp.Or(opts.Limiter, limiter.DefaultName)
	opts.ConsumerWindow = cmp.Or(opts.ConsumerWindow, 30*time.Second)
	st := Status{Now: opts.Now, Runs: []RunStatus{}, SchedulerFailures: []SchedulerFailure{}, Warnings: []string{}}
	if !opts.Deadline.IsZero() {
		st.Deadline = &opts.Deadline
	}

	// Every limiter's row in one statement: the default one and the
	// providers'.
	states, err := limiter.States(ctx, pool)
	if err != nil {
		return Status{}, err
	}
	ls := limiter.Unstored(opts.Limiter)
	if i := slices.IndexFunc(states, func(s limiter.State) bool { return s.Name == opts.Limiter }); i >= 0 {
		ls = states[i]
	}
	st.ProviderLimiters = providerLimiters(states)
	st.Limiter = LimiterStatus{Name: ls.Name, ConfiguredRate: ls.Rate, Burst: ls.Burst, EffectiveRate: ls.EffectiveRate,
		Throttles: ls.Throttles}
	st.Limiter.pause(ls)
	changes, err := limiter.LoadHistory(ctx, pool, opts.Limiter, opts.Now, historyRows)
	if err != nil {
		return Status{}, err
	}
	for _, c := range changes {
		st.Limiter.History = append(st.Limiter.History, LimiterChange{At: c.At, Cause: c.Cause, Rate: c.Rate, Estimate: c.Estimate, Detail: c.Detail})
	}

	if st.Runs, err = loadRuns(ctx, pool, opts.Date); err != nil {
		return Status{}, err
	}
	if err := addQueueStats(ctx, pool, opts.Now, st.Runs); err != nil {
		return Status{}, err
	}
	st.ConsumerWindowSeconds = opts.ConsumerWindow.Seconds()
	hb, err := consume.ReadHeartbeats(ctx, pool, opts.Now.Add(-opts.ConsumerWindow))
	if err != nil {
		return Status{}, err
	}
	st.Consumers = hb.Alive
	if st.Consumers > 0 {
		st.estimate(opts.Now)
	} else if st.Deadline != nil {
		for _, r := range st.Runs {
			if r.Open > 0 {
				st.Warnings = append(st.Warnings, fmt.Sprintf("%s will miss the deadline %s: %d open items and no consumer seen in the last %s; start `reconcile consume`.",
					r.ReconciliationID, st.Deadline.UTC().Format(time.RFC3339), r.Open, human.Duration(opts.ConsumerWindow)))
			}
		}
	}
	if st.Circuits, err = loadCircuits(ctx, pool); err != nil {
		return Status{}, err
	}
	if err := st.addAnnouncements(ctx, pool, opts.Now); err != nil {
		return Status{}, err
	}
	if st.SchedulerFailures, err = loadFailures(ctx, pool, opts.Date, opts.Failures); err != nil {
		return Status{}, err
	}
	return st, nil
}

// loadRuns reads the summaries of the runs of d, or of the open runs and
// the latest date's, with their totals by provider. A run is open until its
// completion is recorded (completed_at, cleared again by a requeue), the
// test ledger.OpenRuns makes too. Open or complete, a run's figures are its
// counters' (a few rows), not its items'.
func loadRuns(ctx context.Context, db DB, d payments.Date) ([]RunStatus, error) {
	f := ledger.RunFilter{Date: d, OpenOrLatestDate: d.IsZero()}
	ss, err := ledger.Summaries(ctx, db, f)
	if err != nil {
		return nil, err
	}
	runs := make([]RunStatus, len(ss))
	for i, s := range ss {
		totals, err := providerTotals(ctx, db, s.RunID)
		if err != nil {
			return nil, err
		}
		r := RunStatus{RunID: s.RunID, ReconciliationID: s.ReconciliationID, BusinessDate: s.BusinessDate.String(),
			Generation: s.Generation, Trigger: s.Trigger, Source: s.Source, Items: int(s.Items),
			States: StateCounts{Queued: int(s.Queued), RetryScheduled: int(s.RetryScheduled), Matched: int(s.Matched),
				Mismatched: int(s.Mismatched), Missing: int(s.Missing), DeadLettered: int(s.DeadLettered),
				Cancelled: int(s.Cancelled), Unexpected: int(s.Unexpected)},
			Open: int(s.Open), ProviderCalls: s.ProviderCalls, Throttles: s.Throttles, CreatedAt: s.CreatedAt,
			CompletedAt: s.CompletedAt, CancelledAt: s.CancelledAt, CancelledBy: s.CancelledBy,
			CancelReason: s.CancelReason, DeadlineAt: s.DeadlineAt, CheckMode: s.CheckMode, Providers: totals}
		if r.Items > 0 {
			r.ProgressPercent = math.Round(float64(r.Items-r.Open)/float64(r.Items)*1000) / 10
		}
		runs[i] = r
	}
	return runs, nil
}

// addQueueStats fills in each run's queue counts. The queue reads what it
// holds of each run apart from its available messages (queue.RunWaits); a
// run's ready messages are its open items, so the available ones are those
// less the ones in flight or delayed, and a run's status costs the same at
// the start of a night of millions as at its end.
func addQueueStats(ctx context.Context, pool *pgxpool.Pool, now time.Time, runs []RunStatus) error {
	if len(runs) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	ws, err := queue.New(pool, queue.Config{Now: func() time.Time { return now }}).RunWaits(ctx, pool, ids)
	if err != nil {
		return err
	}
	for i, w := range ws {
		runs[i].Queue = QueueStatus{Available: max(int64(runs[i].Open)-w.InFlight-w.Delayed, 0), InFlight: w.InFlight,
			Delayed: w.Delayed, DeadLettered: w.DeadLettered, OldestWaitingSeconds: w.OldestAvailableAge.Seconds()}
	}
	return nil
}

// estimate computes each open run's ETA and warns about deadlines. Runs are
// served in enqueue order by one shared limiter, so a run waits for the open
// items of the runs created before it.
func (st *Status) estimate(now time.Time) {
	rate := st.Limiter.EffectiveRate
	if rate <= 0 {
		return
	}
	penalty := time.Duration(st.Limiter.PenaltySeconds * float64(time.Second))
	order := make([]int, 0, len(st.Runs))
	for i := range st.Runs {
		if st.Runs[i].Open > 0 {
			order = append(order, i)
		}
	}
	// Stable by creation time; ties (same transaction) keep date order.
	for a := 1; a < len(order); a++ {
		for b := a; b > 0 && st.Runs[order[b]].CreatedAt.Before(st.Runs[order[b-1]].CreatedAt); b-- {
			order[b], order[b-1] = order[b-1], order[b]
		}
	}
	ahead := 0
	for _, i := range order {
		r := &st.Runs[i]
		ahead += r.Open
		eta := penalty + time.Duration(float64(ahead)/rate*float64(time.Second))
		secs := math.Ceil(eta.Seconds())
		done := now.Add(time.Duration(secs) * time.Second)
		r.ETASeconds, r.EstimatedCompletion = &secs, &done
		if st.Deadline != nil && done.After(*st.Deadline) {
			st.Warnings = append(st.Warnings, deadlineWarning(*r, ahead, rate, st.Limiter.ConfiguredRate, now, *st.Deadline))
		}
	}
}

func deadlineWarning(r RunStatus, ahead int, rate, configured float64, now, deadline time.Time) string {
	msg := fmt.Sprintf("%s will miss the deadline %s: %d open items (with the runs ahead of it) need about %s at the effective %s, finishing about %s.",
		r.ReconciliationID, deadline.UTC().Format(time.RFC3339), ahead, human.Duration(time.Duration(*r.ETASeconds)*time.Second),
		human.Rate(rate), r.EstimatedCompletion.UTC().Format(time.RFC3339))
	left := deadline.Sub(now)
	if left <= 0 {
		return msg + " The deadline has passed."
	}
	need := float64(ahead) / left.Seconds()
	msg += fmt.Sprintf(" No algorithm fixes an arrival rate above the provider's ceiling: finishing in time needs %s", human.Rate(math.Ceil(need*10)/10))
	if need > configured {
		msg += fmt.Sprintf(", above the configured %s; raise the provider's limit (then `reconcile limit set --rate`) or start the run earlier.", human.Rate(configured))
	} else {
		msg += fmt.Sprintf(", within the configured %s but above the effective rate the provider allows now; the provider is throttling: ask for a higher limit or start the run earlier.", human.Rate(configured))
	}
	return msg
}

// loadFailures reads the latest failed ticks, of d when set, each marked
// resolved when its date has a run by now.
func loadFailures(ctx context.Context, db DB, d payments.Date, n int) ([]SchedulerFailure, error) {
	fails, err := schedule.Failures(ctx, db, d, n)
	if err != nil {
		return nil, err
	}
	dates := make([]payments.Date, len(fails))
	for i, f := range fails {
		dates[i] = f.BusinessDate
	}
	resolved, err := ledger.DatesWithRuns(ctx, db, dates)
	if err != nil {
		return nil, err
	}
	out := make([]SchedulerFailure, len(fails))
	for i, f := range fails {
		out[i] = SchedulerFailure{RecordedAt: f.RecordedAt, ScheduledAt: f.ScheduledAt, BusinessDate: f.BusinessDate.String(),
			Source: f.Source, Scheduler: f.Scheduler, Error: f.Error, Resolved: resolved[f.BusinessDate]}
	}
	return out, nil
}
