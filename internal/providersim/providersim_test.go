package providersim

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/provider"
)

// clock is a settable clock for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type bundle struct {
	sim    *Server
	srv    *httptest.Server
	client *provider.Client
	clock  *clock
}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	b := &bundle{clock: newClock()}
	if cfg.Now == nil {
		cfg.Now = b.clock.Now
	}
	sim, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	b.sim = sim
	b.srv = httptest.NewServer(sim)
	t.Cleanup(b.srv.Close)
	b.client, err = provider.New(provider.Config{BaseURL: b.srv.URL, Token: cfg.Token, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	return b
}

func (b *bundle) get(t *testing.T, id, key string) (provider.Response, error) {
	t.Helper()
	return b.client.Get(t.Context(), provider.Lookup{TransactionID: id, IdempotencyKey: key})
}

// dataset returns n records with a few awkward ids among them.
func dataset(n int) []provider.Record {
	recs := []provider.Record{
		{ID: "a/b", AmountMinor: 1, Currency: "EUR", Status: "succeeded"},
		{ID: "100%?x=1", AmountMinor: 2, Currency: "USD", Status: "refunded"},
		{ID: `päy "ment"`, AmountMinor: 3, Currency: "SEK", Status: "failed"},
	}
	statuses := []string{"succeeded", "succeeded", "succeeded", "refunded", "failed"}
	for i := range n - len(recs) {
		recs = append(recs, provider.Record{
			ID:          fmt.Sprintf("tx_%06d", i),
			AmountMinor: int64(100 + i*7),
			Currency:    currencies[i%3],
			Status:      statuses[i%len(statuses)],
		})
	}
	return recs
}

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	ok := []struct {
		in   string
		want Schedule
		str  string
	}{
		{"", nil, "none"},
		{"0", nil, "none"},
		{"none", nil, "none"},
		{"20", Schedule{{0, 20}}, "20@0s"},
		{"20@0s,10@30s,30@60s", Schedule{{0, 20}, {30 * time.Second, 10}, {time.Minute, 30}}, "20@0s,10@30s,30@1m0s"},
		{" 2.5@0s , none@1m ", Schedule{{0, 2.5}, {time.Minute, 0}}, "2.5@0s,none@1m0s"},
	}
	for _, tc := range ok {
		got, err := ParseSchedule(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) || got.String() != tc.str {
			t.Errorf("ParseSchedule(%q) = %v (%q), %v; want %v (%q)", tc.in, got, got.String(), err, tc.want, tc.str)
		}
		if again, err := ParseSchedule(got.String()); err != nil || !reflect.DeepEqual(again, tc.want) {
			t.Errorf("round trip of %q: %v, %v", got.String(), again, err)
		}
	}
	for _, in := range []string{"x", "-1", "10@-1s", "10@5s", "10@0s,5@0s", "10@0s,5@10", "NaN", "Inf", "10@0s,,5@1s"} {
		if s, err := ParseSchedule(in); err == nil {
			t.Errorf("ParseSchedule(%q) = %v, want an error", in, s)
		}
	}
	s := Schedule{{0, 20}, {30 * time.Second, 10}, {time.Minute, 30}}
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{{0, 20}, {29 * time.Second, 20}, {30 * time.Second, 10}, {time.Hour, 30}} {
		if got := s.RateAt(c.at); got != c.want {
			t.Errorf("RateAt(%v) = %v, want %v", c.at, got, c.want)
		}
	}
}

// TestLimitSchedule drives the limit schedule on the injected clock: a
// greedy caller gets the burst plus rate × time in each period, never more.
func TestLimitSchedule(t *testing.T) {
	t.Parallel()
	sched, err := ParseSchedule("20@0s,10@30s,30@60s")
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, Config{Records: dataset(10), Limit: sched, Burst: 10})
	const tick = 100 * time.Millisecond
	granted := map[int]int{} // per 30 s period
	perSecond := map[int]int{}
	for i := 0; i < 900; i++ { // 90 s
		for {
			resp, err := b.get(t, "tx_000001", "k")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if resp.Status == http.StatusTooManyRequests {
				if !resp.HasRetryAfter || resp.RetryAfter < time.Second || resp.RetryAfter > 2*time.Second {
					t.Fatalf("429 Retry-After = %v (present %v), want 1-2s", resp.RetryAfter, resp.HasRetryAfter)
				}
				break
			}
			if resp.Status != 200 {
				t.Fatalf("status %d", resp.Status)
			}
			granted[i/300]++
			perSecond[i/10]++
		}
		b.clock.Advance(tick)
	}
	// Period 0: burst 10 + 20/s × 29.9 s; 1: 10/s × 30 s; 2: 30/s × 30 s.
	for period, want := range []int{10 + 598, 300, 900} {
		if got := granted[period]; got < want-3 || got > want+3 {
			t.Errorf("period %d: %d calls granted, want %d±3", period, got, want)
		}
	}
	for sec, n := range perSecond {
		limit := []int{20, 10, 30}[sec/30]
		if n > limit+10 {
			t.Errorf("second %d: %d calls, more than rate %d + burst 10", sec, n, limit)
		}
	}
	st := b.sim.Stats()
	if len(st.Series) != 90 || st.Series[0].Limit != 20 || st.Series[45].Limit != 10 || st.Series[89].Limit != 30 {
		t.Errorf("series: %d seconds, limits %v/%v/%v", len(st.Series), st.Series[0].Limit, st.Series[45].Limit, st.Series[89].Limit)
	}
	var ok, throttled, first int64
	for _, s := range st.Series {
		ok += s.OK
		throttled += s.Throttled
		first += s.FirstCalls
		if s.Calls != s.OK+s.Throttled+s.Failed {
			t.Errorf("second %d: calls %d != ok %d + throttled %d + failed %d", s.Second, s.Calls, s.OK, s.Throttled, s.Failed)
		}
	}
	// Every call asks for the same transaction: only the first is its
	// first.
	if first != 1 || st.Series[0].FirstCalls != 1 {
		t.Errorf("first calls %d (%d in second 0), want 1", first, st.Series[0].FirstCalls)
	}
	if ok != int64(granted[0]+granted[1]+granted[2]) || throttled != st.Throttled || throttled != 900 || st.ByStatus[429] != 900 {
		t.Errorf("series ok %d throttled %d, stats throttled %d by status %v", ok, throttled, st.Throttled, st.ByStatus)
	}
}

func TestRetryAfterForms(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Records: dataset(3), Limit: Schedule{{0, 0.25}}, Burst: 1, RetryAfterDate: true, RateLimitHeaders: true})
	r, err := b.get(t, "a/b", "k1")
	if err != nil || r.Status != 200 {
		t.Fatalf("first call: %d, %v", r.Status, err)
	}
	if got := r.Header.Get("RateLimit-Policy"); got != `"default";q=1;w=4` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := r.Header.Get("RateLimit"); got != `"default";r=0;t=4` {
		t.Errorf("RateLimit = %q", got)
	}
	req, _ := http.NewRequest(http.MethodGet, b.srv.URL+"/v1/transactions/x", nil)
	req.Header.Set("Idempotency-Key", "k2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ra := resp.Header.Get("Retry-After")
	when, err := http.ParseTime(ra)
	if resp.StatusCode != 429 || err != nil {
		t.Fatalf("second call: %d, Retry-After %q (%v)", resp.StatusCode, ra, err)
	}
	// 1 token at 0.25/s: 4 s after the simulator's clock.
	if d := when.Sub(b.sim.now()); d != 4*time.Second {
		t.Errorf("Retry-After date is %v after the simulator's now, want 4s", d)
	}
}

