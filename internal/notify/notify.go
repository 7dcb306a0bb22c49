// Package notify announces runs to webhooks: the morning message that says
// whether last night reconciled, without anyone opening a console.
//
// The ledger writes an announcement into the outbox (internal/outbox) in the
// transaction that completes a run, for every completion round. A Notifier,
// run beside a consumer or a scheduler, delivers them: it takes up the
// announcements of the last day for each of its webhooks, claims the due
// deliveries with a lease, POSTs each with a timeout, signed as Standard
// Webhooks sign (webhook-id, webhook-timestamp, webhook-signature), and
// retries a failure with capped, jittered backoff under the same event id
// until a bounded number of attempts, after which the delivery is recorded
// as failed. With a deadline it also gives open runs their deadline and
// announces, once per run, a run still open at it.
//
// A Notifier runs in its own goroutine on its own small pool and never
// holds a transaction while it waits for a webhook, so an unreachable
// webhook never slows reconciliation down.
//
// The files follow the topics: notify.go the Notifier and its rounds,
// webhook.go webhook URLs, secrets and signing, body.go the two body
// formats.
package notify

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/logthrottle"
	"github.com/reconcile/reconcile/internal/outbox"
	"github.com/reconcile/reconcile/internal/provider"
)

// Defaults of [Config].
const (
	// DefaultTimeout bounds one POST, as a provider call is bounded.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxAttempts, DefaultBackoffBase and DefaultBackoffCap give up
	// after about 1 to 2 hours of failures (attempts 10 s, 20 s, ... apart,
	// at most 30 minutes, equal jitter): a receiver restarted or redeployed
	// during the night still gets the message, one down for longer shows
	// as failed in status and metrics instead of being tried for ever.
	DefaultMaxAttempts = 12
	DefaultBackoffBase = 10 * time.Second
	DefaultBackoffCap  = 30 * time.Minute
	// DefaultPoll is how often a Notifier looks for due work: an
	// announcement leaves about a second after its run completes.
	DefaultPoll = time.Second
	// DefaultBacklog is how far back a webhook new to the outbox is given
	// announcements: the last night's, not the history.
	DefaultBacklog = 24 * time.Hour
	// DefaultParallel is how many deliveries are attempted at once.
	DefaultParallel = 4
)

// leaseMargin is added to the timeout to make an attempt's lease: an
// attempt is settled (one statement) well within it. Were it not, another
// process would send the event again under the same id, which a receiver
// drops; a longer margin would only delay the delivery after a crash.
const leaseMargin = 5 * time.Second

// deadlineEvery is how often deadlines are kept: a missed deadline is
// announced within seconds, and each process reads the open runs a few
// times a minute, not every round.
const deadlineEvery = 10 * time.Second

// excerptSize is the most of a webhook's answer kept with a failure.
const excerptSize = 200

// Config configures a Notifier.
type Config struct {
	// Pool is the Notifier's own pool (two connections suffice), apart
	// from the consumer's. Required.
	Pool *pgxpool.Pool
	// Webhooks are the URLs announcements go to. Defaults to none: then
	// the Notifier only keeps deadlines.
	Webhooks []Webhook
	// Secret signs every delivery (webhook-signature). Defaults to none:
	// deliveries are sent unsigned.
	Secret provider.Secret
	// ConsoleURL, when set, is the console's base URL; announcements link
	// the run's page. Defaults to none.
	ConsoleURL string
	// Deadline, when positive, gives each open run without a deadline its
	// enqueue time plus Deadline, and announces a run still open at its
	// deadline. Defaults to 0: none.
	Deadline time.Duration
	// Client sends the POSTs. Defaults to a client that follows no
	// redirect (a redirect would take the signed body elsewhere).
	Client *http.Client
	// Timeout bounds one POST. Defaults to DefaultTimeout.
	Timeout time.Duration
	// MaxAttempts is the number of attempts after which a delivery is
	// given up. Defaults to DefaultMaxAttempts.
	MaxAttempts int
	// BackoffBase and BackoffCap bound the wait before the next attempt:
	// BackoffBase × 2^(attempt-1), at most BackoffCap, equal jitter; a
	// longer Retry-After from the webhook is honoured up to BackoffCap.
	// Default to DefaultBackoffBase and DefaultBackoffCap.
	BackoffBase, BackoffCap time.Duration
	// Poll is the time between two rounds. Defaults to DefaultPoll.
	Poll time.Duration
	// Backlog is how far back a webhook is given announcements it has not
	// had. Defaults to DefaultBacklog.
	Backlog time.Duration
	// Parallel is how many deliveries are attempted at once. Defaults to
	// DefaultParallel.
	Parallel int
	// UserAgent is sent with every POST. Defaults to "reconcile".
	UserAgent string
	// Now tells the time of the signatures, of Retry-After and, when set,
	// of the outbox's statements (tests move it). Defaults to time.Now,
	// and the outbox to the database clock.
	Now func() time.Time
	// Rand draws the backoff's jitter. Defaults to math/rand/v2's Float64.
	Rand decision.Rand
	// Logger receives what happens. Defaults to discarding it.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.BackoffBase = cmp.Or(c.BackoffBase, DefaultBackoffBase)
	c.BackoffCap = cmp.Or(c.BackoffCap, DefaultBackoffCap)
	c.Poll = cmp.Or(c.Poll, DefaultPoll)
	c.Backlog = cmp.Or(c.Backlog, DefaultBacklog)
	c.Parallel = cmp.Or(c.Parallel, DefaultParallel)
	c.UserAgent = cmp.Or(c.UserAgent, "reconcile")
	if c.Client == nil {
		c.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Pool == nil:
		return errors.New("notify: Pool is required")
	case c.MaxAttempts < 1:
		return fmt.Errorf("notify: MaxAttempts %d: want at least 1", c.MaxAttempts)
	case c.BackoffCap < c.BackoffBase:
		return fmt.Errorf("notify: BackoffCap %s: want at least BackoffBase %s", c.BackoffCap, c.BackoffBase)
	case c.Deadline < 0:
		return fmt.Errorf("notify: Deadline %s: want a positive duration", c.Deadline)
	}
	return nil
}

