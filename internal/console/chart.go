package console

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
)

// A run's chart: provider traffic (calls/s, 429s/s, items done/s) from the
// run's transitions, and the configured, effective and estimated limits from
// the limiter's history. The two sources are read separately (loadTraffic,
// loadLimits) and drawn together by newSVGChart.

// trafficPoint is a run's provider traffic around one instant, per second.
type trafficPoint struct {
	At        time.Time
	Calls     float64
	Throttles float64
	Done      float64
}

// limitPoint is the limiter's state from At on: the effective rate in
// force, the provider's estimated rate, the configured ceiling (each NaN
// when unknown) and why the rate became what it is.
type limitPoint struct {
	At         time.Time
	Effective  float64
	Estimate   float64
	Configured float64
	Cause      string
}

// traffic is the traffic part of a chart.
type traffic struct {
	Start, End time.Time
	Points     []trafficPoint
	// Sampled is true when the run was too large to read every transition
	// and the rates were estimated from Probes windows.
	Sampled bool
	// Transitions is the span of the run's transition ids: its number of
	// transitions when it ran alone, an upper bound otherwise.
	Transitions int64
	// Bin is the width of the bins of an exact (not sampled) traffic: a bin
	// without a point had no transition, its rates were zero.
	Bin time.Duration
	// Calls and Throttles are the provider calls and 429s the points add up
	// to: counted exactly from every transition, or estimated from the
	// samples when Sampled.
	Calls, Throttles float64
}

// Chart sizes: up to exactTransitions a run's transitions are all read and
// binned into about chartBins bins; above, chartProbes windows of
// probeWindow transitions each are read.
const (
	exactTransitions = 20_000
	chartBins        = 120
	chartProbes      = 120
	probeWindow      = 50
)

// loadTraffic reads a run's traffic in a bounded number of rows: at most
// exactTransitions, or chartProbes×probeWindow for larger runs. Between two
// probes, the run's transitions are counted from the distance of their ids
// (transition ids are the global insertion order) scaled by the share of
// the window's ids that belong to the run, so another run recording at the
// same time does not inflate the rate.
func loadTraffic(ctx context.Context, rd *reader, runID uuid.UUID) (traffic, error) {
	var tr traffic
	span, ok, err := ledger.TransitionSpan(ctx, rd, runID)
	if err != nil || !ok {
		return tr, err
	}
	tr.Start, tr.End = span.First, span.Last
	tr.Transitions = span.LastID - span.FirstID + 1
	if tr.Transitions <= exactTransitions {
		return tr, binTraffic(ctx, rd, runID, &tr)
	}
	tr.Sampled = true
	return tr, sampleTraffic(ctx, rd, runID, span.FirstID, span.LastID, &tr)
}

func binTraffic(ctx context.Context, rd *reader, runID uuid.UUID, tr *traffic) error {
	span := tr.End.Sub(tr.Start)
	bin := max(time.Second, (span / chartBins).Round(time.Second))
	tr.Bin = bin
	bins, err := ledger.Traffic(ctx, rd, runID, tr.Start, bin)
	if err != nil {
		return err
	}
	secs := bin.Seconds()
	for _, b := range bins {
		tr.Points = append(tr.Points, trafficPoint{At: b.Start.Add(bin / 2), Calls: float64(b.Calls) / secs,
			Throttles: float64(b.Throttles) / secs, Done: float64(b.Done) / secs})
		tr.Calls += float64(b.Calls)
		tr.Throttles += float64(b.Throttles)
	}
	return nil
}

// probe is one window of a sampled run.
type probe struct {
	firstID, lastID           int64
	at                        time.Time
	n, calls, throttles, done int
}