// TestFaultsAndTruth checks that faults are deterministic per id, close to
// their shares, and that running every id through the decision policy
// against the simulator ends exactly where Truth says.
func TestFaultsAndTruth(t *testing.T) {
	t.Parallel()
	recs := dataset(3000)
	shares := Shares{Mismatch: 0.1, Missing: 0.05, BadRequest: 0.05, BadBody: 0.05, Transient: 0.1}
	b := setup(t, Config{Records: recs, Seed: 42, Shares: shares, TransientCalls: 2})

	twin, err := New(Config{Records: reversed(recs), Seed: 42, Shares: shares})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{Records: recs, Seed: 43, Shares: shares})
	if err != nil {
		t.Fatal(err)
	}
	counts := map[Fault]int{}
	differ := 0
	for _, r := range recs {
		e := b.sim.Truth(r.ID)
		counts[e.Fault]++
		if !reflect.DeepEqual(e, twin.Truth(r.ID)) {
			t.Fatalf("Truth(%q) differs for the same seed and a reordered dataset", r.ID)
		}
		if other.Truth(r.ID).Fault != e.Fault {
			differ++
		}
	}
	if differ < 300 {
		t.Errorf("another seed changed only %d of %d faults", differ, len(recs))
	}
	for f, share := range map[Fault]float64{FaultMismatch: 0.1, FaultMissing: 0.05, FaultBadRequest: 0.05, FaultBadBody: 0.05, FaultTransient: 0.1, FaultNone: 0.65} {
		want := share * float64(len(recs))
		if tol := 4 * math.Sqrt(want); math.Abs(float64(counts[f])-want) > tol {
			t.Errorf("%v: %d transactions, want %.0f±%.0f", f, counts[f], want, tol)
		}
	}
	if e := b.sim.Truth("unknown"); e.Outcome != ledger.Missing {
		t.Errorf("Truth(unknown) = %+v", e)
	}

	// Every id through the policy, retries without waiting.
	p := decision.Policy{MaxAttempts: 4}.WithDefaults()
	for _, r := range recs {
		want := b.sim.Truth(r.ID)
		key := "run:" + r.ID
		var d decision.Decision
		attempt := 1
		for {
			resp, err := b.get(t, r.ID, key)
			d = decision.Decide(p, decision.Input{Expected: r, Response: resp, Err: err, Attempt: attempt, Now: b.clock.Now()}, func() float64 { return 0 })
			if d.Action != decision.Retry {
				break
			}
			attempt++
			if resp.Status == 200 && d.Reason != decision.ReasonBadBody {
				t.Fatalf("%q: retry after a 200: %+v", r.ID, d)
			}
		}
		switch want.Outcome {
		case ledger.Matched, ledger.Mismatched, ledger.Missing:
			if d.Action != decision.Ack || d.Outcome != want.Outcome {
				t.Errorf("%q (%v): decision %v %v, truth %s", r.ID, want.Fault, d.Action, d.Outcome, want.Outcome)
			}
			var fields []string
			for _, diff := range d.Differences {
				fields = append(fields, diff.Field)
			}
			if !slices.Equal(fields, want.Fields) {
				t.Errorf("%q: differing fields %v, truth %v", r.ID, fields, want.Fields)
			}
		case ledger.DeadLettered:
			if d.Action != decision.DeadLetter || d.Reason != want.Reason {
				t.Errorf("%q (%v): decision %v %s, truth dead-lettered %s", r.ID, want.Fault, d.Action, d.Reason, want.Reason)
			}
		}
		calls := b.sim.CallsForKey(key)
		wantCalls := map[Fault]int{FaultTransient: 3, FaultBadBody: 4}[want.Fault]
		if wantCalls == 0 {
			wantCalls = 1
		}
		if calls != wantCalls {
			t.Errorf("%q (%v): %d calls, want %d", r.ID, want.Fault, calls, wantCalls)
		}
	}
	st := b.sim.Stats()
	wantCalls := int64(len(recs) + 2*counts[FaultTransient] + 3*counts[FaultBadBody])
	if st.Calls != wantCalls || st.DistinctKeys != len(recs) || st.MaxCallsPerKey != 4 || st.Throttled != 0 {
		t.Errorf("stats: calls %d (want %d), keys %d, max per key %d, throttled %d", st.Calls, wantCalls, st.DistinctKeys, st.MaxCallsPerKey, st.Throttled)
	}
	if st.ByStatus[503] != int64(2*counts[FaultTransient]) || st.ByStatus[400] != int64(counts[FaultBadRequest]) ||
		st.ByStatus[404] != int64(counts[FaultMissing]) {
		t.Errorf("by status %v, counts %v", st.ByStatus, counts)
	}
}

