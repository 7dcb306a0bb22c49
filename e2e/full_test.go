//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestCrash is scenario 1: consumers killed by SIGKILL at random moments,
// ten times during a 5,000-item run, restarted each time.
func TestCrash(t *testing.T) {
	crashScenario(t, crashConfig{items: 5000, kills: 10, consumers: 2, rate: 150,
		minGap: 500 * time.Millisecond, maxGap: 2500 * time.Millisecond})
}

// TestDatabaseRestart is scenario 2: PostgreSQL stopped for ten seconds in
// the middle of a run and started again; the same consumer processes
// reconnect and finish.
func TestDatabaseRestart(t *testing.T) {
	ctx := context.Background()
	cluster, err := pgserver.Start(ctx, pgserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	conn, err := pgx.Connect(ctx, cluster.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE reconcile"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)

	dy := newDay(t, "2026-10-24", 3000, 21)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 12, Shares: faultyShares,
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond}}, nil)
	w := newWorldOn(t, cluster.ConnString("reconcile"), prov)
	w.mustRun(t, "migrate")
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	args := consumeArgs("--until-done", "--concurrency", "8", "--rate", "100", "--visibility", "5s")
	consumers := []*proc{w.start(t, "consumer 0", args...), w.start(t, "consumer 1", args...)}
	start := time.Now()
	waitFor(t, time.Minute, func() (bool, string) {
		done, total := w.progress(t, dy.date)
		return done >= total/4, fmt.Sprintf("%d of %d items done", done, total)
	})
	atHalt, _ := w.progress(t, dy.date)
	if err := cluster.Halt(); err != nil {
		t.Fatal(err)
	}
	haltedAt := time.Now()
	// The outage itself is the scenario: ten seconds without a database.
	time.Sleep(10 * time.Second)
	for _, c := range consumers {
		if c.exited() {
			t.Fatalf("%s exited while the database was down (code %d):\n%s", c.name, c.code, tail(c.stderr.String(), 20))
		}
	}
	if err := cluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	var resumedAfter time.Duration
	waitFor(t, time.Minute, func() (bool, string) {
		done, _ := w.progress(t, dy.date)
		resumedAfter = time.Since(restartedAt)
		return done > atHalt+50, fmt.Sprintf("%d items done, %d at the halt", done, atHalt)
	})
	for _, c := range consumers {
		if code := c.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	elapsed := time.Since(start)
	waitFor(t, 10*time.Second, func() (bool, string) { return w.done(t) })
	fig := checkInvariants(t, w, dy, truth(prov.sim))
	// What the consumers said about the outage.
	warnings := map[string]int{}
	for _, c := range consumers {
		count, _ := warningCounts(c)
		for msg, n := range count {
			warnings[msg] += n
		}
	}
	// A ten-second outage is one line per kind of failure and process (the
	// next would come 30 s later), not one per message.
	for kind, n := range warnings {
		if n > len(consumers) {
			t.Errorf("%q logged %d times by %d consumers during a 10 s outage; want one line per process", kind, n, len(consumers))
		}
	}
	t.Logf("FIGURES database restart: postgres down %s with %d of %d items done; progress again %s after the restart; "+
		"the same 2 consumer processes finished (exit 0; logged %v); %s; elapsed %s",
		restartedAt.Sub(haltedAt).Round(time.Millisecond), atHalt, fig.Items, resumedAfter.Round(time.Millisecond),
		warnings, fig, elapsed.Round(time.Millisecond))
}

// faultProxy sits between the consumers and the simulator and injects
// network and protocol faults: on the first call of about a third of the
// idempotency keys one of its faults, and a 503 storm to every call while
// the storm lasts.
type faultProxy struct {
	next          http.Handler
	clientTimeout time.Duration

	mu         sync.Mutex
	seen       map[string]int
	stormFrom  time.Time
	stormUntil time.Time
	injected   map[string]int
}