func sampleTraffic(ctx context.Context, rd *reader, runID uuid.UUID, lo, hi int64, tr *traffic) error {
	step := max(1, (hi-lo)/chartProbes)
	sampled, err := ledger.SampleTraffic(ctx, rd, runID, lo, step, chartProbes, probeWindow)
	if err != nil {
		return err
	}
	var probes []probe
	last, skip := -1, false
	for _, t := range sampled {
		if t.Probe != last {
			last = t.Probe
			// Where the run's ids are sparse, a probe can land inside the
			// previous one's window: it adds nothing.
			skip = len(probes) > 0 && t.ID <= probes[len(probes)-1].lastID
			if !skip {
				probes = append(probes, probe{firstID: t.ID, at: t.At})
			}
		}
		if skip {
			continue
		}
		pr := &probes[len(probes)-1]
		pr.lastID = t.ID
		pr.n++
		pr.calls += b2i(t.Call)
		pr.throttles += b2i(t.Throttle)
		pr.done += b2i(t.Done)
	}
	for i := 0; i+1 < len(probes); i++ {
		a, b := probes[i], probes[i+1]
		dt := b.at.Sub(a.at).Seconds()
		if dt <= 0.001 || a.n == 0 {
			continue
		}
		density := float64(a.n) / float64(a.lastID-a.firstID+1)
		rate := float64(b.firstID-a.firstID) * density / dt
		n := float64(a.n)
		p := trafficPoint{At: a.at.Add(b.at.Sub(a.at) / 2),
			Calls: rate * float64(a.calls) / n, Throttles: rate * float64(a.throttles) / n, Done: rate * float64(a.done) / n}
		tr.Points = append(tr.Points, p)
		tr.Calls += p.Calls * dt
		tr.Throttles += p.Throttles * dt
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// limiterRow is a limiter's row as the console shows it.
type limiterRow struct {
	Name          string
	Rate          float64
	Burst         int
	EffectiveRate float64
	// PenaltyUntil is set while a penalty runs, by the database's clock.
	PenaltyUntil      *time.Time
	Throttles         int64
	SettingsUpdatedAt time.Time
}

func newLimiterRow(s limiter.State) limiterRow {
	l := limiterRow{Name: s.Name, Rate: s.Rate, Burst: s.Burst, EffectiveRate: s.EffectiveRate, Throttles: s.Throttles,
		SettingsUpdatedAt: s.SettingsUpdatedAt}
	if s.PenaltyLeft > 0 {
		l.PenaltyUntil = &s.PenaltyUntil
	}
	return l
}

// loadLimiters reads every limiter's row (one per provider).
func loadLimiters(ctx context.Context, rd *reader) ([]limiterRow, error) {
	states, err := limiter.States(ctx, rd)
	if err != nil {
		return nil, err
	}
	out := make([]limiterRow, len(states))
	for i, s := range states {
		out[i] = newLimiterRow(s)
	}
	return out, nil
}

// markSpacing is the least distance in the chart's units between two
// hover marks of limit changes.
const markSpacing = 4.0

// chartChanges is the most limiter history rows a chart reads: a limit
// being found changes a few times a minute, one that holds once a minute or
// less, so a night's run fits unless the limit was hunted for hours.
const chartChanges = 1000

// limits is the limit part of a chart.
type limits struct {
	Points []limitPoint
	// Truncated is true when the run's span held more than chartChanges
	// changes and only the last ones were read.
	Truncated bool
}

// loadLimits returns the limits of limiter l over [start, end] from its
// history: the change in force at start, then every change up to end (at
// most chartChanges, the last ones), each a point with its cause. The
// configured rate comes from the `limit set` rows; before the first one in
// the span it is the one set before start (one more query, only when the
// settings changed since start). A limiter without history rows (one not
// used since the history was recorded) shows its current rates over the
// whole span.
func loadLimits(ctx context.Context, rd *reader, l *limiterRow, start, end time.Time) (limits, error) {
	var out limits
	if l == nil || end.IsZero() {
		return out, nil
	}
	before, err := limiter.LoadHistory(ctx, rd, l.Name, start, 1)
	if err != nil {
		return out, err
	}
	during, err := limiter.LoadHistory(ctx, rd, l.Name, end.Add(time.Microsecond), chartChanges)
	if err != nil {
		return out, err
	}
	i := 0
	for i < len(during) && during[i].At.Before(start) {
		i++
	}
	out.Truncated = i == 0 && len(during) == chartChanges
	during = during[i:]

	configured := l.Rate
	if l.SettingsUpdatedAt.After(start) {
		// The rate was set during or after the run: the one in force at
		// start is the last `limit set` row before it, if any is kept.
		configured = math.NaN()
		if len(before) == 1 && before[0].Cause == limiter.CauseLimitSet {
			configured = before[0].Rate
		} else if rate, ok, err := limiter.RateSetBefore(ctx, rd, l.Name, start); err != nil {
			return out, err
		} else if ok {
			configured = rate
		}
	}
	if len(before) == 0 && len(during) == 0 {
		// Every change of the effective rate is recorded: without a row,
		// the rate in force now held over the whole run.
		out.Points = []limitPoint{{At: start, Effective: l.EffectiveRate, Estimate: math.NaN(), Configured: configured,
			Cause: "effective " + human.Rate(l.EffectiveRate) + ", configured " + human.Rate(l.Rate) +
				": no change of limiter " + l.Name + " is recorded up to the run's end"}}
		return out, nil
	}
	if len(before) == 1 {
		c := before[0]
		out.Points = append(out.Points, limitPoint{At: start, Effective: c.Rate, Estimate: estimateOf(c),
			Configured: configured, Cause: "in force at the start (" + describeChange(c) + ")"})
	} else {
		out.Points = append(out.Points, limitPoint{At: start, Effective: math.NaN(), Estimate: math.NaN(),
			Configured: configured, Cause: "configured " + human.Rate(configured) + " at the start"})
	}
	for _, c := range during {
		if c.Cause == limiter.CauseLimitSet {
			configured = c.Rate
		}
		out.Points = append(out.Points, limitPoint{At: c.At, Effective: c.Rate, Estimate: estimateOf(c),
			Configured: configured, Cause: describeChange(c)})
	}
	return out, nil
}

func estimateOf(c limiter.Change) float64 {
	if c.Estimate > 0 {
		return c.Estimate
	}
	return math.NaN()
}

// describeChange is a history row as the chart's hover text.
func describeChange(c limiter.Change) string {
	s := fmtTime(c.At) + ": " + c.Cause + ", effective " + human.Rate(c.Rate)
	if c.Estimate > 0 {
		s += ", estimate " + human.Rate(c.Estimate)
	}
	if c.Detail != "" {
		s += " — " + c.Detail
	}
	return s
}

// svgChart is a chart laid out for the page's inline SVG.
type svgChart struct {
	Width, Height            int
	Left, Right, Top, Bottom int
	Calls, Throttles, Done   string // polyline points
	// Configured, Effective and Estimate are step lines (path data): each
	// value holds from its change to the next.
	Configured, Effective, Estimate string
	Marks                           []svgMark // hover marks: throttles and limit changes
	YTicks, XTicks                  []svgTick
	Sampled                         bool
	// Truncated is true when only the last limit changes were read.
	Truncated bool
	Empty     bool
	Max       float64
}

type svgMark struct {
	X, Y  float64
	Title string
	Kind  string
}

type svgTick struct {
	X, Y  float64
	Label string
}

func newSVGChart(tr traffic, lim limits) svgChart {
	c := svgChart{Width: 900, Height: 280, Left: 56, Right: 40, Top: 16, Bottom: 36, Sampled: tr.Sampled, Truncated: lim.Truncated}
	if len(tr.Points) == 0 {
		c.Empty = true
		return c
	}
	start, end := tr.Start, tr.End
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	top := 1.0
	for _, p := range tr.Points {
		top = max(top, p.Calls, p.Throttles, p.Done)
	}
	for _, l := range lim.Points {
		for _, v := range []float64{l.Configured, l.Effective, l.Estimate} {
			if !math.IsNaN(v) {
				top = max(top, v)
			}
		}
	}
	top = niceCeil(top * 1.05)
	c.Max = top
	w := float64(c.Width - c.Left - c.Right)
	h := float64(c.Height - c.Top - c.Bottom)
	x := func(t time.Time) float64 {
		f := float64(t.Sub(start)) / float64(end.Sub(start))
		return float64(c.Left) + math.Max(0, math.Min(1, f))*w
	}
	y := func(v float64) float64 { return float64(c.Top) + h - math.Max(0, math.Min(1, v/top))*h }
	points := withIdleBins(tr, end)
	line := func(get func(trafficPoint) float64) string {
		var b strings.Builder
		for _, p := range points {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(p.At), y(get(p)))
		}
		return strings.TrimSpace(b.String())
	}
	c.Calls = line(func(p trafficPoint) float64 { return p.Calls })
	c.Throttles = line(func(p trafficPoint) float64 { return p.Throttles })
	c.Done = line(func(p trafficPoint) float64 { return p.Done })
	for _, p := range tr.Points {
		if p.Throttles > 0 {
			c.Marks = append(c.Marks, svgMark{X: x(p.At), Y: y(p.Throttles), Kind: "throttle",
				Title: fmt.Sprintf("%s: %s 429s of %s calls", fmtTime(p.At), human.Rate(p.Throttles), human.Rate(p.Calls))})
		}
	}
	// step draws one value of the limits as a step line that breaks where
	// the value is unknown.
	step := func(get func(limitPoint) float64) string {
		var b strings.Builder
		pen := false
		for i, l := range lim.Points {
			v := get(l)
			if math.IsNaN(v) {
				pen = false
				continue
			}
			to := end
			if i+1 < len(lim.Points) {
				to = lim.Points[i+1].At
			}
			if pen {
				fmt.Fprintf(&b, "V%.1f ", y(v))
			} else {
				fmt.Fprintf(&b, "M%.1f,%.1f ", x(l.At), y(v))
			}
			fmt.Fprintf(&b, "H%.1f ", x(to))
			pen = true
		}
		return strings.TrimSpace(b.String())
	}
	c.Configured = step(func(l limitPoint) float64 { return l.Configured })
	c.Effective = step(func(l limitPoint) float64 { return l.Effective })
	c.Estimate = step(func(l limitPoint) float64 { return l.Estimate })
	// One hover mark per change, but changes closer than markSpacing
	// share the first one's mark: a limit hunted for hours changes more
	// often than a chart has pixels, and every mark costs the page.
	var marks []svgMark
	merged := 0
	flush := func() {
		if merged > 0 {
			marks[len(marks)-1].Title += fmt.Sprintf(" (and %d more changes within %.0f px; the Limits page lists them all)", merged, markSpacing)
		}
		merged = 0
	}
	for _, l := range lim.Points {
		kind, v := "limit", l.Effective
		if math.IsNaN(v) {
			kind, v = "configured", l.Configured
		}
		if math.IsNaN(v) {
			continue
		}
		if n := len(marks); n > 0 && x(l.At)-marks[n-1].X < markSpacing {
			merged++
			continue
		}
		flush()
		marks = append(marks, svgMark{X: x(l.At), Y: y(v), Kind: kind, Title: l.Cause})
	}
	flush()
	c.Marks = append(c.Marks, marks...)
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		c.YTicks = append(c.YTicks, svgTick{X: float64(c.Left) - 6, Y: y(v), Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	for i := 0; i <= 4; i++ {
		t := start.Add(end.Sub(start) * time.Duration(i) / 4)
		c.XTicks = append(c.XTicks, svgTick{X: x(t), Y: float64(c.Height - c.Bottom + 18), Label: t.UTC().Format("15:04:05")})
	}
	return c
}

// withIdleBins returns an exact traffic's points with the bins that had no
// transition drawn at zero up to end: where the run was idle for 15 s the
// lines fall to the axis and stay there, instead of sloping from the last
// busy bin to the next. A zero point at each edge of an idle stretch is
// enough for a polyline. Sampled traffic is returned as it is: its points
// are averages between windows, which say nothing of idle bins.
func withIdleBins(tr traffic, end time.Time) []trafficPoint {
	if tr.Bin <= 0 || len(tr.Points) == 0 {
		return tr.Points
	}
	out := make([]trafficPoint, 0, len(tr.Points)+4)
	idle := func(from, to time.Time) { // the bins strictly between from and to
		if to.Sub(from) > tr.Bin*3/2 {
			out = append(out, trafficPoint{At: from.Add(tr.Bin)})
			if to.Sub(from) > tr.Bin*5/2 {
				out = append(out, trafficPoint{At: to.Add(-tr.Bin)})
			}
		}
	}
	for i, p := range tr.Points {
		if i > 0 {
			idle(tr.Points[i-1].At, p.At)
		}
		out = append(out, p)
	}
	// An open run idle since its last transition: zero up to now.
	if last := tr.Points[len(tr.Points)-1].At; end.Sub(last) > tr.Bin {
		idle(last, end.Add(tr.Bin))
	}
	return out
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
