// Package progress reports how far long work has come: a progress bar with
// rate and ETA when a person watches a terminal, and a structured log line
// every few seconds otherwise (for log collectors and CI).
//
// A Reporter does not count anything itself: it polls a function for the
// done and total counts (for reconcile, the ledger's terminal and total items
// of the runs being worked on) and derives the rate and the ETA from the
// recent samples.
package progress

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/reconcile/reconcile/internal/human"
)

// Counts is one sample of the work's progress.
type Counts struct {
	// Done is the number of items finished.
	Done int64
	// Total is the number of items to do; it may grow while work runs.
	Total int64
	// Throttles is the number of throttled calls so far (shown, not used
	// for the rate).
	Throttles int64
}

// Config configures a Reporter.
type Config struct {
	// Poll returns the current counts. Required.
	Poll func(ctx context.Context) (Counts, error)
	// Bar draws a progress bar on Out instead of writing log lines; set it
	// when Out is a terminal. Defaults to false.
	Bar bool
	// Out is where the bar is drawn. Defaults to io.Discard.
	Out io.Writer
	// Logger receives the progress lines (without Bar) and poll failures.
	// Defaults to discarding them.
	Logger *slog.Logger
	// Description labels the bar. Defaults to "reconciling".
	Description string
	// Interval is the time between polls. Defaults to 500ms with Bar, 10s
	// otherwise.
	Interval time.Duration
	// Window is how far back the rate is measured, so the ETA follows a
	// changed provider limit. Defaults to 30s.
	Window time.Duration
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// NewTicker returns the channel Run waits on between polls and a
	// function stopping it. Defaults to a time.Ticker of Interval.
	NewTicker func(d time.Duration) (<-chan time.Time, func())
}

// sample is one poll's result.
type sample struct {
	at   time.Time
	done int64
}

// Reporter reports progress until its context ends. It is not safe for
// concurrent use: one goroutine calls Run (or Step and Finish).
type Reporter struct {
	cfg     Config
	samples []sample
	bar     *progressbar.ProgressBar
	last    Counts
	polled  bool
}

// New returns a Reporter for cfg.
func New(cfg Config) (*Reporter, error) {
	if cfg.Poll == nil {
		return nil, fmt.Errorf("progress: Config.Poll is required")
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Description = cmp.Or(cfg.Description, "reconciling")
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
		if cfg.Bar {
			cfg.Interval = 500 * time.Millisecond
		}
	}
	cfg.Window = cmp.Or(cfg.Window, 30*time.Second)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewTicker == nil {
		cfg.NewTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	return &Reporter{cfg: cfg}, nil
}

// Run polls and reports every Interval until ctx ends, then reports once
// more (the final state) and returns nil.
func (r *Reporter) Run(ctx context.Context) error {
	ticks, stop := r.cfg.NewTicker(r.cfg.Interval)
	defer stop()
	if !r.cfg.Bar {
		// A log line every Interval; the first one a tick later, so a
		// short run logs only its final state.
		r.poll(ctx, r.cfg.Now())
	}
	for {
		select {
		case <-ctx.Done():
			finalCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			r.Finish(finalCtx)
			return nil
		case <-ticks:
			r.Step(ctx)
		}
	}
}

// Step polls once and reports: it redraws the bar or writes a log line.
func (r *Reporter) Step(ctx context.Context) {
	now := r.cfg.Now()
	if !r.poll(ctx, now) {
		return
	}
	r.report(now, false)
}

// Finish polls a last time and reports the final state; the bar is
// completed and its line ended.
func (r *Reporter) Finish(ctx context.Context) {
	now := r.cfg.Now()
	r.poll(ctx, now)
	if !r.polled {
		return
	}
	r.report(now, true)
}

// poll records a sample; false when polling failed.
func (r *Reporter) poll(ctx context.Context, now time.Time) bool {
	c, err := r.cfg.Poll(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.cfg.Logger.Warn("progress not read", "err", err)
		}
		return false
	}
	r.last, r.polled = c, true
	r.samples = append(r.samples, sample{at: now, done: c.Done})
	// Keep the samples within Window, but always the two latest.
	cut := 0
	for cut < len(r.samples)-2 && now.Sub(r.samples[cut].at) > r.cfg.Window {
		cut++
	}
	r.samples = r.samples[cut:]
	return true
}

// Rate returns the items finished per second over the recent samples, and
// false while there are too few to tell.
func (r *Reporter) Rate() (float64, bool) {
	if len(r.samples) < 2 {
		return 0, false
	}
	first, last := r.samples[0], r.samples[len(r.samples)-1]
	secs := last.at.Sub(first.at).Seconds()
	if secs <= 0 {
		return 0, false
	}
	return float64(last.done-first.done) / secs, true
}

// ETA returns the time left at the current rate, and false when it cannot
// be told (no rate yet, or nothing moving while work remains).
func (r *Reporter) ETA() (time.Duration, bool) {
	left := r.last.Total - r.last.Done
	if left <= 0 {
		return 0, r.polled
	}
	rate, ok := r.Rate()
	if !ok || rate <= 0 {
		return 0, false
	}
	return time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second), true
}

func (r *Reporter) report(now time.Time, final bool) {
	if r.cfg.Bar {
		r.draw(final)
		return
	}
	c := r.last
	attrs := []any{"done", c.Done, "total", c.Total, "percent", percent(c)}
	if rate, ok := r.Rate(); ok {
		attrs = append(attrs, "rate_per_s", round1(rate))
	}
	if eta, ok := r.ETA(); ok {
		attrs = append(attrs, "eta", human.Duration(eta), "eta_at", now.Add(eta).UTC().Format(time.RFC3339))
	}
	attrs = append(attrs, "throttles", c.Throttles)
	msg := "progress"
	if final {
		msg = "progress final"
	}
	r.cfg.Logger.Info(msg, attrs...)
}

func (r *Reporter) draw(final bool) {
	c := r.last
	if r.bar == nil {
		r.bar = progressbar.NewOptions64(max(c.Total, 1),
			progressbar.OptionSetWriter(r.cfg.Out),
			progressbar.OptionSetDescription(r.cfg.Description),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			// The bar's own rate and prediction count from its start, so
			// after a resume they take every item done before it for this
			// process's work (410,288 items/s), and they would disagree
			// with the rate and ETA in the description, which follow the
			// recent samples: show its elapsed time only.
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionShowDescriptionAtLineEnd(),
			progressbar.OptionThrottle(0),
		)
	}
	if c.Total > 0 && c.Total != r.bar.GetMax64() {
		r.bar.ChangeMax64(c.Total)
	}
	desc := fmt.Sprintf("%s · %s throttled", r.cfg.Description, human.Count(c.Throttles))
	if rate, ok := r.Rate(); ok {
		desc += " · " + strings.Replace(human.Rate(rate), "/", " items/", 1)
	}
	if eta, ok := r.ETA(); ok && !final {
		desc += " · ETA " + human.Duration(eta)
	}
	r.bar.Describe(desc)
	_ = r.bar.Set64(c.Done)
	if final {
		if c.Done < c.Total {
			// Stopped before the end: keep the bar as it is.
			_, _ = io.WriteString(r.cfg.Out, "\n")
			return
		}
		_ = r.bar.Finish()
		_, _ = io.WriteString(r.cfg.Out, "\n")
	}
}

func percent(c Counts) float64 {
	if c.Total <= 0 {
		return 0
	}
	return round1(100 * float64(c.Done) / float64(c.Total))
}

func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }
