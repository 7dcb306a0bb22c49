// Package e2e drives the real reconcile binary, as separate processes,
// against a real PostgreSQL and the provider simulator, and checks the
// ledger's promises from the database after every scenario.
//
// The light scenarios (a small crash run, bad input, secrets) run with
// `go test ./...`; the full suite needs the e2e build tag:
//
//	go test -count=1 -tags e2e -timeout 60m -v ./e2e/
//
// -count=1 matters: the suite builds the binary itself, so Go's test cache
// cannot tell when the code under test changed.
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/sample"
)

// binary is the reconcile binary built once per test process by TestMain.
var binary string

func TestMain(m *testing.M) {
	bin, err := buildBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binary = bin
	pgtest.Main(m)
}

// buildBinary builds cmd/reconcile next to the test binary (a directory `go
// test` removes afterwards), or in a fresh temporary directory when that
// one is not writable.
func buildBinary() (string, error) {
	dir := ""
	if exe, err := os.Executable(); err == nil {
		dir = filepath.Dir(exe)
		if f, err := os.CreateTemp(dir, ".probe"); err == nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		} else {
			dir = ""
		}
	}
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "reconcile-e2e-"); err != nil {
			return "", fmt.Errorf("create build directory: %w", err)
		}
	}
	out := filepath.Join(dir, "reconcile")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/reconcile")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build reconcile: %w: %s", err, b)
	}
	return out, nil
}

// day is a generated day of payments written to a CSV file.
type day struct {
	date     string
	path     string
	payments []payments.Payment
	ids      map[string]payments.Payment
}

func newDay(t testing.TB, date string, count int, seed uint64) *day {
	t.Helper()
	d, err := payments.ParseDate(date)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sample.Config{Date: d, Count: count, Seed: seed}
	path := filepath.Join(t.TempDir(), "payments-"+date+".csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := sample.Write(f, payments.FormatCSV, cfg); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := sample.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dy := &day{date: date, path: path, ids: make(map[string]payments.Payment, count)}
	for p, ok := g.Next(); ok; p, ok = g.Next() {
		dy.payments = append(dy.payments, p)
		dy.ids[p.TransactionID] = p
	}
	return dy
}

// records is the day as the provider knows it.
func (d *day) records() []provider.Record {
	recs := make([]provider.Record, len(d.payments))
	for i, p := range d.payments {
		recs[i] = provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status}
	}
	return recs
}

// simProvider is the simulator served over HTTP in the test process, behind
// a handler that checks every lookup's Idempotency-Key and counts calls per
// key, and optionally behind a fault-injecting proxy.
type simProvider struct {
	sim *providersim.Server
	srv *httptest.Server
	URL string

	mu         sync.Mutex
	callsByKey map[string]int
	badKeys    []string // "id: key" of lookups whose key did not match the id
}

// startProvider serves a simulator built from cfg. wrap, when not nil, wraps
// the simulator's handler (a fault-injecting proxy); the key check sits in
// front of everything.
func startProvider(t testing.TB, cfg providersim.Config, wrap func(http.Handler) http.Handler) *simProvider {
	t.Helper()
	sim, err := providersim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &simProvider{sim: sim, callsByKey: map[string]int{}}
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(h)
	}
	p.srv = httptest.NewServer(p.check(h))
	t.Cleanup(p.srv.Close)
	p.URL = p.srv.URL
	return p
}

const lookupPrefix = "/v1/transactions/"

// check counts each lookup under its Idempotency-Key and records lookups
// whose key is not "<reconciliation id>:<transaction id>" for the id in the
// path. A lookup below a wrong base path (/api/v1/transactions/{id}) is a
// call too.
func (p *simProvider) check(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.EscapedPath()
		if i := strings.Index(path, lookupPrefix); i >= 0 {
			esc := path[i+len(lookupPrefix):]
			id, err := url.PathUnescape(esc)
			key := r.Header.Get("Idempotency-Key")
			p.mu.Lock()
			p.callsByKey[key]++
			if rec, _, found := strings.Cut(key, ":"); err != nil || !found || !strings.HasPrefix(rec, "nightly-") || key != rec+":"+id {
				p.badKeys = append(p.badKeys, fmt.Sprintf("%q: key %q", id, key))
			}
			p.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (p *simProvider) keyCalls() (map[string]int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	calls := make(map[string]int, len(p.callsByKey))
	for k, v := range p.callsByKey {
		calls[k] = v
	}
	return calls, append([]string(nil), p.badKeys...)
}

// world is one scenario's database and provider.
type world struct {
	dbURL string
	pool  *pgxpool.Pool
	prov  *simProvider
	// extraEnv is added to every command's environment.
	extraEnv []string

	mu    sync.Mutex
	procs []*proc
}

// newWorld gives a scenario a fresh migrated database (pgtest) and the
// provider p (may be nil).
func newWorld(t testing.TB, p *simProvider) *world {
	t.Helper()
	return newWorldOn(t, pgtest.ConnString(t), p)
}

// newWorldOn is newWorld on a given, migrated database.
func newWorldOn(t testing.TB, dbURL string, p *simProvider) *world {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["application_name"] = "reconcile-e2e-check"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{dbURL: dbURL, pool: pool, prov: p}
	t.Cleanup(func() {
		w.killAll()
		pool.Close()
	})
	return w
}

// env is the environment of a reconcile process: the test's environment
// without database and provider settings, then the world's.
func (w *world) env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "PG") || strings.HasPrefix(k, "RECONCILE_") {
			continue
		}
		env = append(env, kv)
	}
	if w.dbURL != "" {
		env = append(env, "DATABASE_URL="+w.dbURL)
	}
	if w.prov != nil {
		env = append(env, "RECONCILE_PROVIDER_URL="+w.prov.URL)
	}
	env = append(env, w.extraEnv...)
	return append(env, extra...)
}

