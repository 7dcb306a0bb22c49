package main

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/providersim"
)

// scenario is one benchmark with its figures.
type scenario struct {
	name    string
	about   string
	spec    spec
	figures func(result) []figure
	write   func(dir string, r result) error // optional files
	// multi, when set, runs the scenario instead of spec (two providers).
	multi func(ctx context.Context, srv *server, o options) ([]figure, error)
	// named runs the scenario only when it is named, not with all (it
	// takes minutes).
	named bool
}

func scenarioNames() []string {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name)
	}
	return names
}

func atMost(limit float64) func(float64) bool  { return func(v float64) bool { return v <= limit } }
func atLeast(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }

// changingTitle is the title of the changing-limit plot.
const changingTitle = "changing limit: 20 -> 10 -> 30 calls/s, consumer ceiling 100/s"

// changeEvery is the length of each step of the changing-limit schedule.
const changeEvery = 40 * time.Second

// efficiencyScenario is one of the limit-discovery scenarios: the provider's
// bucket (its burst the schedule's highest rate, one second of it) follows
// sched, the consumer is told a ceiling three times the highest rate, and
// the figures are the efficiency (accepted calls ÷ the most the provider's
// bucket could accept in the run: its burst plus its rate over the time),
// the 429 share after the first 10 s and the time to within 10% of each new
// limit.
func efficiencyScenario(name, sched string, top float64, changes []int, length time.Duration) scenario {
	return efficiencyVariant(name, sched, top, changes, length, 1, 0)
}

// efficiencyVariant is efficiencyScenario with processes consumer
// processes sharing the limit (their workers split between them) and, when
// window is set, a fixed-window limit advertised in the IETF RateLimit
// fields instead of the bucket (the most it could accept is then its quota
// per window, without a burst).
func efficiencyVariant(name, sched string, top float64, changes []int, length time.Duration, processes int, fixedWindow time.Duration) scenario {
	secs := int(length / time.Second)
	concurrency := 8
	if top > 250 {
		concurrency = 16
	}
	about := fmt.Sprintf("simulator %s (burst %g), consumer ceiling %g/s, %d s", sched, top, 3*top, secs)
	if fixedWindow > 0 {
		about = fmt.Sprintf("simulator %s in fixed windows of %v (IETF RateLimit fields), consumer ceiling %g/s, %d s", sched, fixedWindow, 3*top, secs)
	}
	if processes > 1 {
		about += fmt.Sprintf(", %d processes of %d workers", processes, max(1, concurrency/processes))
		concurrency = max(1, concurrency/processes)
	}
	return scenario{
		name:  "efficiency-" + name,
		about: about,
		spec: spec{items: int(top * float64(secs) * 1.2), simLimit: sched, rate: 3 * top, burst: max(10, int(top/5)),
			concurrency: concurrency, duration: length, processes: processes, simWindow: fixedWindow},
		figures: func(r result) []figure {
			burst := top
			if fixedWindow > 0 {
				burst = 0
			}
			calls, throttled, _ := window(r.sim.Series, 10, secs)
			fs := []figure{
				{name: "efficiency", value: efficiency(r.sim.Series, burst, secs), unit: "%", target: ">= 85..95"},
				{name: "429 share after 10 s", value: 100 * ratio(throttled, calls), unit: "%", target: "<= 0.5"},
			}
			if fixedWindow > 0 {
				fs = append(fs, figure{name: "429s", value: float64(r.sim.Throttled), unit: "", target: "0"})
			}
			for i, at := range changes {
				end := secs
				if i+1 < len(changes) {
					end = changes[i+1]
				}
				var limit float64
				for _, s := range r.sim.Series {
					if s.Second == int64(at) {
						limit = s.Limit
					}
				}
				fs = append(fs, figure{name: fmt.Sprintf("within 10%% of %g/s after", limit), value: recovery(r.sim.Series, at, limit, end-at), unit: "s"})
			}
			return fs
		},
		write: func(dir string, r result) error {
			if len(changes) == 0 {
				return nil
			}
			pngPath := filepath.Join(dir, "efficiency-"+name+".png")
			title := fmt.Sprintf("limit discovery: %s calls/s, consumer ceiling %g/s", strings.ReplaceAll(name, "-", " -> "), 3*top)
			if err := plotSeries(pngPath, r.sim.Series, r.estimate, title); err != nil {
				return err
			}
			fmt.Printf("  wrote %s\n", pngPath)
			return nil
		},
	}
}

