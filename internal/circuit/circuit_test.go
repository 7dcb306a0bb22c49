package circuit

import (
	"fmt"
	"testing"
	"time"
)

var t0 = time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)

// step is one call of a Breaker in a table test: Allow when ev is nil,
// Record otherwise, at t0+at.
type step struct {
	at   time.Duration
	ev   *Event
	want string // Allow: "call", "wait@<offset>", "probe"; Record: "<change>" or "<change> systemic"
}

func allow(at time.Duration, want string) step { return step{at: at, want: want} }

func record(at time.Duration, k Kind, item string, probe bool, want string) step {
	return step{at: at, ev: &Event{Kind: k, Item: item, Cause: k.String() + " cause", Probe: probe}, want: want}
}

// inRun is record for an item of run r of n items, as the lookups of a
// run report their answers.
func inRun(at time.Duration, k Kind, item, r string, n int, probe bool, want string) step {
	st := record(at, k, item, probe, want)
	st.ev.Run, st.ev.RunItems = r, n
	return st
}

func runSteps(t *testing.T, cfg Config, steps []step) *Breaker {
	t.Helper()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runStepsOn(t, b, steps)
	return b
}

// runStepsOn runs steps on an existing Breaker.
func runStepsOn(t *testing.T, b *Breaker, steps []step) {
	t.Helper()
	for i, s := range steps {
		now := t0.Add(s.at)
		var got string
		if s.ev == nil {
			d := b.Allow(now)
			got = d.Action.String()
			if d.Action == Wait {
				got += "@" + d.Until.Sub(t0).String()
			}
		} else {
			v := b.Record(now, *s.ev)
			got = v.Change.String()
			if v.Systemic {
				got += " systemic"
			}
			if v.Hold {
				got += " hold@" + v.HoldFor.String()
			}
		}
		if got != s.want {
			t.Fatalf("step %d (at %s): got %q, want %q", i, s.at, got, s.want)
		}
	}
}

func TestBreaker(t *testing.T) {
	t.Parallel()
	small := Config{Failures: 3, ServerErrors: 3, ProbeBase: time.Second, ProbeCap: 4 * time.Second}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"closed calls", small, []step{
			allow(0, "call"),
			record(0, Answered, "a", false, "unchanged"),
			allow(time.Millisecond, "call"),
		}},
		{"one item failing again and again does not open", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(1, Unreachable, "a", false, "unchanged"),
			record(2, Unreachable, "a", false, "unchanged"),
			record(3, ServerError, "a", false, "unchanged"),
			allow(4, "call"),
		}},
		{"an answer between failures ends the run", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(1, Unreachable, "b", false, "unchanged"),
			record(2, Answered, "c", false, "unchanged"),
			record(3, Unreachable, "d", false, "unchanged"),
			record(4, Unreachable, "e", false, "unchanged"),
			allow(5, "call"),
		}},
		{"failures across distinct items open", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Unreachable, "c", false, "opened systemic"),
			allow(0, "wait@1s"),
			record(10*time.Millisecond, Unreachable, "d", false, "unchanged systemic"), // in flight before it opened
			allow(500*time.Millisecond, "wait@1s"),
		}},
		{"5xx across distinct items open", small, []step{
			record(0, ServerError, "a", false, "unchanged"),
			record(0, ServerError, "b", false, "unchanged"),
			record(0, ServerError, "c", false, "opened systemic"),
		}},
		{"5xx and connection failures count apart", small, []step{
			record(0, ServerError, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, ServerError, "c", false, "unchanged"),
			record(0, Unreachable, "d", false, "unchanged"),
			record(0, Unreachable, "e", false, "opened systemic"),
		}},
		{"one probe at a time, backed off, closed by a success", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Unreachable, "c", false, "opened systemic"),
			allow(time.Second, "probe"),
			allow(time.Second, "wait@2s"), // another worker: waits for the probe, at most one interval
			record(time.Second+time.Millisecond, Unreachable, "d", true, "probe_failed systemic"),
			allow(2*time.Second, "wait@3.001s"), // the interval doubled to 2s
			allow(3*time.Second+time.Millisecond, "probe"),
			record(3*time.Second+2*time.Millisecond, Unreachable, "d", true, "probe_failed systemic"),
			allow(7*time.Second+2*time.Millisecond, "probe"), // 4s
			record(7*time.Second+3*time.Millisecond, Unreachable, "d", true, "probe_failed systemic"),
			allow(11*time.Second+3*time.Millisecond, "probe"), // capped at 4s
			record(11*time.Second+4*time.Millisecond, Answered, "d", true, "closed"),
			allow(11*time.Second+5*time.Millisecond, "call"),
			// Closed again with a clean slate: two failures do not reopen it.
			record(12*time.Second, Unreachable, "x", false, "unchanged"),
			record(12*time.Second, Unreachable, "y", false, "unchanged"),
			allow(12*time.Second, "call"),
		}},
		{"a late success while open proves nothing", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Unreachable, "c", false, "opened systemic"),
			record(time.Millisecond, Answered, "d", false, "unchanged"),
			allow(2*time.Millisecond, "wait@1s"),
		}},
		{"a lost probe is replaced after ProbeCap", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Unreachable, "c", false, "opened systemic"),
			allow(time.Second, "probe"),
			allow(4*time.Second, "wait@5s"),
			allow(5*time.Second, "probe"),
		}},
		{"an ignored probe lets another caller probe", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Unreachable, "c", false, "opened systemic"),
			allow(time.Second, "probe"),
			record(time.Second, Ignored, "d", true, "unchanged"),
			allow(time.Second, "probe"),
		}},
		{"ignored outcomes change nothing", small, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Ignored, "c", false, "unchanged"),
			record(0, Unreachable, "d", false, "opened systemic"),
		}},
		{"defaults: five distinct items", Config{}, []step{
			record(0, Unreachable, "a", false, "unchanged"),
			record(0, Unreachable, "b", false, "unchanged"),
			record(0, Unreachable, "c", false, "unchanged"),
			record(0, Unreachable, "d", false, "unchanged"),
			record(0, Unreachable, "e", false, "opened systemic"),
			allow(0, "wait@1s"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, tt.cfg, tt.steps)
		})
	}
}

