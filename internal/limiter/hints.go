package limiter

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxReset bounds how far in the future a header may place the reset of a
// quota window; later values are clamped to it.
const maxReset = 24 * time.Hour

// Hints is what a provider's response headers say about its rate limit. The
// zero value means "no hint".
type Hints struct {
	// Remaining is the number of requests the provider will still accept
	// before Reset. Meaningful only when HasRemaining is true.
	Remaining int64
	// HasRemaining reports whether the headers gave Remaining.
	HasRemaining bool
	// Reset is when the current quota window ends; zero when unknown.
	Reset time.Time
	// Quota is the number of requests allowed per Window (RateLimit-Policy
	// q, or X-RateLimit-Limit); 0 when unknown.
	Quota int64
	// Window is the length of the quota window (RateLimit-Policy w); 0 when
	// unknown.
	Window time.Duration
	// Leak is the rate (per second) at which a leaky bucket of Quota calls
	// drains, Remaining being its room (Shopify's call limit); 0 when the
	// quota is not a leaky bucket.
	Leak float64
	// Sent is when the call these hints answer was sent: Remaining counts
	// the calls the provider still accepts after it, the calls sent since
	// (in flight when the answer arrives) included.
	Sent time.Time
}

// shopifyDrain is how long a full Shopify bucket takes to drain: its size
// over its leak rate is 20 s on every plan (40 calls at 2/s, 80 at 4/s, 400
// at 20/s).
const shopifyDrain = 20 * time.Second

// leakMargin is the room, as a share of a leaky bucket's size (at least one
// call), at which the rate settles at the leak: spending the rest of the
// room is what brings the bucket there, and keeping that much of it free
// absorbs the jitter of calls in flight.
const leakMargin = 0.05

// Rate returns the request rate (per second) the hints allow at now: for a
// leaky bucket, its leak plus its room beyond leakMargin spent over its
// drain time (so the bucket fills towards the margin and then the calls
// follow the leak); else, when Remaining and Reset are both known, the pace
// at which Remaining more calls after the answered one are sent before the
// reset and the one after them at it: (Remaining+1)/(Reset-Sent). Counted
// from the call that the count is of (now when Sent is unknown), it spends
// a fixed window exactly by its reset whatever share of it has passed,
// where Remaining/(Reset-now) would read every window's later answers as a
// lower rate than its earlier ones (and keeps a token bucket whose reset is
// when it is full again about half full, at its rate); else Quota/Window.
// ok is false when the hints imply no rate.
func (h Hints) Rate(now time.Time) (rate float64, ok bool) {
	from := h.sentBy(now)
	switch {
	case h.Leak > 0 && h.HasRemaining && h.Quota > 0:
		margin := math.Max(1, leakMargin*float64(h.Quota))
		room := float64(h.Remaining) - margin
		return math.Max(h.Leak/2, h.Leak*(1+room/float64(h.Quota))), true
	case h.HasRemaining && h.Reset.After(from):
		return float64(h.Remaining+1) / h.Reset.Sub(from).Seconds(), true
	case h.Quota > 0 && h.Window > 0:
		return float64(h.Quota) / h.Window.Seconds(), true
	}
	return 0, false
}

// sentBy is when the answered call was sent, as known at now: Sent, or now
// when Sent is unknown or later.
func (h Hints) sentBy(now time.Time) time.Time {
	if h.Sent.IsZero() || h.Sent.After(now) {
		return now
	}
	return h.Sent
}

// Exhausted reports whether the provider said no request will be accepted
// before the window resets, and when that is.
func (h Hints) Exhausted(now time.Time) (until time.Time, ok bool) {
	if h.Leak > 0 && h.HasRemaining && h.Remaining == 0 {
		// A full leaky bucket has room again when one call has leaked.
		return now.Add(time.Duration(float64(time.Second) / h.Leak)), true
	}
	if h.HasRemaining && h.Remaining == 0 && h.Reset.After(now) {
		return h.Reset, true
	}
	return time.Time{}, false
}

