package limiter

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// simSecond is one second of a simulated run, as the provider saw it.
type simSecond struct {
	calls, throttled int
	limit            float64
}

// simProvider is a token-bucket provider like providersim: limit(t) tokens
// per second, burst tokens, and a 429 with a whole-second Retry-After (the
// wait for one token, rounded up, at least 1 s) when the bucket is empty.
type simProvider struct {
	limit  func(elapsed time.Duration) float64
	burst  float64
	tokens float64
	last   time.Duration
}

func (p *simProvider) call(at time.Duration) (ok bool, retryAfter time.Duration) {
	p.tokens = math.Min(p.burst, p.tokens+p.limit(at)*(at-p.last).Seconds())
	p.last = at
	if p.tokens >= 1 {
		p.tokens--
		return true, 0
	}
	wait := (1 - p.tokens) / p.limit(at)
	return false, time.Duration(max(1, math.Ceil(wait))) * time.Second
}

// simulate drives the limiter's pure parts (Bucket, AIMD, curve) the way
// Shared combines them, with callers that always want a token and answers
// that come back after latency, against simProvider, on a simulated clock.
// It returns the provider's view per second.
func simulate(limit func(time.Duration) float64, providerBurst int, ceiling float64, burst int,
	latency, length time.Duration) []simSecond {
	p := &simProvider{limit: limit, burst: float64(providerBurst), tokens: float64(providerBurst)}
	a := newAIMD(ceiling, 0, DefaultDecrease, DefaultIncrease)
	c := newCurve(DefaultDecrease, DefaultRecovery)
	b := newBucket(ceiling, burst, t0)
	out := make([]simSecond, int(length/time.Second))
	for i := range out {
		out[i].limit = limit(time.Duration(i) * time.Second)
	}
	type answer struct {
		at         time.Duration
		ok         bool
		retryAfter time.Duration
	}
	var pending []answer // answers not yet back, in order
	now := time.Duration(0)
	settle := func(until time.Duration) {
		for len(pending) > 0 && pending[0].at <= until {
			ans := pending[0]
			pending = pending[1:]
			at := t0.Add(ans.at)
			if ans.ok {
				if c.rate(at) == 0 {
					a.Succeeded(at)
				}
				continue
			}
			rate := a.Rate()
			a.Throttled(at, ans.retryAfter)
			c.throttled(at, rate, at.Add(ans.retryAfter))
			b.Penalise(at, ans.retryAfter)
		}
	}
	for now < length {
		settle(now)
		at := t0.Add(now)
		if r := c.rate(at); r > 0 {
			a.Follow(at, r)
		}
		b.SetLimit(at, a.Rate(), burst)
		c.observe(at, a.Rate())
		wait := b.Reserve(at)
		if wait > 0 {
			// Answers arriving while waiting may penalise: hand the
			// token back by waiting on the updated bucket.
			if len(pending) > 0 && pending[0].at < now+wait {
				b.tokens++
				now = pending[0].at
				continue
			}
			now += wait
		}
		if now >= length {
			break
		}
		ok, ra := p.call(now)
		s := &out[int(now/time.Second)]
		s.calls++
		if !ok {
			s.throttled++
		}
		pending = append(pending, answer{at: now + latency, ok: ok, retryAfter: ra})
	}
	return out
}

// simWindow sums seconds [from, to).
func simWindow(series []simSecond, from, to int) (calls, throttled, accepted int) {
	for _, s := range series[from:min(to, len(series))] {
		calls += s.calls
		throttled += s.throttled
		accepted += s.calls - s.throttled
	}
	return calls, throttled, accepted
}

// simRecovery mirrors the changing-limit benchmark: seconds after at until
// three whole seconds average within 10% of limit with few 429s.
func simRecovery(series []simSecond, at int, limit float64, span int) int {
	for s := at; s+3 <= at+span; s++ {
		_, throttled, accepted := simWindow(series, s, s+3)
		if math.Abs(float64(accepted)/3-limit) <= 0.1*limit && float64(throttled)/3 <= 0.1*limit {
			return s - at
		}
	}
	return span
}

func formatSeries(series []simSecond) string {
	var sb strings.Builder
	for i, s := range series {
		fmt.Fprintf(&sb, "%d:%d/%d ", i, s.calls-s.throttled, s.throttled)
	}
	return sb.String()
}

func TestCurveUnknownLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []float64{5, 10, 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			series := simulate(func(time.Duration) float64 { return limit }, 5, 100, 10, 5*time.Millisecond, 60*time.Second)
			calls, throttled, accepted := simWindow(series, 10, 60)
			share, throughput := float64(throttled)/float64(calls), float64(accepted)/50/limit
			t.Logf("limit %v: 429 share %.2f%%, throughput %.1f%%\n%s", limit, 100*share, 100*throughput, formatSeries(series))
			if share > 0.03 || throughput < 0.9 {
				t.Errorf("limit %v: 429 share %.2f%% (want <= 3%%), throughput %.1f%% of the limit (want >= 90%%)", limit, 100*share, 100*throughput)
			}
		})
	}
}

func TestCurveChangingLimit(t *testing.T) {
	t.Parallel()
	const step = 40 * time.Second
	limits := []float64{20, 10, 30}
	limit := func(d time.Duration) float64 { return limits[min(int(d/step), len(limits)-1)] }
	series := simulate(limit, 5, 100, 10, 5*time.Millisecond, 3*step)
	t.Logf("%s", formatSeries(series))
	for i, l := range limits[1:] {
		at := (i + 1) * int(step/time.Second)
		if rec := simRecovery(series, at, l, int(step/time.Second)); rec > 10 {
			t.Errorf("limit %v at %d s: back within 10%% after %d s, want <= 10", l, at, rec)
		}
	}
}