func reversed(r []provider.Record) []provider.Record {
	r = slices.Clone(r)
	slices.Reverse(r)
	return r
}

func TestTransientRateDeterministic(t *testing.T) {
	t.Parallel()
	run := func() []int {
		b := setup(t, Config{Records: dataset(10), Seed: 7, TransientRate: 0.3})
		var statuses []int
		for i := range 400 {
			r, err := b.get(t, "tx_000002", strconv.Itoa(i))
			if err != nil {
				t.Fatal(err)
			}
			statuses = append(statuses, r.Status)
		}
		return statuses
	}
	a, c := run(), run()
	if !slices.Equal(a, c) {
		t.Error("same seed, different sequence of answers")
	}
	n := 0
	for _, s := range a {
		if s == 503 {
			n++
		}
	}
	if n < 80 || n > 160 {
		t.Errorf("%d of 400 calls failed at a 0.3 transient rate", n)
	}
}

func TestAuthAndIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Records: dataset(5), Token: "right"})
	if r, err := b.get(t, "tx_000001", "k"); err != nil || r.Status != 200 {
		t.Errorf("right token: %d, %v", r.Status, err)
	}
	if r, err := b.get(t, "tx_000001", ""); err != nil || r.Status != 400 || !strings.Contains(r.BodyExcerpt, "idempotency_key_required") {
		t.Errorf("no key: %d %q, %v", r.Status, r.BodyExcerpt, err)
	}
	wrong, _ := provider.New(provider.Config{BaseURL: b.srv.URL, Token: "wrong"})
	if r, err := wrong.Get(t.Context(), provider.Lookup{TransactionID: "tx_000001", IdempotencyKey: "k"}); err != nil || r.Status != 403 {
		t.Errorf("wrong token: %d, %v", r.Status, err)
	}
	none, _ := provider.New(provider.Config{BaseURL: b.srv.URL})
	if r, err := none.Get(t.Context(), provider.Lookup{TransactionID: "tx_000001", IdempotencyKey: "k"}); err != nil || r.Status != 401 || r.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d, %v", r.Status, err)
	}
	// Rejected calls are counted but do not record a key.
	st := b.sim.Stats()
	if st.Calls != 4 || st.DistinctKeys != 1 || st.CallsPerKey["k"] != 1 || st.ByStatus[401] != 1 || st.ByStatus[403] != 1 {
		t.Errorf("stats %+v", st)
	}
	for _, path := range []string{"/v1/transactions/", "/v1/transactions/a/b", "/v2/x", "/"} {
		resp, err := http.Get(b.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("GET %s = %d, want 404", path, resp.StatusCode)
		}
	}
	resp, err := http.Post(b.srv.URL+"/v1/transactions/tx_000001", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST lookup = %d, want 405", resp.StatusCode)
	}
}