// ParseHints reads the rate-limit headers of the answer to a call sent at
// now (Sent; delta-second resets count from it). It understands the IETF
// httpapi-ratelimit-headers drafts (`RateLimit: "default";r=50;t=30` with
// `RateLimit-Policy: "default";q=100;w=60`; the older `RateLimit:
// limit=100, remaining=50, reset=30`; `RateLimit-Limit`, `-Remaining`,
// `-Reset`) and the common `X-RateLimit-Limit`, `-Remaining` and `-Reset`
// (reset as delta seconds, epoch seconds or epoch milliseconds), and
// Shopify's `X-Shopify-Shop-Api-Call-Limit: 39/40` (calls used of a leaky
// bucket's size, which drains in shopifyDrain: Remaining, Quota and Leak).
// When several policies are listed the most restrictive wins; the IETF
// headers win over the X- ones. Malformed values are ignored, resets are
// clamped to 24 hours ahead. ParseHints is pure and never panics.
func ParseHints(h http.Header, now time.Time) Hints {
	out := Hints{Sent: now}
	// Legacy X- headers first, so the IETF headers override them.
	if v, ok := headerInt(h, "X-RateLimit-Remaining"); ok {
		out.Remaining, out.HasRemaining = v, true
	}
	if v, ok := headerInt(h, "X-RateLimit-Limit"); ok && v > 0 {
		out.Quota = v
	}
	if v, ok := headerNumber(h, "X-RateLimit-Reset"); ok {
		out.Reset = resetTime(v, now, true)
	}
	if v, ok := headerInt(h, "RateLimit-Remaining"); ok {
		out.Remaining, out.HasRemaining = v, true
	}
	if v, ok := headerInt(h, "RateLimit-Limit"); ok && v > 0 {
		out.Quota, out.Window = v, 0
	}
	if v, ok := headerNumber(h, "RateLimit-Reset"); ok {
		out.Reset = resetTime(v, now, false)
	}
	if used, size, ok := parseCallLimit(h.Get("X-Shopify-Shop-Api-Call-Limit")); ok {
		out.Remaining, out.HasRemaining, out.Quota = max(0, size-used), true, size
		out.Leak = float64(size) / shopifyDrain.Seconds()
	}
	if q, w, ok := parsePolicy(h.Values("RateLimit-Policy")); ok {
		out.Quota, out.Window, out.Leak = q, w, 0
	}
	if r, t, ok := parseRateLimit(h.Values("RateLimit")); ok {
		out.Remaining, out.HasRemaining, out.Leak = r, true, 0
		out.Reset = resetTime(t, now, false)
	}
	return out
}

// parseCallLimit reads Shopify's `used/size`.
func parseCallLimit(v string) (used, size int64, ok bool) {
	u, sz, found := strings.Cut(v, "/")
	if !found {
		return 0, 0, false
	}
	a, okA := number(u)
	b, okB := number(sz)
	if !okA || !okB || a != math.Trunc(a) || b != math.Trunc(b) || b < 1 {
		return 0, 0, false
	}
	return int64(math.Min(a, math.MaxInt64/2)), int64(math.Min(b, math.MaxInt64/2)), true
}

// resetTime turns a reset value into an instant: delta seconds, or (when
// epochs are allowed) epoch seconds or milliseconds. Values in the past give
// the zero time; values beyond maxReset are clamped.
func resetTime(v float64, now time.Time, epochs bool) time.Time {
	var at time.Time
	switch {
	case epochs && v >= 1e12:
		at = time.UnixMilli(int64(math.Min(v, math.MaxInt64/2)))
	case epochs && v >= 1e9:
		at = time.Unix(int64(math.Min(v, math.MaxInt64/2)), 0)
	default:
		if v > maxReset.Seconds() {
			v = maxReset.Seconds()
		}
		at = now.Add(time.Duration(v * float64(time.Second)))
	}
	if !at.After(now) {
		return time.Time{}
	}
	if at.Sub(now) > maxReset {
		return now.Add(maxReset)
	}
	return at
}

// headerInt returns a header's value as a non-negative integer.
func headerInt(h http.Header, name string) (int64, bool) {
	v, ok := headerNumber(h, name)
	if !ok || v != math.Trunc(v) {
		return 0, false
	}
	return int64(math.Min(v, math.MaxInt64/2)), true
}