// proxyFaults are the faults injected on first calls. A reset before any
// byte of the answer is often retried by Go's HTTP transport itself (a GET
// on a reused connection), so the consumer sees a call that succeeded; a
// reset in the middle of the body always reaches it.
var proxyFaults = []string{"reset", "reset_mid_body", "timeout", "slow_body", "malformed_json", "huge_body", "http_500"}

func (f *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.EscapedPath(), lookupPrefix) {
		f.next.ServeHTTP(w, r)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	now := time.Now()
	f.mu.Lock()
	n := f.seen[key]
	f.seen[key]++
	fault := ""
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	switch {
	case !now.Before(f.stormFrom) && now.Before(f.stormUntil):
		fault = "storm_503"
	case n == 0 && h.Sum32()%3 == 0:
		fault = proxyFaults[(h.Sum32()/3)%uint32(len(proxyFaults))]
	}
	if fault != "" {
		f.injected[fault]++
	}
	f.mu.Unlock()

	switch fault {
	case "":
		f.next.ServeHTTP(w, r)
	case "storm_503":
		http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
	case "http_500":
		http.Error(w, `{"error":"internal"}`, http.StatusInternalServerError)
	case "reset":
		resetConn(w)
	case "reset_mid_body":
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"id\": ")
		_ = buf.Flush()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	case "timeout":
		// Answer nothing for twice the client's timeout.
		select {
		case <-r.Context().Done():
		case <-time.After(2 * f.clientTimeout):
		}
		resetConn(w)
	case "slow_body":
		// The real answer, trickled over about half the client's timeout.
		rec := httptest.NewRecorder()
		f.next.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		step := max(1, len(body)/10)
		for i := 0; i < len(body); i += step {
			_, _ = w.Write(body[i:min(len(body), i+step)])
			w.(http.Flusher).Flush()
			time.Sleep(f.clientTimeout / 20)
		}
	case "malformed_json":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": "x", "amount_minor": 12,, "currency": `)
	case "huge_body":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": "x", "padding": "`)
		chunk := strings.Repeat("A", 64<<10)
		for range 10 << 20 / len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}`)
	}
}

// resetConn closes the client's connection with a TCP reset.
func resetConn(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// TestProviderFaults is scenario 3: connection resets, timeouts longer
// than the client's, slow bodies, malformed JSON, a 10 MiB body and a 20 s
// storm of 503s, from a proxy in front of the simulator.
func TestProviderFaults(t *testing.T) {
	dy := newDay(t, "2026-10-24", 2000, 31)
	const clientTimeout = 1500 * time.Millisecond
	proxy := &faultProxy{clientTimeout: clientTimeout, seen: map[string]int{}, injected: map[string]int{}}
	// No storm until the consumers start.
	proxy.stormFrom = time.Now().Add(time.Hour)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 13,
		Shares:  providersim.Shares{Mismatch: 0.03, Missing: 0.02, BadRequest: 0.01, Transient: 0.03},
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond}},
		func(h http.Handler) http.Handler { proxy.next = h; return proxy })
	w := newWorld(t, prov)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	// Equal jitter from 1s capped at 10s: fifteen attempts cannot all
	// fall inside the 20 s storm.
	args := []string{"consume", "--log-format", "json", "--until-done", "--concurrency", "16", "--rate", "100",
		"--timeout", clientTimeout.String(), "--backoff-base", "1s", "--backoff-cap", "10s", "--jitter", "equal",
		"--max-attempts", "15", "--visibility", "5s"}
	start := time.Now()
	proxy.mu.Lock()
	proxy.stormFrom, proxy.stormUntil = start.Add(5*time.Second), start.Add(25*time.Second)
	proxy.mu.Unlock()
	consumers := []*proc{w.start(t, "consumer 0", args...), w.start(t, "consumer 1", args...)}
	for _, c := range consumers {
		if code := c.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	elapsed := time.Since(start)
	fig := checkInvariants(t, w, dy, truth(prov.sim))

	proxy.mu.Lock()
	injected := fmt.Sprint(proxy.injected)
	for _, f := range append(proxyFaults, "storm_503") {
		if proxy.injected[f] == 0 {
			t.Errorf("fault %s was never injected", f)
		}
	}
	proxy.mu.Unlock()
	// Each fault reached the consumer and was classified.
	reasons := map[string]int{}
	rows, err := w.pool.Query(context.Background(), `SELECT reason, count(*) FROM transitions WHERE to_state = 'retry_scheduled' GROUP BY reason`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r string
		var n int
		if err := rows.Scan(&r, &n); err != nil {
			t.Fatal(err)
		}
		reasons[r] = n
	}
	for _, r := range []string{"connection", "timeout", "bad_body", "body_too_large", "http_500", "http_503"} {
		if reasons[r] == 0 {
			t.Errorf("no retry recorded with reason %s (retries by reason: %v)", r, reasons)
		}
	}
	t.Logf("FIGURES provider faults: injected %s; retries by reason %v; %s; elapsed %s", injected, reasons, fig, elapsed.Round(time.Millisecond))
}

