package consume

import (
	"testing"
	"time"
)

// A ShutdownWatch follows the stages of one Run of a Consumer and holds the
// end of its grace period, for tests of the shutdown order.
type ShutdownWatch struct {
	c     *Consumer
	grace chan time.Time
}

// WatchShutdown turns on c's run signals and takes over its grace timer:
// the grace ends only when EndGrace is called. Call it before Run.
func WatchShutdown(c *Consumer) *ShutdownWatch {
	c.signals = runSignals{stage: make(signal[string], 8), settled: make(signal[settledSignal], 1024)}
	w := &ShutdownWatch{c: c, grace: make(chan time.Time, 1)}
	calls := 0
	c.after = func(time.Duration) <-chan time.Time {
		calls++
		if calls == 1 {
			return w.grace // the grace, Run's first timer
		}
		return nil // the leases' end: never
	}
	return w
}

// EndGrace ends the grace period.
func (w *ShutdownWatch) EndGrace() { w.grace <- time.Now() }

// waitTimeout bounds every wait of a ShutdownWatch.
const waitTimeout = 30 * time.Second

// NextStage waits for the next stage of the shutdown Run reaches and
// returns its name: "claiming stopped", "workers done", "recorder flushed".
func (w *ShutdownWatch) NextStage(t *testing.T) string {
	t.Helper()
	select {
	case s := <-w.c.signals.stage:
		return s
	case <-time.After(waitTimeout):
		t.Fatalf("no further stage of the shutdown within %s", waitTimeout)
		return ""
	}
}

// Stages returns, without waiting, the stages reached since the last call.
func (w *ShutdownWatch) Stages() []string {
	var out []string
	for {
		select {
		case s := <-w.c.signals.stage:
			out = append(out, s)
		default:
			return out
		}
	}
}

// Settled waits for the next delivery a worker settles and returns its
// transaction id and fate (ack, retry_later, dead_letter, hand_back,
// lease_lost or stop).
func (w *ShutdownWatch) Settled(t *testing.T) (transactionID, fate string) {
	t.Helper()
	select {
	case s := <-w.c.signals.settled:
		return s.transactionID, s.fate.String()
	case <-time.After(waitTimeout):
		t.Fatalf("no delivery settled within %s", waitTimeout)
		return "", ""
	}
}
