package progress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/progress"
)

// clock is a settable clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// feed is a Poll function returning whatever counts the test sets.
type feed struct {
	mu  sync.Mutex
	c   progress.Counts
	err error
}

func (f *feed) set(done, total, throttles int64) {
	f.mu.Lock()
	f.c = progress.Counts{Done: done, Total: total, Throttles: throttles}
	f.err = nil
	f.mu.Unlock()
}

func (f *feed) poll(context.Context) (progress.Counts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.c, f.err
}

// lines decodes the JSON log lines written so far.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestLogLinesReportRateETAAndThrottles(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)}
	f := &feed{}
	var buf bytes.Buffer
	r, err := progress.New(progress.Config{Poll: f.poll, Now: clk.now, Window: 30 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	f.set(0, 1000, 0)
	r.Step(ctx) // one sample: no rate yet
	got := lines(t, &buf)
	if len(got) != 1 || got[0]["msg"] != "progress" || got[0]["done"] != 0.0 || got[0]["total"] != 1000.0 {
		t.Fatalf("first line = %v", got)
	}
	if _, ok := got[0]["rate_per_s"]; ok {
		t.Fatalf("rate reported from one sample: %v", got[0])
	}
	if _, ok := got[0]["eta"]; ok {
		t.Fatalf("ETA reported from one sample: %v", got[0])
	}

	clk.advance(10 * time.Second)
	f.set(200, 1000, 3)
	r.Step(ctx)
	got = lines(t, &buf)
	last := got[len(got)-1]
	// 200 items in 10 s: 20/s; 800 left: 40 s.
	if last["rate_per_s"] != 20.0 || last["eta"] != "40s" || last["percent"] != 20.0 || last["throttles"] != 3.0 {
		t.Fatalf("second line = %v", last)
	}
	if last["eta_at"] != "2026-10-25T02:00:50Z" {
		t.Fatalf("eta_at = %v", last["eta_at"])
	}

	// The rate follows the recent window: the first sample (40 s ago)
	// drops out, and the slower recent pace sets the ETA.
	clk.advance(10 * time.Second)
	f.set(400, 1000, 3)
	r.Step(ctx)
	clk.advance(10 * time.Second)
	f.set(450, 1000, 9)
	r.Step(ctx)
	clk.advance(10 * time.Second)
	f.set(500, 1000, 9)
	r.Step(ctx)
	last = lines(t, &buf)[4]
	// Window 30 s: samples at 10, 20, 30, 40 s → (500-200)/30 s = 10/s.
	if last["rate_per_s"] != 10.0 || last["eta"] != "50s" {
		t.Fatalf("windowed line = %v", last)
	}

	// A failed poll writes a warning, not a progress line.
	f.mu.Lock()
	f.err = errors.New("database gone")
	f.mu.Unlock()
	clk.advance(10 * time.Second)
	r.Step(ctx)
	got = lines(t, &buf)
	if w := got[len(got)-1]; w["level"] != "WARN" || w["err"] != "database gone" {
		t.Fatalf("after a failed poll: %v", w)
	}

	f.set(1000, 1000, 9)
	r.Finish(ctx)
	got = lines(t, &buf)
	if fin := got[len(got)-1]; fin["msg"] != "progress final" || fin["done"] != 1000.0 || fin["percent"] != 100.0 || fin["eta"] != "0s" {
		t.Fatalf("final line = %v", fin)
	}
}

func TestRunLogsOnTicksAndOnceMoreAtTheEnd(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)}
	f := &feed{}
	f.set(0, 100, 0)
	ticks := make(chan time.Time)
	var interval time.Duration
	var buf lockedBuffer
	polled := make(chan struct{}, 10)
	r, err := progress.New(progress.Config{
		Poll: func(ctx context.Context) (progress.Counts, error) {
			c, err := f.poll(ctx)
			polled <- struct{}{}
			return c, err
		},
		Now:    clk.now,
		Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
		NewTicker: func(d time.Duration) (<-chan time.Time, func()) {
			interval = d
			return ticks, func() {}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-polled // the baseline sample, not logged
	ticks <- clk.t
	<-polled
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if interval != 10*time.Second {
		t.Fatalf("log interval = %s, want 10s", interval)
	}
	var b bytes.Buffer
	b.WriteString(buf.String())
	got := lines(t, &b)
	if len(got) != 2 || got[0]["msg"] != "progress" || got[1]["msg"] != "progress final" {
		t.Fatalf("lines = %v", got)
	}
}

func TestBarDrawsCountAndDescription(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)}
	f := &feed{}
	var out bytes.Buffer
	r, err := progress.New(progress.Config{Poll: f.poll, Now: clk.now, Bar: true, Out: &out, Description: "nightly"})
	if err != nil {
		t.Fatal(err)
	}
	f.set(10, 40, 2)
	r.Step(context.Background())
	clk.advance(time.Second)
	f.set(20, 40, 2)
	r.Step(context.Background())
	// One ETA per frame, the description's: the bar's own prediction
	// ("[1s:3s]") would disagree with it.
	if frame := out.String(); !strings.Contains(frame, "ETA 2s") || regexp.MustCompile(`\[[^\]]*:[^\]]*\]`).MatchString(frame) {
		t.Errorf("bar shows another ETA than the description's:\n%q", frame)
	}
	clk.advance(time.Second)
	f.set(40, 40, 2)
	r.Finish(context.Background())
	s := out.String()
	for _, want := range []string{"40/40", "100%", "nightly", "2 throttled"} {
		if !strings.Contains(s, want) {
			t.Errorf("bar output lacks %q:\n%q", want, s)
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBarRateAfterAResume starts the bar on a run resumed with 410,288
// items done: the rate shown is the items this process sees finish, 10 a
// second, not every item done before it over the bar's first second.
func TestBarRateAfterAResume(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)}
	f := &feed{}
	var out bytes.Buffer
	r, err := progress.New(progress.Config{Poll: f.poll, Now: clk.now, Bar: true, Out: &out})
	if err != nil {
		t.Fatal(err)
	}
	f.set(410288, 500000, 0)
	r.Step(context.Background())
	for i := range 5 {
		clk.advance(time.Second)
		f.set(410288+10*int64(i+1), 500000, 0)
		r.Step(context.Background())
	}
	rates := regexp.MustCompile(`([0-9][0-9,.]*) items/s`).FindAllStringSubmatch(out.String(), -1)
	if len(rates) == 0 {
		t.Fatalf("the bar shows no rate:\n%q", out.String())
	}
	for _, m := range rates {
		if m[1] != "10" {
			t.Errorf("the bar shows %s items/s, want 10:\n%q", m[1], out.String())
		}
	}
	if !strings.Contains(out.String(), "ETA 2h29m") {
		t.Errorf("the bar's ETA for 89,662 items at 10/s, want 2h29m:\n%q", out.String())
	}
}