// TestNotFoundRun: a run's first answers all "not found" in a shape that is
// not the provider's own stop the calls as an outage does; one Found
// answer proves the run; small runs and proven runs are not judged; a
// wrong mode or account opens at once.
func TestNotFoundRun(t *testing.T) {
	t.Parallel()
	cfg := Config{Failures: 3, ServerErrors: 3, ProbeBase: time.Second, ProbeCap: 4 * time.Second, NotFoundRun: 3}
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"three distinct first items not found open it", cfg, []step{
			inRun(0, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
			inRun(1, NotFound, "a", "r1", 100, false, "unchanged hold@2s"), // the same item again waits longer
			inRun(2, NotFound, "b", "r1", 100, false, "unchanged hold@1s"),
			inRun(3, Busy, "x", "r1", 100, false, "unchanged"), // a 429 says nothing of the item
			inRun(4, NotFound, "c", "r1", 100, false, "opened systemic"),
			allow(5, "wait@1.000000004s"),
			inRun(6, NotFound, "d", "r1", 100, false, "unchanged systemic"), // in flight when it opened
			allow(time.Second+4, "probe"),
			inRun(time.Second+4, NotFound, "a", "r1", 100, true, "probe_failed systemic"),
			allow(3*time.Second+4, "probe"),
			inRun(3*time.Second+4, Found, "e", "r1", 100, true, "closed"),
			// Proven: its not-found items are the provider's answer now.
			inRun(3*time.Second+5, NotFound, "a", "r1", 100, false, "unchanged"),
		}},
		{"a found answer proves the run", cfg, []step{
			inRun(0, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
			inRun(1, Found, "b", "r1", 100, false, "unchanged"),
			inRun(2, NotFound, "a", "r1", 100, false, "unchanged"),
			inRun(3, NotFound, "c", "r1", 100, false, "unchanged"),
			inRun(4, NotFound, "d", "r1", 100, false, "unchanged"),
			// Another run is judged on its own.
			inRun(5, NotFound, "a", "r2", 100, false, "unchanged hold@1s"),
		}},
		{"answers that are not all not found prove the run", cfg, []step{
			inRun(0, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
			inRun(1, Answered, "b", "r1", 100, false, "unchanged"), // a 400: an answer about the item
			inRun(2, NotFound, "c", "r1", 100, false, "unchanged"), // the third distinct answer: proven
			inRun(3, NotFound, "a", "r1", 100, false, "unchanged"),
			inRun(4, NotFound, "d", "r1", 100, false, "unchanged"),
		}},
		{"an item is held at most ten times, waiting up to the probe cap", cfg, []step{
			inRun(0, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
			inRun(1, NotFound, "a", "r1", 100, false, "unchanged hold@2s"),
			inRun(2, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(3, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(4, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(5, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(6, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(7, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(8, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(9, NotFound, "a", "r1", 100, false, "unchanged hold@4s"),
			inRun(10, NotFound, "a", "r1", 100, false, "unchanged"), // recorded as answered
			inRun(11, NotFound, "b", "r1", 100, false, "unchanged hold@1s"),
		}},
		{"a run smaller than the rule is not judged", cfg, []step{
			inRun(0, NotFound, "a", "small", 2, false, "unchanged"),
			inRun(1, NotFound, "b", "small", 2, false, "unchanged"),
			inRun(2, NotFound, "c", "small", 2, false, "unchanged"),
		}},
		{"the rule off", Config{Failures: 3, ServerErrors: 3, ProbeBase: time.Second, ProbeCap: 4 * time.Second}, []step{
			inRun(0, NotFound, "a", "r1", 100, false, "unchanged"),
			inRun(1, NotFound, "b", "r1", 100, false, "unchanged"),
			inRun(2, NotFound, "c", "r1", 100, false, "unchanged"),
		}},
		{"not found answers end a run of failures", cfg, []step{
			inRun(0, Unreachable, "a", "r1", 100, false, "unchanged"),
			inRun(1, Unreachable, "b", "r1", 100, false, "unchanged"),
			inRun(2, NotFound, "c", "r1", 100, false, "unchanged hold@1s"),
			inRun(3, Unreachable, "d", "r1", 100, false, "unchanged"),
			inRun(4, Unreachable, "e", "r1", 100, false, "unchanged"),
		}},
		{"the evidence outlives a close", cfg, []step{
			inRun(0, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
			inRun(1, NotFound, "b", "r1", 100, false, "unchanged hold@1s"),
			inRun(2, NotFound, "c", "r1", 100, false, "opened systemic"),
			allow(time.Second+2, "probe"),
			inRun(time.Second+2, Busy, "x", "r1", 100, true, "closed"),               // a 429 closes it...
			inRun(time.Second+3, NotFound, "a", "r1", 100, false, "opened systemic"), // ...the run's evidence reopens it
		}},
		{"a legitimate missing item of a proven run closes it", cfg, []step{
			inRun(0, Found, "p", "old", 100, false, "unchanged"),
			inRun(1, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
			inRun(2, NotFound, "b", "r1", 100, false, "unchanged hold@1s"),
			inRun(3, NotFound, "c", "r1", 100, false, "opened systemic"),
			allow(time.Second+3, "probe"),
			inRun(time.Second+3, NotFound, "q", "old", 100, true, "closed"),
		}},
		{"wrong mode or account opens at once", cfg, []step{
			inRun(0, WrongAccount, "a", "r1", 100, false, "opened systemic"),
			allow(time.Second, "probe"),
			inRun(time.Second, WrongAccount, "b", "r1", 100, true, "probe_failed systemic"),
			allow(3*time.Second, "probe"),
			inRun(3*time.Second, Found, "b", "r1", 100, true, "closed"),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, tc.cfg, tc.steps)
		})
	}
	b, _ := New(cfg)
	runStepsOn(t, b, []step{
		inRun(0, NotFound, "a", "r1", 100, false, "unchanged hold@1s"),
		inRun(0, NotFound, "b", "r1", 100, false, "unchanged hold@1s"),
		inRun(0, NotFound, "c", "r1", 100, false, "opened systemic"),
	})
	if st := b.State(); st.Why != NotFound || st.Cause != "the first 3 items of run r1 were all answered not found, none in the provider's own not-found shape: not_found cause" {
		t.Errorf("State() = %+v", st)
	}
	if _, err := New(Config{NotFoundRun: -1}); err == nil {
		t.Error("NotFoundRun -1 accepted")
	}
}

func TestBreakerState(t *testing.T) {
	t.Parallel()
	b := runSteps(t, Config{Failures: 2}, []step{
		record(0, Unreachable, "a", false, "unchanged"),
		record(time.Second, Unreachable, "b", false, "opened systemic"),
		allow(2*time.Second, "probe"),
		record(2*time.Second, Unreachable, "c", true, "probe_failed systemic"),
	})
	got := b.State()
	want := State{Open: true, Why: Unreachable, OpenedAt: t0.Add(time.Second), Cause: "unreachable cause", NextProbe: t0.Add(4 * time.Second), Probes: 1, Failures: 1}
	if got != want {
		t.Errorf("State() = %+v, want %+v", got, want)
	}
	runStepsOn(t, b, []step{allow(4*time.Second, "probe"), record(4*time.Second, Answered, "c", true, "closed")})
	if got := b.State(); got != (State{}) {
		t.Errorf("State() after closing = %+v, want zero", got)
	}
}

// TestRetriesOfFailedItemsDoNotOpen: when the calls in flight are all
// retries of items that each failed before (a wave of transient 503s
// rescheduled together, late in a run), their 5xx answers are the items'
// own; 5xx answers on items' first calls, or unreachable calls, still open.
func TestRetriesOfFailedItemsDoNotOpen(t *testing.T) {
	t.Parallel()
	retry := func(at time.Duration, item, want string) step {
		return step{at: at, ev: &Event{Kind: ServerError, Item: item, Cause: "http 503", Retry: true}, want: want}
	}
	var steps []step
	for i := range 12 {
		steps = append(steps, retry(time.Duration(i)*time.Millisecond, fmt.Sprintf("r%d", i), "unchanged"))
	}
	for i := range 3 {
		steps = append(steps, record(time.Second, ServerError, fmt.Sprintf("f%d", i), false, "unchanged"))
	}
	steps = append(steps, record(time.Second, ServerError, "f3", false, "opened systemic"))
	runSteps(t, Config{ServerErrors: 4}, steps)

	// A retry that cannot reach the provider is no item's fault.
	runSteps(t, Config{Failures: 2}, []step{
		{at: 0, ev: &Event{Kind: Unreachable, Item: "a", Cause: "connection refused", Retry: true}, want: "unchanged"},
		{at: 0, ev: &Event{Kind: Unreachable, Item: "b", Cause: "connection refused", Retry: true}, want: "opened systemic"},
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Failures: -1},
		{ServerErrors: -2},
		{ProbeBase: -time.Second},
		{ProbeBase: time.Minute, ProbeCap: time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}
