package decision

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/provider"
)

func half() float64 { return 0.5 }

var (
	t0       = time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)
	expected = provider.Record{ID: "tx_1", AmountMinor: 1234, Currency: "EUR", Status: "succeeded"}
)

func ptr(b bool) *bool { return &b }

func provErr(kind provider.ErrorKind) error {
	return &provider.Error{Kind: kind, TransactionID: "tx_1", Err: errors.New("boom")}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := Policy{}.WithDefaults() // 8 attempts, 1s base, 5m cap, full jitter, 24h
	ok := func(r provider.Record) provider.Response { return provider.Response{Status: 200, Record: r} }
	st := func(code int) provider.Response { return provider.Response{Status: code, BodyExcerpt: "body"} }
	ra := func(code int, d time.Duration) provider.Response {
		return provider.Response{Status: code, RetryAfter: d, HasRetryAfter: true}
	}
	withSR := func(r provider.Response, v bool) provider.Response { r.ShouldRetry = ptr(v); return r }

	cases := []struct {
		name string
		in   Input
		want Decision
	}{
		{"200 matched", Input{Response: ok(expected), Attempt: 1},
			Decision{Action: Ack, Outcome: ledger.Matched, Status: 200, Reason: "matched"}},
		{"201 mismatched amount", Input{Response: provider.Response{Status: 201, Record: provider.Record{ID: "tx_1", AmountMinor: 1200, Currency: "EUR", Status: "succeeded"}}},
			Decision{Action: Ack, Outcome: ledger.Mismatched, Status: 201, Reason: "mismatched",
				Differences: []Difference{{"amount_minor", "1234", "1200"}}}},
		{"200 mismatched all", Input{Response: ok(provider.Record{ID: "tx_1", AmountMinor: -1, Currency: "USD", Status: "refunded"})},
			Decision{Action: Ack, Outcome: ledger.Mismatched, Status: 200, Reason: "mismatched",
				Differences: []Difference{{"amount_minor", "1234", "-1"}, {"currency", "EUR", "USD"}, {"status", "succeeded", "refunded"}}}},
		{"2xx ignores Stripe-Should-Retry", Input{Response: withSR(ok(expected), false)},
			Decision{Action: Ack, Outcome: ledger.Matched, Status: 200, Reason: "matched"}},
		{"404 missing", Input{Response: st(404), Attempt: 3},
			Decision{Action: Ack, Outcome: ledger.Missing, Status: 404, Reason: "missing"}},
		{"404 with Should-Retry false stays missing", Input{Response: withSR(st(404), false)},
			Decision{Action: Ack, Outcome: ledger.Missing, Status: 404, Reason: "missing"}},
		{"404 with Should-Retry true retried", Input{Response: withSR(st(404), true), Attempt: 1},
			Decision{Action: Retry, Status: 404, Reason: "http_404", Delay: 500 * time.Millisecond, CountsAttempt: true, Detail: "Stripe-Should-Retry: true: body"}},
		{"429 Retry-After longer than backoff", Input{Response: ra(429, 30*time.Second), Attempt: 2, Throttles: 0, Now: t0, FirstAttempt: t0.Add(-time.Hour)},
			Decision{Action: Retry, Status: 429, CountsThrottle: true, Reason: "throttled", Throttled: true, Penalty: 30 * time.Second,
				Delay: 30*time.Second + 500*time.Millisecond, Detail: "Retry-After 30s"}},
		{"429 backoff longer than Retry-After", Input{Response: ra(429, time.Second), Throttles: 5, Now: t0, FirstAttempt: t0},
			// ceiling(6) = 32s, half of it jittered = 16s, + 0.5s.
			Decision{Action: Retry, Status: 429, CountsThrottle: true, Reason: "throttled", Throttled: true, Penalty: time.Second,
				Delay: 16*time.Second + 500*time.Millisecond, Detail: "Retry-After 1s"}},
		{"429 without Retry-After: no penalty", Input{Response: st(429), Throttles: 0, Now: t0},
			Decision{Action: Retry, Status: 429, CountsThrottle: true, Reason: "throttled", Throttled: true, Delay: time.Second}},
		{"429 does not use attempts even at the maximum", Input{Response: ra(429, 2*time.Second), Attempt: 8, Now: t0, FirstAttempt: t0},
			Decision{Action: Retry, Status: 429, CountsThrottle: true, Reason: "throttled", Throttled: true, Penalty: 2 * time.Second,
				Delay: 2*time.Second + 500*time.Millisecond, Detail: "Retry-After 2s"}},
		{"429 past the throttle deadline", Input{Response: ra(429, time.Second), Throttles: 99, Now: t0, FirstAttempt: t0.Add(-24 * time.Hour)},
			Decision{Action: DeadLetter, Status: 429, CountsThrottle: true, Reason: "throttle_deadline",
				Detail: "still throttled 24h0m0s after the first attempt (deadline 24h0m0s, 100 throttles)"}},
		{"429 with Should-Retry true is still a throttle", Input{Response: withSR(ra(429, 3*time.Second), true), Now: t0},
			Decision{Action: Retry, Status: 429, CountsThrottle: true, Reason: "throttled", Throttled: true, Penalty: 3 * time.Second,
				Delay: 3*time.Second + 500*time.Millisecond, Detail: "Retry-After 3s"}},
		{"429 with Should-Retry false is permanent", Input{Response: withSR(st(429), false), Now: t0},
			Decision{Action: DeadLetter, Status: 429, CountsThrottle: true, Reason: "http_429", Detail: "Stripe-Should-Retry: false: body"}},
		{"503 first attempt", Input{Response: st(503), Attempt: 1},
			Decision{Action: Retry, Status: 503, Reason: "http_503", Delay: 500 * time.Millisecond, CountsAttempt: true, Detail: "body"}},
		{"500 fourth attempt", Input{Response: st(500), Attempt: 4},
			Decision{Action: Retry, Status: 500, Reason: "http_500", Delay: 4 * time.Second, CountsAttempt: true, Detail: "body"}},
		{"503 attempt 0 counts as 1", Input{Response: st(503)},
			Decision{Action: Retry, Status: 503, Reason: "http_503", Delay: 500 * time.Millisecond, CountsAttempt: true, Detail: "body"}},
		{"503 at max attempts", Input{Response: st(503), Attempt: 8},
			Decision{Action: DeadLetter, Status: 503, Reason: "max_attempts", Detail: "8 attempts, last: http_503: body"}},
		{"503 with Should-Retry false", Input{Response: withSR(st(503), false), Attempt: 1},
			Decision{Action: DeadLetter, Status: 503, Reason: "http_503", Detail: "Stripe-Should-Retry: false: body"}},
		{"timeout", Input{Err: provErr(provider.KindTimeout), Attempt: 2},
			Decision{Action: Retry, Reason: "timeout", Delay: time.Second, CountsAttempt: true, Detail: "boom"}},
		{"connection error at max", Input{Err: provErr(provider.KindConnection), Attempt: 9},
			Decision{Action: DeadLetter, Reason: "max_attempts", Detail: "9 attempts, last: connection: boom"}},
		{"foreign error is a connection error", Input{Err: errors.New("dial: no route"), Attempt: 1},
			Decision{Action: Retry, Reason: "connection", Delay: 500 * time.Millisecond, CountsAttempt: true, Detail: "dial: no route"}},
		{"unreadable 2xx", Input{Response: provider.Response{Status: 200, BodyExcerpt: "{"}, Err: provErr(provider.KindBadBody), Attempt: 1},
			Decision{Action: Retry, Status: 200, Reason: "bad_body", Delay: 500 * time.Millisecond, CountsAttempt: true, Detail: "boom"}},
		{"unreadable 2xx at max", Input{Response: provider.Response{Status: 200}, Err: provErr(provider.KindBadBody), Attempt: 8},
			Decision{Action: DeadLetter, Status: 200, Reason: "max_attempts", Detail: "8 attempts, last: bad_body: boom"}},
		{"unreadable 2xx with Should-Retry false", Input{Response: withSR(provider.Response{Status: 200, BodyExcerpt: "{"}, false), Err: provErr(provider.KindBadBody), Attempt: 1},
			Decision{Action: DeadLetter, Status: 200, Reason: "bad_body", Detail: "boom: {"}},
		{"oversized 2xx", Input{Response: provider.Response{Status: 200}, Err: provErr(provider.KindBodyTooLarge), Attempt: 3},
			Decision{Action: Retry, Status: 200, Reason: "body_too_large", Delay: 2 * time.Second, CountsAttempt: true, Detail: "boom"}},
		{"canceled is not an attempt", Input{Err: provErr(provider.KindCanceled), Attempt: 8},
			Decision{Action: Retry, Reason: "canceled", Detail: "boom"}},
		{"401 stops", Input{Response: st(401), Attempt: 1},
			Decision{Action: Stop, Status: 401, Reason: "http_401", Detail: "the provider refused the credentials: body"}},
		{"403 stops even with Should-Retry true", Input{Response: withSR(st(403), true), Attempt: 1},
			Decision{Action: Stop, Status: 403, Reason: "http_403", Detail: "the provider refused the credentials: body"}},
		{"400 permanent", Input{Response: st(400), Attempt: 1},
			Decision{Action: DeadLetter, Status: 400, Reason: "http_400", Detail: "body"}},
		{"422 permanent", Input{Response: st(422), Attempt: 1},
			Decision{Action: DeadLetter, Status: 422, Reason: "http_422", Detail: "body"}},
		{"409 with Should-Retry true is transient", Input{Response: withSR(st(409), true), Attempt: 2},
			Decision{Action: Retry, Status: 409, Reason: "http_409", Delay: time.Second, CountsAttempt: true, Detail: "Stripe-Should-Retry: true: body"}},
		{"301 permanent", Input{Response: st(301), Attempt: 1},
			Decision{Action: DeadLetter, Status: 301, Reason: "http_301", Detail: "body"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.in.Expected = expected
			got := Decide(p, tc.in, half)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// TestDecideSaysEachThingOnce: a dead letter after one attempt says
// "1 attempt", and the kind of a failed call appears once in its detail.
func TestDecideSaysEachThingOnce(t *testing.T) {
	t.Parallel()
	p := Policy{MaxAttempts: 1}.WithDefaults()
	got := Decide(p, Input{Response: provider.Response{Status: 200}, Err: provErr(provider.KindBadBody), Attempt: 1, Expected: expected}, half)
	if want := "1 attempt, last: bad_body: boom"; got.Detail != want {
		t.Errorf("Detail = %q, want %q", got.Detail, want)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	p := Policy{BackoffBase: time.Second, BackoffCap: time.Minute}.WithDefaults()
	ceilings := []time.Duration{1, 1, 2, 4, 8, 16, 32, 60, 60, 60}
	for attempt, c := range ceilings {
		c *= time.Second
		if got := p.ceiling(attempt); got != c {
			t.Errorf("ceiling(%d) = %v, want %v", attempt, got, c)
		}
	}
	if got := p.ceiling(1 << 30); got != time.Minute {
		t.Errorf("ceiling(huge) = %v, want the cap", got)
	}

	r := rand.New(rand.NewPCG(1, 2))
	for _, j := range []Jitter{JitterFull, JitterEqual} {
		p.Jitter = j
		for attempt := 1; attempt <= 12; attempt++ {
			c := p.ceiling(attempt)
			lo := time.Duration(0)
			if j == JitterEqual {
				lo = c / 2
			}
			var sum time.Duration
			const n = 2000
			for range n {
				d := p.Backoff(attempt, r.Float64)
				if d < lo || d >= c {
					t.Fatalf("%v Backoff(%d) = %v outside [%v, %v)", j, attempt, d, lo, c)
				}
				sum += d
			}
			// The mean sits in the middle of the range (loose bound: 10%).
			mean, mid := sum/n, (lo+c)/2
			if diff := mean - mid; diff > c/10 || diff < -c/10 {
				t.Errorf("%v Backoff(%d) mean %v, want about %v", j, attempt, mean, mid)
			}
		}
	}
	// Deterministic given the source.
	p.Jitter = JitterFull
	if a, b := p.Backoff(5, rand.New(rand.NewPCG(7, 7)).Float64), p.Backoff(5, rand.New(rand.NewPCG(7, 7)).Float64); a != b {
		t.Errorf("same seed, different delays: %v, %v", a, b)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	if err := (Policy{}).WithDefaults().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	d := Policy{}.WithDefaults()
	if d.MaxAttempts != 8 || d.BackoffBase != time.Second || d.BackoffCap != 5*time.Minute || d.Jitter != JitterFull || d.ThrottleDeadline != 24*time.Hour {
		t.Errorf("defaults = %+v", d)
	}
	bad := []struct {
		p     Policy
		field string
	}{
		{Policy{MaxAttempts: -1}, "MaxAttempts"},
		{Policy{BackoffBase: -time.Second}, "BackoffBase"},
		{Policy{BackoffBase: time.Minute, BackoffCap: time.Second}, "BackoffCap"},
		{Policy{Jitter: 7}, "Jitter"},
		{Policy{ThrottleDeadline: -time.Hour}, "ThrottleDeadline"},
	}
	for _, tc := range bad {
		err := tc.p.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.p, err, tc.field)
		}
	}
}

func TestParseJitter(t *testing.T) {
	t.Parallel()
	for _, j := range []Jitter{JitterFull, JitterEqual} {
		got, err := ParseJitter(j.String())
		if err != nil || got != j {
			t.Errorf("ParseJitter(%q) = %v, %v", j.String(), got, err)
		}
	}
	if _, err := ParseJitter("none"); err == nil {
		t.Error("ParseJitter(none) succeeded")
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	if d := Compare(expected, expected); d != nil {
		t.Errorf("Compare(same) = %v", d)
	}
	// The id is the lookup key, not a compared field; case matters.
	got := expected
	got.ID, got.Currency = "other", "eur"
	want := []Difference{{"currency", "EUR", "eur"}}
	if d := Compare(expected, got); !reflect.DeepEqual(d, want) {
		t.Errorf("Compare = %v, want %v", d, want)
	}
}
