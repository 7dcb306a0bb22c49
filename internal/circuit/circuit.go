// Package circuit decides when the consumer stops calling a provider that is
// down as a whole, rather than failing one item at a time.
//
// A [Breaker] is pure state: its methods take the time and the outcome of a
// call and return what to do next; it never sleeps, reads a clock or does
// I/O. The worker loop asks [Breaker.Allow] before each call, carries out the
// answer (call, wait until a time, or make the one probe call) and reports
// each call's outcome with [Breaker.Record]. A circuit opens after calls for
// many different items fail for reasons that are not about the item
// (connection refused or reset, DNS or TLS errors, timeouts, or a run of 5xx
// answers across distinct items), at once when the provider says the
// credentials are for another mode or account, and when the first items of
// a run are all answered "not found" in a shape that is not the provider's
// own not-found body (a wrong base URL: the night would otherwise be
// recorded as missing); while it is open, one probe call is let through at
// a backed-off interval, and a successful probe closes it.
package circuit

import (
	"cmp"
	"fmt"
	"time"
)

// Kind says what a call's outcome tells about the provider as a whole.
type Kind int

// Kinds of [Event].
const (
	// Answered: the provider answered about the item (a 4xx, an
	// unreadable body). It proves the provider reachable and ends a run of
	// failures; for the runs judged (see NotFound) it is an answer that is
	// not "not found".
	Answered Kind = iota + 1
	// Unreachable: no answer came (connection refused or reset, DNS, TLS,
	// a timeout). Such failures across Config.Failures distinct items in a
	// row open the circuit.
	Unreachable
	// ServerError: a 5xx answer. One item's 5xx while others succeed is
	// about the item; 5xx answers for Config.ServerErrors distinct items
	// in a row open the circuit.
	ServerError
	// Ignored: the outcome says nothing about the provider (the caller
	// gave up, the process is stopping). It changes no state.
	Ignored
	// Found: the provider answered with the item's record, or with its own
	// not-found body (the profile's missing rule recognised the body). It
	// is Answered, and it proves the base URL and the credentials right for
	// the item's run.
	Found
	// NotFound: a 404 (or a missing answer) that no body rule of the
	// profile recognised as the provider's own: a route-not-found page
	// looks the same. It is Answered; while a run of at least
	// Config.NotFoundRun items has not been proven, it is suspect: the
	// caller holds the item (Verdict.Hold), and the run's first
	// Config.NotFoundRun distinct items all answered so open the circuit
	// (see runs.go for the rules).
	NotFound
	// WrongAccount: the provider said the credentials are for another mode
	// or account than the object (Stripe's test key asking for a live
	// object). It opens the circuit at once: nothing can be found with
	// them.
	WrongAccount
	// Busy: the provider answered, but not about the item (a throttle, a
	// lock, refused credentials). It is Answered for the failure streaks
	// and no evidence about a run.
	Busy
)