// headerNumber returns the first list member of a header as a non-negative
// finite number.
func headerNumber(h http.Header, name string) (float64, bool) {
	vs := h.Values(name)
	if len(vs) == 0 {
		return 0, false
	}
	members := splitOutsideQuotes(vs[0], ',')
	if len(members) == 0 {
		return 0, false
	}
	// Old drafts allow `100, 100;w=60`: the first member is the number.
	first := splitOutsideQuotes(members[0], ';')
	if len(first) == 0 {
		return 0, false
	}
	return number(first[0])
}

// number parses a non-negative finite decimal.
func number(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 32 {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// member is one list member of a structured header: its bare item and its
// parameters. A dictionary member `key=value` has an empty item and the pair
// as a parameter.
type member struct {
	item   string
	params map[string]string
}

// parseList splits the values of a list or dictionary header into members,
// leniently: anything it cannot read is skipped.
func parseList(values []string) []member {
	var out []member
	for _, v := range values {
		for _, raw := range splitOutsideQuotes(v, ',') {
			parts := splitOutsideQuotes(raw, ';')
			if len(parts) == 0 {
				continue
			}
			m := member{params: map[string]string{}}
			for i, p := range parts {
				key, value, hasValue := strings.Cut(p, "=")
				key = strings.ToLower(strings.TrimSpace(key))
				if i == 0 && !hasValue {
					m.item = strings.Trim(key, `"`)
					continue
				}
				if key != "" && hasValue {
					m.params[key] = strings.TrimSpace(value)
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// parseRateLimit reads the RateLimit header and returns the remaining quota
// and seconds to reset of its most restrictive member.
func parseRateLimit(values []string) (remaining int64, reset float64, ok bool) {
	best := math.Inf(1)
	consider := func(r int64, t float64) {
		rate := float64(r) / math.Max(t, 1)
		if !ok || rate < best || (rate == best && t > reset) {
			remaining, reset, best, ok = r, t, rate, true
		}
	}
	var legacyR, legacyT float64
	var legacyHasR, legacyHasT bool
	for _, m := range parseList(values) {
		r, hasR := intParam(m.params, "r")
		t, hasT := number(m.params["t"])
		if hasR {
			consider(r, t*boolFloat(hasT))
			continue
		}
		if v, has := number(m.params["remaining"]); has && v == math.Trunc(v) {
			legacyR, legacyHasR = v, true
		}
		if v, has := number(m.params["reset"]); has {
			legacyT, legacyHasT = v, true
		}
	}
	if legacyHasR {
		consider(int64(math.Min(legacyR, math.MaxInt64/2)), legacyT*boolFloat(legacyHasT))
	}
	return remaining, reset, ok
}

// parsePolicy reads RateLimit-Policy and returns the most restrictive quota
// and window.
func parsePolicy(values []string) (quota int64, window time.Duration, ok bool) {
	best := math.Inf(1)
	for _, m := range parseList(values) {
		q, hasQ := intParam(m.params, "q")
		if !hasQ {
			// Draft 07 and earlier: `100;w=60`.
			if v, has := number(m.item); has && v == math.Trunc(v) {
				q, hasQ = int64(math.Min(v, math.MaxInt64/2)), true
			}
		}
		w, hasW := number(m.params["w"])
		if !hasQ || q <= 0 || !hasW || w <= 0 {
			continue
		}
		w = math.Min(w, maxReset.Seconds())
		if rate := float64(q) / w; rate < best {
			best, quota, window, ok = rate, q, time.Duration(w*float64(time.Second)), true
		}
	}
	return quota, window, ok
}

func intParam(params map[string]string, key string) (int64, bool) {
	v, ok := number(params[key])
	if !ok || v != math.Trunc(v) {
		return 0, false
	}
	return int64(math.Min(v, math.MaxInt64/2)), true
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// splitOutsideQuotes splits s at sep, ignoring separators inside double
// quotes, and drops empty parts.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	inQuotes, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case escaped:
			escaped = false
		case inQuotes && c == '\\':
			escaped = true
		case c == '"':
			inQuotes = !inQuotes
		case !inQuotes && c == sep:
			if p := strings.TrimSpace(s[start:i]); p != "" {
				out = append(out, p)
			}
			start = i + 1
		}
	}
	if p := strings.TrimSpace(s[start:]); p != "" {
		out = append(out, p)
	}
	return out
}
