package circuit

import (
	"fmt"
	"testing"
	"time"
)

// sim is a deterministic simulation of a consumer: workers take items from
// a queue, pace their calls with a limiter of rate calls/s, call a provider
// that refuses connections during an outage, and retry failed items with a
// capped exponential backoff up to maxAttempts, as `reconcile consume
// --max-attempts 3 --backoff-cap 1s` does. The breaker, when not nil, is
// asked before every call and told every outcome.
type sim struct {
	items, workers int
	rate           float64
	latency        time.Duration
	outageAt       time.Duration
	outage         time.Duration
	maxAttempts    int
	backoffBase    time.Duration
	backoffCap     time.Duration
	breaker        *Breaker
}

type simResult struct {
	matched, deadLettered int
	calls                 int // calls made
	outageCalls           int // calls started during the outage
	probes                int
	elapsed               time.Duration
}

type simItem struct {
	id       string
	attempts int
	ready    time.Duration
}

type simWorker struct {
	at    time.Duration // time of the worker's next event
	item  *simItem      // the item whose call is in flight, if any
	probe bool
	down  bool // the call in flight hit the outage
}

func (s sim) run(t *testing.T) simResult {
	t.Helper()
	queue := make([]*simItem, s.items)
	for i := range queue {
		queue[i] = &simItem{id: fmt.Sprintf("tx%04d", i)}
	}
	workers := make([]simWorker, s.workers)
	var res simResult
	var nextToken time.Duration
	interval := time.Duration(float64(time.Second) / s.rate)
	for steps := 0; ; steps++ {
		if steps > 10_000_000 {
			t.Fatal("simulation does not end")
		}
		// The worker with the earliest event goes next.
		w := -1
		for i := range workers {
			if workers[i].at >= 0 && (w < 0 || workers[i].at < workers[w].at) {
				w = i
			}
		}
		if w < 0 {
			break
		}
		wk := &workers[w]
		now := wk.at
		if it := wk.item; it != nil {
			// The call in flight ends.
			wk.item = nil
			if !wk.down {
				res.matched++
				if s.breaker != nil {
					s.breaker.Record(t0.Add(now), Event{Kind: Answered, Item: it.id, Probe: wk.probe})
				}
				continue
			}
			systemic := false
			if s.breaker != nil {
				systemic = s.breaker.Record(t0.Add(now), Event{Kind: Unreachable, Item: it.id, Cause: "connection refused", Probe: wk.probe}).Systemic
			}
			if !systemic {
				it.attempts++
				if it.attempts >= s.maxAttempts {
					res.deadLettered++
					continue
				}
				it.ready = now + min(s.backoffBase<<(it.attempts-1), s.backoffCap)
			} else {
				it.ready = now
			}
			queue = append(queue, it)
			continue
		}
		// Claim the first ready item.
		pick, earliest := -1, time.Duration(-1)
		for i, it := range queue {
			if it.ready <= now {
				pick = i
				break
			}
			if earliest < 0 || it.ready < earliest {
				earliest = it.ready
			}
		}
		if pick < 0 {
			if len(queue) == 0 {
				inFlight := false
				for i := range workers {
					inFlight = inFlight || workers[i].item != nil
				}
				if !inFlight {
					wk.at = -1 // done
					res.elapsed = max(res.elapsed, now)
					continue
				}
				wk.at = now + s.latency
				continue
			}
			wk.at = earliest
			continue
		}
		// Pace, then ask the breaker.
		start := max(now, nextToken)
		if start > now {
			wk.at = start
			continue
		}
		nextToken = start + interval
		probe := false
		if s.breaker != nil {
			switch d := s.breaker.Allow(t0.Add(now)); d.Action {
			case Wait:
				wk.at = d.Until.Sub(t0)
				continue
			case Probe:
				probe = true
				res.probes++
			}
		}
		it := queue[pick]
		queue = append(queue[:pick], queue[pick+1:]...)
		res.calls++
		down := now >= s.outageAt && now < s.outageAt+s.outage
		if down {
			res.outageCalls++
		}
		*wk = simWorker{at: now + s.latency, item: it, probe: probe, down: down}
	}
	return res
}

func TestSimulatedOutage(t *testing.T) {
	t.Parallel()
	for _, outage := range []time.Duration{30 * time.Second, 2 * time.Minute} {
		t.Run(outage.String(), func(t *testing.T) {
			t.Parallel()
			s := sim{items: 3000, workers: 16, rate: 150, latency: 10 * time.Millisecond,
				outageAt: 5 * time.Second, outage: outage, maxAttempts: 3,
				backoffBase: 50 * time.Millisecond, backoffCap: time.Second}

			// Without a circuit, the outage spends every attempt of the
			// items it meets: the dead letters a night without one saw.
			without := s.run(t)
			if without.deadLettered == 0 || without.outageCalls < 1000 {
				t.Fatalf("without a circuit: %+v; the simulation does not reproduce the outage", without)
			}

			b, err := New(Config{})
			if err != nil {
				t.Fatal(err)
			}
			s.breaker = b
			with := s.run(t)
			t.Logf("without a circuit: %+v", without)
			t.Logf("with a circuit:    %+v", with)
			if with.deadLettered != 0 || with.matched != s.items {
				t.Errorf("with a circuit: %d dead-lettered, %d of %d matched; want none and all", with.deadLettered, with.matched, s.items)
			}
			// Calls during the outage: the failures that open the circuit,
			// the calls already in flight, and the probes, each at a
			// doubling interval capped at 30s.
			maxProbes := 5 + int(outage/DefaultProbeCap) + 1
			if with.probes > maxProbes {
				t.Errorf("%d probes during a %s outage, want at most %d", with.probes, outage, maxProbes)
			}
			if bound := DefaultFailures + s.workers + maxProbes; with.outageCalls > bound {
				t.Errorf("%d calls during a %s outage, want at most %d", with.outageCalls, outage, bound)
			}
			// It resumes soon after the provider is back: within one probe
			// interval, and then at the limiter's rate.
			ideal := time.Duration(float64(s.items)/s.rate*float64(time.Second)) + outage
			if with.elapsed > ideal+DefaultProbeCap+time.Second {
				t.Errorf("finished after %s, want within %s of %s", with.elapsed, DefaultProbeCap, ideal)
			}
		})
	}
}