// shapeScenario runs the real consumer against a provider of one shape of
// the limit discovery's matrix (internal/limiter, TestDiscoveryMatrix):
// steady at rate, the consumer told told×rate with a burst of toldBurst.
// The efficiency is the accepted calls over the most the provider could
// accept in the run (a bucket's burst plus its rate over the time; a
// window's quota in each window).
func shapeScenario(name string, rate float64, told float64, toldBurst int, shape providersim.Config) scenario {
	const length = 60 * time.Second
	secs := int(length / time.Second)
	about := fmt.Sprintf("simulator %g/s as %s, consumer told %g/s (burst %d), %d s", rate, shapeAbout(shape), told*rate, toldBurst, secs)
	concurrency := 8
	if rate > 250 {
		concurrency = 16
	}
	// Little's law: rate × latency calls are in flight at the provider's
	// rate, each holding a worker; twice that leaves the workers' own time
	// (claiming, recording) room, so the workers never cap the rate the
	// limiter is measured at.
	latency := shape.Latency.Fixed + shape.Latency.Jitter
	concurrency = max(concurrency, int(math.Ceil(2*rate*latency.Seconds())))
	return scenario{
		name:  "shape-" + name,
		about: about,
		spec: spec{items: int(rate * float64(secs) * 1.2), simLimit: fmt.Sprint(rate), rate: told * rate, burst: toldBurst,
			concurrency: concurrency, duration: length, shape: &shape},
		figures: func(r result) []figure {
			burst := 0.0
			if shape.Window == 0 {
				burst = float64(shape.Burst)
			}
			calls, throttled, _ := window(r.sim.Series, 10, secs)
			target := ">= 95"
			if told == 1 {
				target = ">= 99"
			}
			return []figure{
				{name: "efficiency", value: efficiency(r.sim.Series, burst, secs), unit: "%", target: target},
				{name: "429 share after 10 s", value: 100 * ratio(throttled, calls), unit: "%", target: "<= 1"},
				{name: "provider calls per accepted call", value: ratio(r.sim.Calls, r.sim.Calls-r.sim.Throttled), unit: "", target: "<= 1.02"},
				{name: "limiter round trips per call", value: ratio(r.lim.RoundTrips, r.sim.Calls), unit: ""},
			}
		},
	}
}

// shapeAbout names a simulator's limit shape.
func shapeAbout(c providersim.Config) string {
	var s string
	switch c.Algorithm {
	case providersim.TokenBucket:
		s = fmt.Sprintf("a token bucket of %d", c.Burst)
	case providersim.LeakyBucket:
		s = fmt.Sprintf("a leaky bucket of %d", c.Burst)
	case providersim.SlidingLog:
		s = fmt.Sprintf("a sliding log of %v", c.Window)
	case providersim.FixedWindow:
		s = fmt.Sprintf("fixed windows of %v", c.Window)
	}
	if c.RateLimitHeaders {
		s += " with IETF RateLimit fields"
	}
	switch c.RetryAfter {
	case providersim.RetryAfterExact:
		s += ", Retry-After exact"
	case providersim.RetryAfterAbsent:
		s += ", no Retry-After"
	default:
		s += fmt.Sprintf(", Retry-After whole seconds (at least %v)", max(c.RetryAfterMin, time.Second))
	}
	if c.Latency.Fixed > 0 {
		s += fmt.Sprintf(", latency %v", c.Latency.Fixed)
	}
	return s
}