// TestScaleOut is scenario 4: four consumer processes with four workers
// each share the limiter against a simulator strictly limited to 50/s: the
// combined rate is within 5% of 50/s and at most 1% of calls are throttled.
func TestScaleOut(t *testing.T) {
	dy := newDay(t, "2026-10-24", 2500, 41)
	sched, err := providersim.ParseSchedule("50@0s")
	if err != nil {
		t.Fatal(err)
	}
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 14, Limit: sched, Burst: 10,
		Shares:  providersim.Shares{Mismatch: 0.03, Missing: 0.02},
		Latency: providersim.Latency{Fixed: 10 * time.Millisecond, Jitter: 30 * time.Millisecond}}, nil)
	w := newWorld(t, prov)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
	// The provider's rate, and a burst below its bucket's: with equal
	// buckets any network jitter (the first calls also dial) is a 429.
	w.mustRun(t, "limit", "set", "--rate", "50", "--burst", "5")

	args := consumeArgs("--until-done", "--concurrency", "4", "--visibility", "10s")
	start := time.Now()
	var consumers []*proc
	for i := range 4 {
		consumers = append(consumers, w.start(t, "consumer "+strconv.Itoa(i), args...))
	}
	for _, c := range consumers {
		if code := c.wait(t, 5*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	elapsed := time.Since(start)
	fig := checkInvariants(t, w, dy, truth(prov.sim))

	st := prov.sim.Stats()
	// The steady state: whole seconds with calls, minus the first and last
	// three (start-up and the tail, when fewer items than workers are left).
	series := slices.DeleteFunc(st.Series, func(s providersim.Second) bool { return s.Calls == 0 })
	if len(series) < 20 {
		t.Fatalf("only %d seconds with calls", len(series))
	}
	steady := series[3 : len(series)-3]
	var perSecond []string
	for _, s := range series {
		perSecond = append(perSecond, fmt.Sprintf("%d/%d", s.OK+s.Failed, s.Throttled))
	}
	t.Logf("answered/throttled per second: %s", strings.Join(perSecond, " "))
	var calls, ok int64
	for _, s := range steady {
		calls += s.Calls
		ok += s.OK + s.Failed
	}
	rate := float64(ok) / float64(len(steady))
	offered := float64(calls) / float64(len(steady))
	share := float64(st.Throttled) / float64(st.Calls)
	if rate < 47.5 || rate > 52.5 {
		t.Errorf("combined rate %.2f/s over %d steady seconds: want 50/s ± 5%%", rate, len(steady))
	}
	if share > 0.01 {
		t.Errorf("%d of %d calls throttled (%.2f%%): want at most 1%%", st.Throttled, st.Calls, 100*share)
	}
	t.Logf("FIGURES scale-out: 4 processes x 4 workers, simulator 50/s burst 10, limit set --rate 50 --burst 5; steady %.2f calls/s answered (%.2f offered) over %d s; "+
		"%d of %d calls throttled (%.2f%%); %s; elapsed %s (floor %s)",
		rate, offered, len(steady), st.Throttled, st.Calls, 100*share, fig, elapsed.Round(time.Millisecond),
		(time.Duration(len(dy.payments)) * time.Second / 50).Round(time.Second))
}

// callRate measures the calls per second the provider receives over d.
func callRate(p *simProvider, d time.Duration) float64 {
	count := func() int {
		calls, _ := p.keyCalls()
		n := 0
		for _, c := range calls {
			n += c
		}
		return n
	}
	before, t0 := count(), time.Now()
	time.Sleep(d)
	return float64(count()-before) / time.Since(t0).Seconds()
}

// TestOperatorActions is scenario 5: `limit set` lowering and raising the
// rate mid-run, a second enqueue of the same date, the provider's faults
// cleared, then `dlq redrive` of some dead letters and `enqueue --rerun
// failed` of the rest, all while the consumers run.
func TestOperatorActions(t *testing.T) {
	dy := newDay(t, "2026-10-24", 3000, 51)
	// The simulator does not know 2% of the payments (missing whatever
	// happens) and refuses 5% with a 400 until its faults are cleared.
	recs := dy.records()
	recs = slices.DeleteFunc(recs, func(r provider.Record) bool {
		h := fnv.New32a()
		_, _ = h.Write([]byte(r.ID))
		return h.Sum32()%50 == 0
	})
	prov := startProvider(t, providersim.Config{Records: recs, Seed: 15, Shares: providersim.Shares{BadRequest: 0.05},
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond}}, nil)
	w := newWorld(t, prov)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	args := consumeArgs("--concurrency", "8", "--rate", "100", "--burst", "20", "--visibility", "5s")
	consumers := []*proc{w.start(t, "consumer 0", args...), w.start(t, "consumer 1", args...)}
	start := time.Now()
	waitFor(t, time.Minute, func() (bool, string) {
		done, total := w.progress(t, dy.date)
		return done >= total/10, fmt.Sprintf("%d of %d done", done, total)
	})
	before := callRate(prov, 2*time.Second)

	w.mustRun(t, "limit", "set", "--rate", "20", "--burst", "5")
	time.Sleep(1500 * time.Millisecond) // consumers apply a change within a second
	low := callRate(prov, 4*time.Second)
	w.mustRun(t, "limit", "set", "--rate", "100", "--burst", "20")
	time.Sleep(1500 * time.Millisecond)
	high := callRate(prov, 3*time.Second)
	if low > 20*1.15 {
		t.Errorf("after `limit set --rate 20` the provider got %.1f calls/s", low)
	}
	if high < 2*low || high > 100*1.15 {
		t.Errorf("after `limit set --rate 100` the provider got %.1f calls/s (%.1f at 20/s)", high, low)
	}

	// A second enqueue of the date is a no-op.
	res := w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
	if !strings.Contains(res.stdout, "exists already") {
		t.Errorf("second enqueue should report the existing run:\n%s", res)
	}
	var runs, items, messages int
	if err := w.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM items),
		(SELECT count(*) FROM queue_messages)`).Scan(&runs, &items, &messages); err != nil {
		t.Fatal(err)
	}
	if runs != 1 || items != len(dy.payments) || messages != len(dy.payments) {
		t.Errorf("after a second enqueue: %d runs, %d items, %d messages; want 1, %d, %d", runs, items, messages, len(dy.payments), len(dy.payments))
	}

	// Fix the provider, then send the dead letters back: half by id, the
	// rest with a re-run of the failed items.
	waitFor(t, time.Minute, func() (bool, string) {
		done, total := w.progress(t, dy.date)
		return done >= total/2, fmt.Sprintf("%d of %d done", done, total)
	})
	resp, err := http.Post(prov.URL+"/_sim/config", "application/json", strings.NewReader(`{"clear_faults": true}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /_sim/config: %s", resp.Status)
	}
	var dead []struct {
		ID            int64  `json:"id"`
		TransactionID string `json:"transaction_id"`
		Reason        string `json:"reason"`
	}
	res = w.mustRun(t, "dlq", "list", "--json")
	if err := json.Unmarshal([]byte(res.stdout), &dead); err != nil {
		t.Fatalf("dlq list --json: %v\n%s", err, res)
	}
	if len(dead) < 4 {
		t.Fatalf("want some dead letters half-way through, have %d", len(dead))
	}
	redrive := []string{"dlq", "redrive"}
	for _, d := range dead[:len(dead)/2] {
		if d.Reason != "http_400" {
			t.Errorf("dead letter %q has reason %s, want http_400", d.TransactionID, d.Reason)
		}
		redrive = append(redrive, "--id", strconv.FormatInt(d.ID, 10))
	}
	res = w.mustRun(t, redrive...)
	if want := fmt.Sprintf("redrove %d ", len(dead)/2); !strings.Contains(res.stdout, want) {
		t.Errorf("want %q:\n%s", want, res)
	}
	res = w.mustRun(t, "enqueue", "--date", dy.date, "--rerun", "failed")
	rerunDone, _ := w.progress(t, dy.date)
	var requeued int
	if _, err := fmt.Sscanf(res.stdout[strings.Index(res.stdout, "): ")+3:], "%d dead-lettered", &requeued); err != nil || requeued < len(dead)-len(dead)/2 {
		t.Errorf("rerun failed requeued %d, want at least %d:\n%s", requeued, len(dead)-len(dead)/2, res)
	}

	waitFor(t, 3*time.Minute, func() (bool, string) { return w.done(t) })
	elapsed := time.Since(start)
	for _, c := range consumers {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range consumers {
		if code := c.wait(t, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d after SIGTERM:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	// With the faults cleared, the truth is: every payment the provider
	// knows matches, the others are missing.
	fig := checkInvariants(t, w, dy, truth(prov.sim))
	var redriven, rerun, round int
	if err := w.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM transitions WHERE reason = 'redrive'),
		(SELECT count(*) FROM transitions WHERE reason = 'rerun_failed'),
		(SELECT max(round) FROM run_completions)`).Scan(&redriven, &rerun, &round); err != nil {
		t.Fatal(err)
	}
	if redriven != len(dead)/2 || rerun != requeued {
		t.Errorf("transitions: %d redrive, %d rerun_failed; want %d and %d", redriven, rerun, len(dead)/2, requeued)
	}
	t.Logf("FIGURES operator actions: %.1f calls/s at 100/s, %.1f/s after `limit set --rate 20`, %.1f/s after raising to 100; "+
		"second enqueue a no-op; %d dead letters half-way, %d redriven by id, %d requeued by --rerun failed (at %d items done); "+
		"completion round %d; %s; elapsed %s",
		before, low, high, len(dead), redriven, rerun, rerunDone, round, fig, elapsed.Round(time.Millisecond))
}

// metricsURL finds the metrics address a consumer logged.
func metricsURL(p *proc) string {
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	for sc.Scan() {
		var line struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving metrics" {
			return line.URL
		}
	}
	return ""
}

// goroutines reads go_goroutines from a consumer's metrics.
func goroutines(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no go_goroutines in %s", url)
}

// TestSoak is scenario 6: 200,000 items against a fast simulator with 2% of
// calls failing transiently. Memory, goroutines and connections stay flat.
func TestSoak(t *testing.T) {
	const items = 200_000
	dy := newDay(t, "2026-10-24", items, 61)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 16, TransientRate: 0.02,
		Shares: providersim.Shares{Mismatch: 0.01, Missing: 0.01}}, nil)
	w := newWorld(t, prov)
	t0 := time.Now()
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
	enqueued := time.Since(t0)

	args := consumeArgs("--until-done", "--concurrency", "16", "--rate", "10000", "--burst", "1000",
		"--metrics-addr", "127.0.0.1:0", "--progress", "off")
	start := time.Now()
	consumers := []*proc{w.start(t, "consumer 0", args...), w.start(t, "consumer 1", args...)}

	type sample struct {
		rss        []int
		goroutines []int
		conns      int
		done       int
		at         time.Duration
	}
	take := func() sample {
		s := sample{at: time.Since(start)}
		for _, c := range consumers {
			kb, err := rss(c.pid())
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			s.rss = append(s.rss, kb)
			g, err := goroutines(metricsURL(c))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			s.goroutines = append(s.goroutines, g)
		}
		if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'reconcile'`).Scan(&s.conns); err != nil {
			t.Fatal(err)
		}
		s.done, _ = w.progress(t, dy.date)
		return s
	}
	// The first sample comes after warm-up: a consumer opens a provider
	// connection (two goroutines) each time its in-flight calls reach a new
	// peak, which can take several seconds of a fast run.
	waitFor(t, 5*time.Minute, func() (bool, string) {
		done, _ := w.progress(t, dy.date)
		return done >= items/5 && metricsURL(consumers[0]) != "" && metricsURL(consumers[1]) != "",
			fmt.Sprintf("%d done", done)
	})
	first := take()
	waitFor(t, 30*time.Minute, func() (bool, string) {
		done, _ := w.progress(t, dy.date)
		return done >= items*95/100, fmt.Sprintf("%d of %d done", done, items)
	})
	last := take()
	for _, c := range consumers {
		if code := c.wait(t, 10*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	elapsed := time.Since(start)
	fig := checkInvariants(t, w, dy, truth(prov.sim))

	for i := range consumers {
		// Flat: a little growth from warm-up caches, no growth in
		// proportion to the items processed (almost 5 times as many at the
		// end).
		if grow := last.rss[i] - first.rss[i]; grow > 32<<10 && float64(last.rss[i]) > 1.5*float64(first.rss[i]) {
			t.Errorf("consumer %d: RSS grew from %d KiB to %d KiB", i, first.rss[i], last.rss[i])
		}
		if last.goroutines[i] > first.goroutines[i]+10 {
			t.Errorf("consumer %d: goroutines grew from %d to %d", i, first.goroutines[i], last.goroutines[i])
		}
	}
	// A pool opens a connection when every one it has is busy, so one or
	// two more than at warm-up are the pools filling in (the heartbeat and
	// the circuit's row are written on the same pool as the results); a
	// leak grows with the items, almost five times as many at the end.
	if last.conns > first.conns+2 {
		t.Errorf("database connections grew from %d to %d", first.conns, last.conns)
	}
	self, _ := rss(os.Getpid())
	t.Logf("FIGURES soak: %d items enqueued in %s; 2 processes x 16 workers; %.0f items/s overall; "+
		"RSS KiB at %d items (%s) %v, at %d items (%s) %v; goroutines %v → %v; connections %d → %d; test process (simulator) RSS %d KiB; %s; elapsed %s",
		items, enqueued.Round(time.Millisecond), float64(items)/elapsed.Seconds(),
		first.done, first.at.Round(time.Second), first.rss, last.done, last.at.Round(time.Second), last.rss,
		first.goroutines, last.goroutines, first.conns, last.conns, self, fig, elapsed.Round(time.Millisecond))
}

// rss returns a process's resident set size in KiB, from /proc.
func rss(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, errors.New("no VmRSS line")
}

// warningCounts counts a process's WARN and ERROR log lines by "LEVEL
// message" and returns the longest such line's length in bytes.
func warningCounts(p *proc) (map[string]int, int) {
	count := map[string]int{}
	longest := 0
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct{ Level, Msg string }
		if json.Unmarshal(sc.Bytes(), &line) == nil && (line.Level == "WARN" || line.Level == "ERROR") {
			count[line.Level+" "+line.Msg]++
			longest = max(longest, len(sc.Bytes()))
		}
	}
	return count, longest
}