func TestConfigEndpointAndStats(t *testing.T) {
	t.Parallel()
	recs := dataset(200)
	b := setup(t, Config{Records: recs, Seed: 1, Shares: Shares{BadRequest: 0.5}, Limit: Schedule{{0, 1}}, Burst: 1})
	var bad string
	for _, r := range recs {
		if b.sim.Truth(r.ID).Fault == FaultBadRequest {
			bad = r.ID
			break
		}
	}
	post := func(body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(b.srv.URL+"/_sim/config", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if r, _ := b.get(t, bad, "k1"); r.Status != 400 {
		t.Fatalf("bad id answered %d", r.Status)
	}
	if r, _ := b.get(t, bad, "k1"); r.Status != 429 {
		t.Fatalf("second call answered %d, want 429", r.Status)
	}
	if code, out := post(`{"limit":"none","clear_faults":true}`); code != 200 || out["limit"] != "none" {
		t.Fatalf("config: %d %v", code, out)
	}
	if r, _ := b.get(t, bad, "k1"); r.Status != 200 || r.Record.ID != bad {
		t.Errorf("after clearing: %d %+v", r.Status, r.Record)
	}
	if e := b.sim.Truth(bad); e.Outcome != ledger.Matched {
		t.Errorf("Truth after clearing = %+v", e)
	}
	if code, out := post(`{"limit":"5@0s,50@10s","burst":3}`); code != 200 || out["limit"] != "5@0s,50@10s" || out["burst"] != 3.0 {
		t.Errorf("config: %d %v", code, out)
	}
	for _, body := range []string{`{"limit":"x"}`, `{"burst":-1}`, `{"transient_rate":2}`, `{"nope":1}`, `not json`} {
		if code, _ := post(body); code != 400 {
			t.Errorf("config %s: %d, want 400", body, code)
		}
	}
	if code, _ := post(`{"token":"t2"}`); code != 200 {
		t.Fatal("token change refused")
	}
	if r, _ := b.get(t, bad, "k2"); r.Status != 401 {
		t.Errorf("after token change without a token: %d", r.Status)
	}

	getStats := func(q string) Stats {
		resp, err := http.Get(b.srv.URL + "/_sim/stats" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st Stats
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	want := b.sim.Stats()
	if want.Calls != 4 || want.Throttled != 1 || want.CallsPerKey["k1"] != 3 || want.MaxCallsPerKey != 3 ||
		want.ByStatus[200] != 1 || want.ByStatus[400] != 1 || want.ByStatus[429] != 1 || want.ByStatus[401] != 1 {
		t.Errorf("stats %+v", want)
	}
	got := getStats("?keys=1")
	if !reflect.DeepEqual(got, want) {
		t.Errorf("/_sim/stats?keys=1 = %+v, want %+v", got, want)
	}
	if got := getStats(""); got.CallsPerKey != nil || got.Calls != want.Calls {
		t.Errorf("/_sim/stats without keys: %+v", got)
	}
}

func TestLatency(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Records: dataset(5), Latency: Latency{Fixed: 50 * time.Millisecond, Jitter: 10 * time.Millisecond}})
	start := time.Now()
	if r, err := b.get(t, "tx_000001", "k"); err != nil || r.Status != 200 {
		t.Fatalf("Get: %d, %v", r.Status, err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("answered in %v, before the 50ms latency", el)
	}

	// A client giving up ends the wait: the server can close promptly.
	slow := setup(t, Config{Records: dataset(5), Latency: Latency{Fixed: time.Hour}})
	c, _ := provider.New(provider.Config{BaseURL: slow.srv.URL, Timeout: 50 * time.Millisecond})
	if _, err := c.Get(t.Context(), provider.Lookup{TransactionID: "tx_000001", IdempotencyKey: "k"}); provider.KindOf(err) != provider.KindTimeout {
		t.Errorf("error = %v, want a timeout", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	bad := []Config{
		{Shares: Shares{Mismatch: 0.6, Missing: 0.6}},
		{Shares: Shares{BadBody: -0.1}},
		{TransientRate: 1.5},
		{Records: []provider.Record{{ID: "a"}, {ID: "a"}}},
		{Records: []provider.Record{{}}},
		{Burst: -1},
		{Load: func() ([]provider.Record, error) { return nil, fmt.Errorf("no file") }},
	}
	for i, cfg := range bad {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %d accepted", i)
		}
	}
	s, err := New(Config{Load: func() ([]provider.Record, error) { return dataset(4), nil }})
	if err != nil || len(s.Records()) != 4 {
		t.Errorf("Load: %v, %d records", err, len(s.Records()))
	}
}