// shapeScenarios is the subset of the discovery matrix the real consumer
// runs: the bucket sizes the old discovery did worst on (20 and 2 calls at
// 200/s), a sliding log, fixed windows of a second with and without the
// IETF RateLimit fields, a leaky bucket, an exact Retry-After, none, a
// latency (with a bucket of 20 and of a second of the rate), and the
// exact limit told (of a bucket, and of a window with fields).
func shapeScenarios() []scenario {
	bucket := func(b int) providersim.Config {
		return providersim.Config{Algorithm: providersim.TokenBucket, Burst: b}
	}
	exact := bucket(20)
	exact.RetryAfter = providersim.RetryAfterExact
	absent := bucket(20)
	absent.RetryAfter = providersim.RetryAfterAbsent
	slow := bucket(20)
	slow.Latency = providersim.Latency{Fixed: 200 * time.Millisecond}
	slowSecond := bucket(200)
	slowSecond.Latency = slow.Latency
	window := providersim.Config{Algorithm: providersim.FixedWindow, Window: time.Second}
	fields := window
	fields.RateLimitHeaders = true
	return []scenario{
		shapeScenario("bucket-20", 200, 3, 40, bucket(20)),
		shapeScenario("bucket-2", 200, 3, 40, bucket(2)),
		shapeScenario("bucket-200", 200, 3, 40, bucket(200)),
		shapeScenario("bucket-20-exact", 200, 3, 40, exact),
		shapeScenario("bucket-20-absent", 200, 3, 40, absent),
		shapeScenario("bucket-20-latency-200ms", 200, 3, 40, slow),
		shapeScenario("bucket-200-latency-200ms", 200, 3, 40, slowSecond),
		shapeScenario("log-1s", 200, 3, 40, providersim.Config{Algorithm: providersim.SlidingLog, Window: time.Second}),
		shapeScenario("window-1s", 200, 3, 40, window),
		shapeScenario("window-1s-ietf", 200, 3, 40, fields),
		shapeScenario("leaky-20s", 20, 3, 10, providersim.Config{Algorithm: providersim.LeakyBucket, Burst: 400}),
		shapeScenario("told-bucket-20", 200, 1, 20, bucket(20)),
		// Paced at the rate, a window's quota is never exceeded; a
		// burst could be.
		shapeScenario("told-window-1s-ietf", 200, 1, 1, fields),
	}
}

