package limiter

import (
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"
)

func TestParseHints(t *testing.T) {
	t.Parallel()
	now := t0
	tests := []struct {
		name    string
		headers map[string]string
		want    Hints
	}{
		{"none", nil, Hints{}},
		{"ietf item and policy", map[string]string{
			"RateLimit":        `"default";r=50;t=30`,
			"RateLimit-Policy": `"default";q=100;w=60`,
		}, Hints{Remaining: 50, HasRemaining: true, Reset: now.Add(30 * time.Second), Quota: 100, Window: time.Minute}},
		{"ietf most restrictive member wins", map[string]string{
			"RateLimit":        `"burst";r=90;t=10, "daily";r=0;t=3600`,
			"RateLimit-Policy": `"burst";q=100;w=10, "daily";q=5000;w=86400`,
		}, Hints{Remaining: 0, HasRemaining: true, Reset: now.Add(time.Hour), Quota: 5000, Window: 24 * time.Hour}},
		{"draft 07 dictionary", map[string]string{
			"RateLimit":        `limit=100, remaining=7, reset=5`,
			"RateLimit-Policy": `100;w=60`,
		}, Hints{Remaining: 7, HasRemaining: true, Reset: now.Add(5 * time.Second), Quota: 100, Window: time.Minute}},
		{"draft 03 separate headers", map[string]string{
			"RateLimit-Limit": "20", "RateLimit-Remaining": "3", "RateLimit-Reset": "2",
		}, Hints{Remaining: 3, HasRemaining: true, Reset: now.Add(2 * time.Second), Quota: 20}},
		{"x- reset as delta seconds", map[string]string{
			"X-RateLimit-Limit": "60", "X-RateLimit-Remaining": "10", "X-RateLimit-Reset": "12",
		}, Hints{Remaining: 10, HasRemaining: true, Reset: now.Add(12 * time.Second), Quota: 60}},
		{"x- reset as epoch seconds", map[string]string{
			"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1792807230",
		}, Hints{Remaining: 0, HasRemaining: true, Reset: time.Unix(1792807230, 0)}},
		{"x- reset as epoch milliseconds", map[string]string{
			"X-RateLimit-Reset": "1792807230500",
		}, Hints{Reset: time.UnixMilli(1792807230500)}},
		{"reset in the past ignored", map[string]string{"X-RateLimit-Reset": "1000000000"}, Hints{}},
		{"reset clamped to a day", map[string]string{"RateLimit": `"d";r=1;t=9999999`},
			Hints{Remaining: 1, HasRemaining: true, Reset: now.Add(24 * time.Hour)}},
		{"ietf overrides x-", map[string]string{
			"X-RateLimit-Remaining": "1", "RateLimit": `"default";r=40;t=4`,
		}, Hints{Remaining: 40, HasRemaining: true, Reset: now.Add(4 * time.Second)}},
		{"shopify call limit", map[string]string{"X-Shopify-Shop-Api-Call-Limit": "39/40"},
			Hints{Remaining: 1, HasRemaining: true, Quota: 40, Leak: 2}},
		{"shopify plus call limit", map[string]string{"X-Shopify-Shop-Api-Call-Limit": "12/400"},
			Hints{Remaining: 388, HasRemaining: true, Quota: 400, Leak: 20}},
		{"ietf overrides shopify", map[string]string{"X-Shopify-Shop-Api-Call-Limit": "39/40", "RateLimit": `"default";r=40;t=4`},
			Hints{Remaining: 40, HasRemaining: true, Reset: now.Add(4 * time.Second), Quota: 40}},
		{"shopify garbage ignored", map[string]string{"X-Shopify-Shop-Api-Call-Limit": "39/0"}, Hints{}},
		{"garbage ignored", map[string]string{
			"RateLimit":             `"x";r=-1;t=abc, ;;;, "unterminated`,
			"RateLimit-Policy":      `"p";q=0;w=60, "p";q=10;w=-5, "p";q=1e400;w=1`,
			"X-RateLimit-Remaining": "lots", "X-RateLimit-Reset": "NaN", "X-RateLimit-Limit": "-3",
		}, Hints{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			got := ParseHints(h, now)
			if got.Remaining != tt.want.Remaining || got.HasRemaining != tt.want.HasRemaining ||
				!got.Reset.Equal(tt.want.Reset) || got.Quota != tt.want.Quota || got.Window != tt.want.Window || got.Leak != tt.want.Leak ||
				!got.Sent.Equal(now) {
				t.Errorf("ParseHints = %+v\nwant          %+v", got, tt.want)
			}
		})
	}
}