// Notifier delivers announcements and keeps deadlines. Run it in a
// goroutine of its own; call Run, Round or Drain from one goroutine at a
// time.
type Notifier struct {
	cfg      Config
	outbox   *outbox.Deliveries
	byDest   map[string]Webhook
	dests    []outbox.Destination
	destIDs  []string
	backoff  decision.Policy
	failures *logthrottle.Logger
	// deadlinesKept is when keepDeadlines last ran; only Run's goroutine
	// (or a caller of Round) touches it.
	deadlinesKept time.Time
}

// New returns a Notifier for cfg.
func New(cfg Config) (*Notifier, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Notifier{cfg: cfg, byDest: map[string]Webhook{},
		backoff: decision.Policy{MaxAttempts: cfg.MaxAttempts, BackoffBase: cfg.BackoffBase,
			BackoffCap: cfg.BackoffCap, Jitter: decision.JitterEqual},
		failures: logthrottle.New(cfg.Logger, logthrottle.Config{Now: cfg.Now})}
	n.outbox = outbox.NewDeliveries(cfg.Pool, cfg.Now)
	for _, w := range cfg.Webhooks {
		if _, dup := n.byDest[w.dest.ID]; dup {
			continue
		}
		n.byDest[w.dest.ID] = w
		n.dests = append(n.dests, w.dest)
		n.destIDs = append(n.destIDs, w.dest.ID)
	}
	return n, nil
}

func (n *Notifier) now() time.Time {
	if n.cfg.Now != nil {
		return n.cfg.Now()
	}
	return time.Now()
}