func scenarios() []scenario {
	return append(shapeScenarios(), []scenario{
		efficiencyScenario("20", "20", 20, nil, 40*time.Second),
		efficiencyScenario("200", "200", 200, nil, 40*time.Second),
		efficiencyScenario("500", "500", 500, nil, 40*time.Second),
		efficiencyScenario("60-240", "60@0s,240@20s", 240, []int{20}, 40*time.Second),
		efficiencyScenario("240-60", "240@0s,60@20s", 240, []int{20}, 40*time.Second),
		efficiencyScenario("100-40-150", "100@0s,40@10s,150@25s", 150, []int{10, 25}, 45*time.Second),
		efficiencyVariant("200-4-processes", "200", 200, nil, 40*time.Second, 4, 0),
		efficiencyVariant("ietf-200", "200", 200, nil, 40*time.Second, 1, 10*time.Second),
		{
			name:  "known-limit",
			about: "limiter at 50/s (burst 5) for 60 s, unlimited simulator",
			spec:  spec{items: 3000, rate: 50, burst: 5, concurrency: 8},
			figures: func(r result) []figure {
				n := len(r.calls)
				achieved := 0.0
				if n > 1 {
					achieved = float64(n-1) / (r.calls[n-1] - r.calls[0]).Seconds()
				}
				return []figure{
					{name: "achieved rate (first to last call)", value: achieved, unit: "calls/s", target: "49.5..50.5",
						check: func(v float64) bool { return math.Abs(v-50) <= 0.5 }},
					{name: "max calls in any 1 s window", value: float64(maxInWindow(r.calls, time.Second)), unit: "calls",
						target: "<= 55 (rate+burst)", check: atMost(55)},
					{name: "elapsed", value: r.elapsed.Seconds(), unit: "s", target: "(60 s floor)"},
					{name: "provider calls", value: float64(r.sim.Calls), unit: "calls"},
					{name: "items terminal", value: float64(r.done), unit: "items", target: "3000", check: atLeast(3000)},
				}
			},
		},
		{
			name:  "unknown-limit",
			about: "simulator at 20/s (burst 5, Retry-After), consumer ceiling 100/s (burst 10), 60 s",
			spec:  spec{items: 2000, simLimit: "20", simBurst: 5, rate: 100, burst: 10, concurrency: 8, duration: 60 * time.Second},
			figures: func(r result) []figure {
				calls, throttled, accepted := window(r.sim.Series, 10, 60)
				secs := 50.0
				return []figure{
					{name: "429 share after 10 s", value: 100 * ratio(throttled, calls), unit: "%", target: "<= 3", check: atMost(3)},
					{name: "throughput after 10 s", value: float64(accepted) / secs, unit: "calls/s", target: ">= 18 (90% of 20)", check: atLeast(18)},
					{name: "429s after 10 s", value: float64(throttled), unit: "calls"},
					{name: "429s in the first 10 s", value: float64(r.sim.Throttled - throttled), unit: "calls"},
				}
			},
		},
		{
			name:  "changing-limit",
			about: "simulator 20 -> 10 -> 30/s (burst 5), 40 s each; consumer ceiling 100/s (burst 10)",
			spec: spec{items: 3000, simLimit: fmt.Sprintf("20@0s,10@%s,30@%s", changeEvery, 2*changeEvery), simBurst: 5,
				rate: 100, burst: 10, concurrency: 8, duration: 3 * changeEvery},
			figures: func(r result) []figure {
				var fs []figure
				for i, limit := range []float64{20, 10, 30} {
					at := i * int(changeEvery/time.Second)
					rec := recovery(r.sim.Series, at, limit, int(changeEvery/time.Second))
					target, check := "<= 10", atMost(10)
					if i == 0 {
						target, check = "(start, informational)", nil
					}
					fs = append(fs, figure{name: fmt.Sprintf("within 10%% of %g/s after", limit), value: rec, unit: "s", target: target, check: check})
				}
				for i, limit := range []float64{20, 10, 30} {
					from := i*int(changeEvery/time.Second) + 10
					calls, throttled, accepted := window(r.sim.Series, from, from+30)
					fs = append(fs, figure{name: fmt.Sprintf("accepted/s, 429 %%: %g/s step", limit), value: float64(accepted) / 30, unit: "calls/s",
						target: fmt.Sprintf("429s %.1f%%", 100*ratio(throttled, calls))})
				}
				return fs
			},
			write: func(dir string, r result) error {
				csvPath := filepath.Join(dir, "changing-limit.csv")
				if err := writeSeriesCSV(csvPath, r.sim.Series); err != nil {
					return err
				}
				pngPath := filepath.Join(dir, "changing-limit.png")
				if err := plotSeries(pngPath, r.sim.Series, r.estimate, changingTitle); err != nil {
					return err
				}
				fmt.Printf("  wrote %s and %s\n", csvPath, pngPath)
				return nil
			},
		},
		{
			name:  "transient",
			about: "1% of calls answered 503, simulator and limiter at 100/s (burst 10), 3000 items",
			spec:  spec{items: 3000, simLimit: "100", simBurst: 10, transientRate: 0.01, rate: 100, burst: 10, concurrency: 8},
			figures: func(r result) []figure {
				return []figure{
					{name: "provider calls per item", value: float64(r.sim.Calls) / float64(r.spec.items), unit: "calls", target: "<= 1.05", check: atMost(1.05)},
					{name: "503s", value: float64(r.sim.ByStatus[503]), unit: "calls"},
					{name: "429s", value: float64(r.sim.Throttled), unit: "calls"},
					{name: "items terminal", value: float64(r.done), unit: "items", target: "3000", check: atLeast(3000)},
				}
			},
		},
		{
			name:  "throughput",
			about: "no limit, zero-latency simulator, 8 workers, 20000 items",
			spec:  spec{items: 20000, rate: 1e6, burst: 100000, concurrency: 8},
			figures: func(r result) []figure {
				return []figure{
					{name: "items per second end to end", value: float64(r.done) / r.elapsed.Seconds(), unit: "items/s", target: ">= 2000", check: atLeast(2000)},
					{name: "elapsed", value: r.elapsed.Seconds(), unit: "s"},
					{name: "limiter round trips per call", value: ratio(r.lim.RoundTrips, r.sim.Calls), unit: ""},
					{name: "CPU per item: this process", value: float64(r.goCPU.Microseconds()) / float64(max(r.done, 1)), unit: "µs"},
					{name: "CPU per item: server backends", value: float64(r.pgCPU.Microseconds()) / float64(max(r.done, 1)), unit: "µs"},
					{name: "items terminal", value: float64(r.done), unit: "items", target: "20000", check: atLeast(20000)},
				}
			},
		},
		providersScenario("providers", "two providers at 40/s and 160/s (each simulator enforcing its own with a burst of 10; the consumer told each, burst 5), 4000 items split 1:3, 8 workers",
			providersSpec{items: 4000, slowRate: 40, fastRate: 160, concurrency: 8, processes: 1}),
		providersScenario("providers-outage", "as providers, the slow provider's port closed from 5 s to 15 s (connection refused)",
			providersSpec{items: 4000, slowRate: 40, fastRate: 160, concurrency: 8, processes: 1, outageAt: 5 * time.Second, outage: 10 * time.Second}),
		providersScenario("providers-4proc", "as providers, four consumers (own pools, limiter handles and clients) of 4 workers each",
			providersSpec{items: 4000, slowRate: 40, fastRate: 160, concurrency: 4, processes: 4}),
		providersScenario("providers-4proc-outage", "as providers-4proc, with the slow provider's 10 s outage",
			providersSpec{items: 4000, slowRate: 40, fastRate: 160, concurrency: 4, processes: 4, outageAt: 5 * time.Second, outage: 10 * time.Second}),
		listScenario("list-18k", 18000, 5, 60),
		withNamed(listScenario("list-1m", 1_000_000, 100, 0)),
		withNamed(lookupNightScenario("lookup-18k", 18000, 5)),
		{
			name:  "nightly",
			about: "18000 items, simulator and limiter at 500/s (burst 50)",
			spec:  spec{items: 18000, simLimit: "500", simBurst: 50, rate: 500, burst: 50, concurrency: 16},
			figures: func(r result) []figure {
				return []figure{
					{name: "elapsed", value: r.elapsed.Seconds(), unit: "s", target: "<= 37.08 (36 s +3%)", check: atMost(36 * 1.03)},
					{name: "provider calls per item", value: float64(r.sim.Calls) / float64(r.spec.items), unit: "calls"},
					{name: "429s", value: float64(r.sim.Throttled), unit: "calls"},
					{name: "items terminal", value: float64(r.done), unit: "items", target: "18000", check: atLeast(18000)},
				}
			},
		},
	}...)
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// efficiency is the percentage of the most the provider could accept in
// the first secs seconds that it accepted: its bucket's burst (0 for a
// window or a log) plus its rate over each second.
func efficiency(series []providersim.Second, burst float64, secs int) float64 {
	supply, accepted := burst, int64(0)
	for _, s := range series {
		if s.Second < int64(secs) {
			supply += s.Limit
			accepted += s.Calls - s.Throttled
		}
	}
	return 100 * float64(accepted) / supply
}

// window sums the series over seconds [from, to).
func window(series []providersim.Second, from, to int) (calls, throttled, accepted int64) {
	for _, s := range series {
		if s.Second >= int64(from) && s.Second < int64(to) {
			calls += s.Calls
			throttled += s.Throttled
			accepted += s.Calls - s.Throttled
		}
	}
	return calls, throttled, accepted
}

// recovery returns how many seconds after second `at` the accepted calls
// first averaged within 10% of limit over three whole seconds (the window
// starting then), with 429s at most 10% of the limit; span (the step's
// length) when they never did.
func recovery(series []providersim.Second, at int, limit float64, span int) float64 {
	for s := at; s+3 <= at+span; s++ {
		_, throttled, accepted := window(series, s, s+3)
		avg := float64(accepted) / 3
		if math.Abs(avg-limit) <= 0.1*limit && float64(throttled)/3 <= 0.1*limit {
			return float64(s - at)
		}
	}
	return float64(span)
}

// listScenario is a night of items payments in list mode, the simulator
// holding 1% more records than the file (unexpected) and allowing rate
// calls/s (burst one second of it), the consumer told the limit. target,
// when set, is the most seconds from enqueue to completion.
func listScenario(name string, items int, rate float64, target float64) scenario {
	return scenario{
		name: name,
		about: fmt.Sprintf("list mode: %d payments plus 1%% unexpected at the provider, simulator and limiter at %g/s (burst %g), 8 workers",
			items, rate, rate),
		spec: spec{items: items, simLimit: fmt.Sprint(rate), simBurst: int(rate), rate: rate, burst: int(rate), concurrency: 8,
			mode: consume.ModeList, unexpected: 0.01},
		figures: func(r result) []figure {
			items := r.spec.items
			took := figure{name: "enqueue to completion", value: r.took.Seconds(), unit: "s"}
			if target > 0 {
				took.target, took.check = fmt.Sprintf("<= %g", target), atMost(target)
			}
			lookupFloor := float64(items) / rate
			return []figure{
				took,
				{name: "provider calls per item", value: float64(r.sim.Calls) / float64(items), unit: "calls", target: "< 0.05", check: func(v float64) bool { return v < 0.05 }},
				{name: "list pages", value: float64(r.sim.ListCalls), unit: "calls"},
				{name: "lookups", value: float64(r.sim.Calls - r.sim.ListCalls), unit: "calls"},
				{name: "429s", value: float64(r.sim.Throttled), unit: "calls"},
				{name: "unexpected recorded", value: float64(r.unexpected), unit: "items", target: fmt.Sprint(items / 100), check: atLeast(float64(items / 100))},
				{name: "items terminal", value: float64(r.done), unit: "items", target: fmt.Sprint(items + items/100), check: atLeast(float64(items + items/100))},
				{name: "lookup mode's floor (items / rate)", value: lookupFloor, unit: "s"},
				{name: "heap in use: peak", value: float64(r.heapMax) / (1 << 20), unit: "MiB"},
				{name: "heap in use: end", value: float64(r.heapEnd) / (1 << 20), unit: "MiB"},
				// The simulator's records and the day's file are in the
				// heap before the run starts; what the consumer holds shows
				// as the live heap's change while it runs.
				{name: "live heap at 10% of the run", value: float64(liveAt(r.live, 0.1)) / (1 << 20), unit: "MiB"},
				{name: "live heap at 50% of the run", value: float64(liveAt(r.live, 0.5)) / (1 << 20), unit: "MiB"},
				{name: "live heap at 90% of the run", value: float64(liveAt(r.live, 0.9)) / (1 << 20), unit: "MiB"},
			}
		},
	}
}

// lookupNightScenario is list-18k's night checked in lookup mode, for
// comparison: every payment is asked for by its id, so the run takes at
// least items / rate seconds and the provider's unexpected records are
// never seen.
func lookupNightScenario(name string, items int, rate float64) scenario {
	s := listScenario(name, items, rate, 0)
	s.about = fmt.Sprintf("lookup mode: %d payments plus 1%% unexpected at the provider, simulator and limiter at %g/s (burst %g), 8 workers",
		items, rate, rate)
	s.spec.mode = consume.ModeLookup
	s.figures = func(r result) []figure {
		items := r.spec.items
		floor := float64(items) / rate
		return []figure{
			{name: "enqueue to completion", value: r.took.Seconds(), unit: "s"},
			{name: "floor (items / rate)", value: floor, unit: "s"},
			{name: "provider calls per item", value: float64(r.sim.Calls) / float64(items), unit: "calls"},
			{name: "lookups", value: float64(r.sim.Calls - r.sim.ListCalls), unit: "calls"},
			{name: "429s", value: float64(r.sim.Throttled), unit: "calls"},
			{name: "unexpected recorded", value: float64(r.unexpected), unit: "items"},
			{name: "items terminal", value: float64(r.done), unit: "items", target: fmt.Sprint(items), check: atLeast(float64(items))},
			{name: "heap in use: peak", value: float64(r.heapMax) / (1 << 20), unit: "MiB"},
			{name: "heap in use: end", value: float64(r.heapEnd) / (1 << 20), unit: "MiB"},
		}
	}
	return s
}

// withNamed marks s to run only when named.
func withNamed(s scenario) scenario { s.named = true; return s }