// result is a finished command.
type result struct {
	args   []string
	stdout string
	stderr string
	code   int
}

func (r result) String() string {
	return fmt.Sprintf("reconcile %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run runs the binary to completion (at most two minutes).
func (w *world) run(t testing.TB, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	if env == nil {
		env = w.env()
	}
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{args: args, stdout: out.String(), stderr: errb.String()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	default:
		t.Fatalf("run reconcile %v: %v", args, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("reconcile %v did not finish within 2 minutes:\n%s", args, res)
	}
	return res
}

// mustRun runs the binary and fails the test unless it exits 0.
func (w *world) mustRun(t testing.TB, args ...string) result {
	t.Helper()
	res := w.run(t, nil, args...)
	if res.code != 0 {
		t.Fatalf("unexpected failure:\n%s", res)
	}
	return res
}

// syncBuffer is a bytes.Buffer safe for a writing process and a reading test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a running reconcile process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	code   int // valid after done
	signal syscall.Signal
}

// start starts the binary in the background; the test's cleanup kills it if
// it is still running.
func (w *world) start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(binary, args...), done: make(chan struct{})}
	p.cmd.Env = w.env()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start reconcile %v: %v", args, err)
	}
	go func() {
		err := p.cmd.Wait()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			p.code = exit.ExitCode()
			if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.signal = ws.Signal()
			}
		} else if err != nil {
			p.code = -1
		}
		close(p.done)
	}()
	w.mu.Lock()
	w.procs = append(w.procs, p)
	w.mu.Unlock()
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits for the process to die.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// wait waits for the process to exit and returns its exit code; it fails
// the test after timeout.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		t.Fatalf("%s (pid %d) still running after %s; stderr tail:\n%s", p.name, p.pid(), timeout, tail(p.stderr.String(), 20))
		return 0
	}
}

func (w *world) killAll() {
	w.mu.Lock()
	procs := w.procs
	w.mu.Unlock()
	for _, p := range procs {
		if !p.exited() {
			p.kill()
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitFor polls cond every interval until it reports true, and fails the
// test after timeout with cond's last description.
func waitFor(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, desc := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %s", timeout, desc)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// progress counts the items of date in a terminal state, and all of them.
func (w *world) progress(t testing.TB, date string) (terminal, total int) {
	t.Helper()
	err := w.pool.QueryRow(context.Background(), `
		SELECT count(*) FILTER (WHERE i.state IN ('matched', 'mismatched', 'missing', 'dead_lettered')), count(*)
		  FROM items i JOIN runs r USING (run_id) WHERE r.business_date = $1`, date).Scan(&terminal, &total)
	if err != nil {
		t.Fatalf("count progress: %v", err)
	}
	return terminal, total
}

// done reports whether every run is complete and no message is ready.
func (w *world) done(t testing.TB) (bool, string) {
	t.Helper()
	var open, ready int
	err := w.pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM runs WHERE completed_at IS NULL),
		       (SELECT count(*) FROM queue_messages WHERE state = 'ready')`).Scan(&open, &ready)
	if err != nil {
		return false, err.Error()
	}
	return open == 0 && ready == 0, fmt.Sprintf("%d open run(s), %d ready message(s)", open, ready)
}

// consumeArgs are the flags every scenario's consumers share: fast retries
// so that a run's dead letters are reached in seconds.
func consumeArgs(extra ...string) []string {
	return append([]string{"consume", "--log-format", "json", "--backoff-base", "20ms", "--backoff-cap", "200ms",
		"--max-attempts", "5"}, extra...)
}