// Run does a round every Config.Poll until ctx ends, and returns nil then.
// A round that fails is logged (throttled) and the next one tries again:
// announcing never stops the process it runs in.
func (n *Notifier) Run(ctx context.Context) error {
	t := time.NewTicker(n.cfg.Poll)
	defer t.Stop()
	for {
		if err := n.Round(ctx); err != nil && ctx.Err() == nil {
			n.failures.Fail("announcements not delivered; retrying", err)
		} else if err == nil {
			n.failures.OK("announcements not delivered; retrying", "announcements flow again")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Round keeps the deadlines (with Config.Deadline), takes up new
// announcements for the webhooks, and attempts the due deliveries, at most
// Config.Parallel at once. It returns when every attempt it started is
// settled.
func (n *Notifier) Round(ctx context.Context) error {
	_, err := n.round(ctx)
	return err
}

// round is Round, also returning how many deliveries it attempted.
func (n *Notifier) round(ctx context.Context) (int, error) {
	if now := n.now(); n.cfg.Deadline > 0 && (n.deadlinesKept.IsZero() || now.Sub(n.deadlinesKept) >= deadlineEvery) {
		if err := n.keepDeadlines(ctx); err != nil {
			return 0, err
		}
		n.deadlinesKept = now
	}
	if len(n.dests) == 0 {
		return 0, nil
	}
	if _, err := n.outbox.TakeUp(ctx, n.dests, n.cfg.Backlog); err != nil {
		return 0, err
	}
	due, err := n.outbox.Claim(ctx, n.destIDs, n.cfg.Parallel, n.cfg.Timeout+leaseMargin)
	if err != nil {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(due))
	for i, d := range due {
		wg.Go(func() { errs[i] = n.attempt(ctx, d) })
	}
	wg.Wait()
	return len(due), errors.Join(errs...)
}

// keepDeadlines gives open runs their deadline and announces each open run
// past it once, in a transaction of its own.
func (n *Notifier) keepDeadlines(ctx context.Context) error {
	if _, err := ledger.SetDeadlines(ctx, n.cfg.Pool, n.cfg.Deadline); err != nil {
		return err
	}
	var now time.Time
	if n.cfg.Now != nil {
		now = n.cfg.Now()
	}
	overdue, err := ledger.OverdueRuns(ctx, n.cfg.Pool, now)
	if err != nil || len(overdue) == 0 {
		return err
	}
	done, err := outbox.Announced(ctx, n.cfg.Pool, outbox.DeadlineMissed, overdue)
	if err != nil {
		return err
	}
	for _, run := range overdue {
		if done[run] {
			continue
		}
		var added bool
		if err := pgx.BeginFunc(ctx, n.cfg.Pool, func(tx pgx.Tx) error {
			added, err = ledger.AnnounceMissedDeadline(ctx, tx, run, now)
			return err
		}); err != nil {
			return fmt.Errorf("announce the missed deadline of run %s: %w", run, err)
		}
		if added {
			n.cfg.Logger.Warn("a run is still open at its deadline: see `reconcile status`", "run_id", run)
		}
	}
	return nil
}

// attempt POSTs one delivery and settles it: delivered on a 2xx, given up
// on 410 Gone or after the last attempt, rescheduled otherwise.
func (n *Notifier) attempt(ctx context.Context, d outbox.Delivery) error {
	w, ok := n.byDest[d.Destination]
	if !ok {
		return fmt.Errorf("claimed a delivery to unknown webhook %s", d.Destination)
	}
	log := n.cfg.Logger.With("event_id", d.Event.ID, "type", d.Event.Type, "run_id", d.Event.Run.RunID,
		"webhook", w.Target(), "attempt", d.Attempt)
	status, retryAfter, failure := n.post(ctx, w, d.Event)
	// A round cut short by shutdown still settles what it started, so the
	// delivery does not wait for its lease to end.
	settleCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	switch {
	case failure == "":
		log.Info("announcement delivered", "status", status)
		return n.outbox.Delivered(settleCtx, d, status)
	case status == http.StatusGone || d.Attempt >= n.cfg.MaxAttempts:
		log.Warn("announcement given up", "status", status, "reason", failure)
		return n.outbox.Fail(settleCtx, d, status, failure)
	}
	wait := n.backoff.Backoff(d.Attempt, n.cfg.Rand)
	if ctx.Err() != nil {
		wait = 0 // cut short by shutdown: the next process tries at once
	}
	wait = max(wait, min(retryAfter, n.cfg.BackoffCap))
	log.Warn("announcement not delivered; will retry", "status", status, "reason", failure, "retry_in", wait)
	return n.outbox.Retry(settleCtx, d, wait, status, failure)
}

// post sends e to w once. It returns the answer's status (0 for none), its
// Retry-After, and why the attempt failed ("" when it succeeded). The
// reason names the status and an excerpt of the answer, or the network
// error without the URL, which can hold a credential.
func (n *Notifier) post(ctx context.Context, w Webhook, e outbox.Event) (int, time.Duration, string) {
	body, err := Body(e, w.format, n.cfg.ConsoleURL)
	if err != nil {
		return 0, 0, err.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, "build request: " + unwrapURL(err)
	}
	sent := n.now()
	id := e.ID.String()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", n.cfg.UserAgent)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(sent.Unix(), 10))
	if n.cfg.Secret != "" {
		req.Header.Set("webhook-signature", Sign(n.cfg.Secret, id, sent, body))
	}
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			return 0, 0, "no answer within " + n.cfg.Timeout.String()
		}
		return 0, 0, unwrapURL(err)
	}
	defer resp.Body.Close()
	excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, excerptSize))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, 0, ""
	}
	retryAfter, _ := provider.ParseRetryAfter(resp.Header.Get("Retry-After"), sent)
	reason := "http " + strconv.Itoa(resp.StatusCode)
	if len(excerpt) > 0 {
		reason += ": " + string(bytes.ToValidUTF8(excerpt, []byte("?")))
	}
	return resp.StatusCode, retryAfter, reason
}

// unwrapURL returns the text of err without the URL that net/http puts
// in front of it.
func unwrapURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}

// Drain does rounds until one finds nothing due, or until within has
// passed: a process about to exit (consume --until-done) first sends what
// its last completions announced. A delivery waiting for a retry is left
// to the next process with the webhook.
func (n *Notifier) Drain(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		attempted, err := n.round(ctx)
		if err != nil || attempted == 0 || ctx.Err() != nil {
			return err
		}
	}
}