func TestHintsRateAndExhausted(t *testing.T) {
	t.Parallel()
	now := t0
	h := Hints{Remaining: 50, HasRemaining: true, Reset: now.Add(10 * time.Second), Quota: 100, Window: 60 * time.Second}
	if r, ok := h.Rate(now); !ok || math.Abs(r-5.1) > 1e-9 {
		t.Errorf("Rate = %v %v, want (remaining+1)/reset 5.1", r, ok)
	}
	// Counted from the call the count is of: 4 more calls and the one
	// at the reset, over the second from the send.
	sent := Hints{Remaining: 4, HasRemaining: true, Reset: now.Add(800 * time.Millisecond), Sent: now.Add(-200 * time.Millisecond)}
	if r, ok := sent.Rate(now); !ok || math.Abs(r-5) > 1e-9 {
		t.Errorf("Rate from the send = %v %v, want 5", r, ok)
	}
	if r, ok := (Hints{Quota: 100, Window: time.Minute}).Rate(now); !ok || math.Abs(r-100.0/60) > 1e-9 {
		t.Errorf("Rate without remaining = %v %v, want policy rate 1.667", r, ok)
	}
	if _, ok := h.Exhausted(now); ok {
		t.Error("Exhausted with 50 remaining")
	}
	h.Remaining = 0
	if until, ok := h.Exhausted(now); !ok || !until.Equal(now.Add(10*time.Second)) {
		t.Errorf("Exhausted = %v %v, want reset time", until, ok)
	}
	if _, ok := (Hints{}).Rate(now); ok {
		t.Error("empty hints imply a rate")
	}
}

// TestShopifyCallLimitPaces drives a Shopify bucket (40 calls, leaking 2/s)
// with a caller that sends at the rate its last answer's call limit
// allows, answers arriving 50 ms after their calls: the room is spent and
// then the calls follow the leak, without a 429.
func TestShopifyCallLimitPaces(t *testing.T) {
	t.Parallel()
	for _, size := range []int64{40, 80, 400} {
		leak := float64(size) / shopifyDrain.Seconds()
		const latency = 50 * time.Millisecond
		const length = 120 * time.Second
		var level float64 // calls in the bucket
		var last time.Duration
		type answer struct {
			at   time.Duration
			used int64
		}
		var pending []answer
		hints := Hints{Remaining: size, HasRemaining: true, Quota: size, Leak: leak}
		accepted, throttled := 0, 0
		for now := time.Duration(0); now < length; {
			for len(pending) > 0 && pending[0].at <= now {
				h := http.Header{}
				h.Set("X-Shopify-Shop-Api-Call-Limit", fmt.Sprintf("%d/%d", pending[0].used, size))
				hints = ParseHints(h, t0.Add(pending[0].at))
				pending = pending[1:]
			}
			rate, ok := hints.Rate(t0.Add(now))
			if !ok || rate <= 0 {
				t.Fatalf("size %d: no rate from %+v", size, hints)
			}
			if until, ok := hints.Exhausted(t0.Add(now)); ok {
				now = until.Sub(t0)
				hints.Remaining = 1 // the wait is over; the next answer says more
				continue
			}
			now += time.Duration(float64(time.Second) / rate)
			level = math.Max(0, level-leak*(now-last).Seconds())
			last = now
			if level+1 > float64(size) {
				throttled++
				continue
			}
			level++
			accepted++
			pending = append(pending, answer{at: now + latency, used: int64(math.Ceil(level))})
		}
		most := float64(size) + leak*length.Seconds()
		t.Logf("size %d: %d accepted of at most %.0f (%.1f%%), %d throttled", size, accepted, most, 100*float64(accepted)/most, throttled)
		if throttled > 0 || float64(accepted) < 0.97*most {
			t.Errorf("size %d: %d accepted of at most %.0f, %d throttled; want >= 97%% and none", size, accepted, most, throttled)
		}
	}
}

func FuzzParseHints(f *testing.F) {
	f.Add(`"default";r=50;t=30`, `"default";q=100;w=60`, "10", "12", "60")
	f.Add(`limit=100, remaining=0, reset=5`, `100;w=60, 1000;w=3600`, "0", "1792807230", "")
	f.Add(`"a";r=1;t=1, "b";r=2;t=2`, `"\"";q=1;w=1`, "x", "1792807230500", "-1")
	f.Add(`;;,,""=;r=`, `q=;w=`, " 5 ", "1e9", "9999999999999999999999")
	f.Fuzz(func(t *testing.T, rl, policy, remaining, reset, limit string) {
		h := http.Header{}
		h.Set("RateLimit", rl)
		h.Set("RateLimit-Policy", policy)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", reset)
		h.Set("X-RateLimit-Limit", limit)
		got := ParseHints(h, t0)
		if got.Remaining < 0 || got.Quota < 0 || got.Window < 0 {
			t.Fatalf("negative field: %+v", got)
		}
		if !got.Reset.IsZero() && (!got.Reset.After(t0) || got.Reset.Sub(t0) > maxReset) {
			t.Fatalf("reset %v outside (now, now+24h]", got.Reset)
		}
		if r, ok := got.Rate(t0); ok && (r < 0 || math.IsNaN(r) || math.IsInf(r, 0)) {
			t.Fatalf("rate %v from %+v", r, got)
		}
	})
}