// String returns the kind as a word.
func (k Kind) String() string {
	switch k {
	case Answered:
		return "answered"
	case Unreachable:
		return "unreachable"
	case ServerError:
		return "server_error"
	case Ignored:
		return "ignored"
	case Found:
		return "found"
	case NotFound:
		return "not_found"
	case WrongAccount:
		return "wrong_account"
	case Busy:
		return "busy"
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// Event is the outcome of one call, as reported to [Breaker.Record].
type Event struct {
	// Kind classifies the outcome; see [Classify].
	Kind Kind
	// Item identifies the item the call was for (a transaction id or an
	// idempotency key): failures count once per distinct item.
	Item string
	// Cause is a short description of the failure ("connection refused",
	// "http 503"), kept for the warning. Empty for Answered.
	Cause string
	// Probe is true when the call was the probe that [Breaker.Allow]
	// asked for. Only a probe's outcome closes or re-opens an open
	// circuit; late outcomes of calls started before it opened are
	// counted but change nothing.
	Probe bool
	// Retry is true when the call retried an item that failed before. Its
	// 5xx is weak evidence: a wave of transient failures rescheduled
	// together can make every call in flight such a retry, with no fresh
	// item to show the provider healthy. So only 5xx answers to items'
	// first calls count towards Config.ServerErrors; an unreachable retry
	// counts like any other call.
	Retry bool
	// Run identifies the item's run, and RunItems is the run's number of
	// items: the first answers of a run are judged together (Found,
	// NotFound).
	Run      string
	RunItems int
}

// Action is what [Breaker.Allow] tells the caller to do.
type Action int

// Actions of [Decision].
const (
	// Call: the circuit is closed; call the provider (at the limiter's
	// rate).
	Call Action = iota + 1
	// Wait: the circuit is open; make no call before Decision.Until, then
	// ask again.
	Wait
	// Probe: the circuit is open and this caller makes the one probe call;
	// report its outcome with Event.Probe set.
	Probe
)

// String returns the action as a word.
func (a Action) String() string {
	switch a {
	case Call:
		return "call"
	case Wait:
		return "wait"
	case Probe:
		return "probe"
	default:
		return fmt.Sprintf("Action(%d)", int(a))
	}
}

// Decision is the answer of [Breaker.Allow].
type Decision struct {
	Action Action
	// Until is, for Wait, the earliest time at which to ask again.
	Until time.Time
}

// Change is how an [Event] changed the circuit, for logging and metrics.
type Change int

// Changes returned by [Breaker.Record].
const (
	// Unchanged: the circuit stays as it was.
	Unchanged Change = iota
	// Opened: the circuit was closed and is now open.
	Opened
	// Closed: a probe succeeded; the circuit is closed again.
	Closed
	// ProbeFailed: the probe failed; the circuit stays open with a longer
	// interval before the next probe.
	ProbeFailed
)

// String returns the change as a word.
func (c Change) String() string {
	switch c {
	case Unchanged:
		return "unchanged"
	case Opened:
		return "opened"
	case Closed:
		return "closed"
	case ProbeFailed:
		return "probe_failed"
	default:
		return fmt.Sprintf("Change(%d)", int(c))
	}
}

// Verdict is the answer of [Breaker.Record].
type Verdict struct {
	// Change says how the circuit changed.
	Change Change
	// Systemic is true when the event's failure is blamed on the provider
	// as a whole (the circuit is open after it): the caller must not count
	// the attempt against the item's maximum, and reschedules it without
	// using up its failure budget. False for Answered events and for
	// failures while the circuit is closed, which keep the item policy.
	Systemic bool
	// Hold is true for a NotFound answer among a run's first items, while
	// the run is neither proven nor stopped: the caller records nothing
	// about the item and asks again after HoldFor (from ProbeBase,
	// doubling to ProbeCap, at most ten times), without counting an
	// attempt, by when the run's other first answers have proven it (and
	// the answer is the item's) or opened the circuit.
	Hold    bool
	HoldFor time.Duration
}

// Defaults of [Config].
const (
	DefaultFailures     = 5
	DefaultServerErrors = 10
	DefaultProbeBase    = time.Second
	DefaultProbeCap     = 30 * time.Second
)

// Config configures a [Breaker].
type Config struct {
	// Failures is the number of distinct items whose calls must fail with
	// Unreachable in a row (no Answered between) to open the circuit.
	// Defaults to 5.
	Failures int
	// ServerErrors is the number of distinct items that must get a 5xx in
	// a row (no Answered between) to open the circuit. Defaults to 10.
	ServerErrors int
	// ProbeBase is the wait between opening and the first probe; it
	// doubles after each failed probe. Defaults to 1s.
	ProbeBase time.Duration
	// ProbeCap caps the wait between probes, and is how long a probe may
	// stay unanswered before another is allowed. Defaults to 30s.
	ProbeCap time.Duration
	// NotFoundRun is the number of distinct items of a run, its first
	// answered, that must all be NotFound to open the circuit; runs of
	// fewer items are not judged, and a Found answer, or that many items
	// answered not all NotFound, proves a run. A held item is asked again
	// after ProbeBase, doubling to ProbeCap. 0 turns the rule off.
	// Defaults to 0: the caller takes the number from the provider's
	// profile (profile.DefaultStopAfterNotFound).
	NotFoundRun int
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	c.Failures = cmp.Or(c.Failures, DefaultFailures)
	c.ServerErrors = cmp.Or(c.ServerErrors, DefaultServerErrors)
	c.ProbeBase = cmp.Or(c.ProbeBase, DefaultProbeBase)
	c.ProbeCap = cmp.Or(c.ProbeCap, DefaultProbeCap)
	return c
}

func (c Config) validate() error {
	switch {
	case c.Failures < 1:
		return fmt.Errorf("circuit: Config.Failures %d: want at least 1", c.Failures)
	case c.ServerErrors < 1:
		return fmt.Errorf("circuit: Config.ServerErrors %d: want at least 1", c.ServerErrors)
	case c.ProbeBase <= 0:
		return fmt.Errorf("circuit: Config.ProbeBase %s: want > 0", c.ProbeBase)
	case c.ProbeCap < c.ProbeBase:
		return fmt.Errorf("circuit: Config.ProbeCap %s: want at least ProbeBase (%s)", c.ProbeCap, c.ProbeBase)
	case c.NotFoundRun < 0:
		return fmt.Errorf("circuit: Config.NotFoundRun %d: want 0 (off) or more", c.NotFoundRun)
	}
	return nil
}

// Breaker is the circuit of one provider. Create it with [New]; it is not
// safe for concurrent use (the caller holds a mutex around it, as it holds
// one around any shared state of its workers).
type Breaker struct {
	cfg Config

	// Closed state: the current run of failures, by distinct item.
	unreachable map[string]struct{}
	serverError map[string]struct{}

	// runs judges the first answers of each run. Kept across opening and
	// closing: the evidence is the run's, not the circuit's.
	runs *runJudge

	open       bool
	why        Kind // the kind of failure that opened it
	openedAt   time.Time
	cause      string        // what opened it, then the latest failure's cause
	interval   time.Duration // wait before the next probe
	nextProbe  time.Time     // earliest time of the next probe
	probing    bool          // a probe is out
	probeSince time.Time     // when the probe went out
	probes     int           // probes since opening
	failures   int           // failed outcomes recorded since opening
}

// New returns a closed Breaker.
func New(cfg Config) (*Breaker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Breaker{cfg: cfg, unreachable: map[string]struct{}{}, serverError: map[string]struct{}{}, runs: newRunJudge(cfg)}, nil
}

// Allow says what the caller may do at now: Call when the circuit is
// closed; when it is open, Probe for exactly one caller once the probe
// interval has passed (or the previous probe went unanswered for ProbeCap),
// and Wait until the next probe time for everyone else.
func (b *Breaker) Allow(now time.Time) Decision {
	if !b.open {
		return Decision{Action: Call}
	}
	if b.probing && now.Sub(b.probeSince) >= b.cfg.ProbeCap {
		b.probing = false // the probe's outcome was lost; allow another
	}
	if !b.probing && !now.Before(b.nextProbe) {
		b.probing, b.probeSince = true, now
		b.probes++
		return Decision{Action: Probe}
	}
	until := b.nextProbe
	if b.probing {
		until = b.probeSince.Add(b.cfg.ProbeCap)
		if next := now.Add(b.interval); next.Before(until) {
			until = next
		}
	}
	return Decision{Action: Wait, Until: until}
}

// Record takes the outcome of a call that ended at now and returns how the
// circuit changed and whether the failure is the provider's.
func (b *Breaker) Record(now time.Time, ev Event) Verdict {
	if ev.Kind == Ignored {
		if ev.Probe && b.open {
			b.probing = false // let another caller probe
		}
		return Verdict{}
	}
	switch ev.Kind {
	case Found:
		b.runs.prove(ev.Run)
	case Answered:
		b.runs.answered(ev)
	}
	if b.open {
		return b.recordOpen(now, ev)
	}
	switch ev.Kind {
	case Answered, Found, Busy:
		clear(b.unreachable)
		clear(b.serverError)
		return Verdict{}
	case NotFound:
		clear(b.unreachable)
		clear(b.serverError)
		switch j, wait, cause := b.runs.notFound(ev); j {
		case stop:
			b.trip(now, NotFound, cause)
			return Verdict{Change: Opened, Systemic: true}
		case hold:
			return Verdict{Hold: true, HoldFor: wait}
		}
		return Verdict{}
	case WrongAccount:
		b.trip(now, WrongAccount, ev.Cause)
		return Verdict{Change: Opened, Systemic: true}
	case Unreachable:
		b.unreachable[ev.Item] = struct{}{}
		if len(b.unreachable) >= b.cfg.Failures {
			b.trip(now, Unreachable, ev.Cause)
			return Verdict{Change: Opened, Systemic: true}
		}
	case ServerError:
		if ev.Retry {
			return Verdict{}
		}
		b.serverError[ev.Item] = struct{}{}
		if len(b.serverError) >= b.cfg.ServerErrors {
			b.trip(now, ServerError, ev.Cause)
			return Verdict{Change: Opened, Systemic: true}
		}
	}
	return Verdict{}
}

func (b *Breaker) recordOpen(now time.Time, ev Event) Verdict {
	failed := ev.Kind != Answered && ev.Kind != Found && ev.Kind != Busy
	if ev.Kind == NotFound {
		// A legitimate missing item of a proven run proves the provider
		// back; a suspect one is the outage's.
		failed = b.runs.suspect(ev)
	}
	if failed {
		b.cause = cmp.Or(ev.Cause, b.cause)
		b.failures++
	}
	if !ev.Probe {
		// A call started before the circuit opened: its failure is the
		// outage's, and a late success proves nothing about now.
		return Verdict{Systemic: failed}
	}
	b.probing = false
	if !failed {
		b.reset()
		return Verdict{Change: Closed}
	}
	b.interval = min(2*b.interval, b.cfg.ProbeCap)
	b.nextProbe = now.Add(b.interval)
	return Verdict{Change: ProbeFailed, Systemic: true}
}

func (b *Breaker) trip(now time.Time, why Kind, cause string) {
	b.open, b.why, b.openedAt, b.cause = true, why, now, cause
	b.interval = b.cfg.ProbeBase
	b.nextProbe = now.Add(b.interval)
	b.probing, b.probes, b.failures = false, 0, 0
	clear(b.unreachable)
	clear(b.serverError)
}

func (b *Breaker) reset() {
	*b = Breaker{cfg: b.cfg, unreachable: b.unreachable, serverError: b.serverError, runs: b.runs}
	clear(b.unreachable)
	clear(b.serverError)
}

// State is a snapshot of a [Breaker], for status, metrics and logs.
type State struct {
	// Open is true while the circuit is open.
	Open bool
	// Why is the kind of failure that opened it: Unreachable, ServerError,
	// NotFound (a run's first items all not found in a strange shape) or
	// WrongAccount; 0 when closed.
	Why Kind
	// OpenedAt is when the circuit last opened; zero when closed.
	OpenedAt time.Time
	// Cause is the failure that opened the circuit, or the latest one
	// since; empty when closed.
	Cause string
	// NextProbe is the earliest time of the next probe; zero when closed.
	NextProbe time.Time
	// Probes is the number of probes let through since the circuit opened.
	Probes int
	// Failures counts the failed outcomes (probes and late calls) recorded
	// since the circuit opened.
	Failures int
}

// State returns a snapshot of b.
func (b *Breaker) State() State {
	if !b.open {
		return State{}
	}
	return State{Open: true, Why: b.why, OpenedAt: b.openedAt, Cause: b.cause, NextProbe: b.nextProbe, Probes: b.probes, Failures: b.failures}
}
