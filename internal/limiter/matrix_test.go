package limiter

import (
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// matrixShape is one shape of provider limit.
type matrixShape struct {
	name    string
	alg     providersim.Algorithm
	burst   float64       // the buckets' size in seconds of the highest rate (0: one call)
	window  time.Duration // the windows' length
	headers bool          // IETF RateLimit fields
}

var matrixShapes = []matrixShape{
	{name: "bucket-1call", alg: providersim.TokenBucket},
	{name: "bucket-0.1s", alg: providersim.TokenBucket, burst: 0.1},
	{name: "bucket-1s", alg: providersim.TokenBucket, burst: 1},
	{name: "bucket-5s", alg: providersim.TokenBucket, burst: 5},
	{name: "log-1s", alg: providersim.SlidingLog, window: time.Second},
	{name: "log-10s", alg: providersim.SlidingLog, window: 10 * time.Second},
	{name: "window-1s", alg: providersim.FixedWindow, window: time.Second},
	{name: "window-1s-ietf", alg: providersim.FixedWindow, window: time.Second, headers: true},
	// Shopify's REST limit: a bucket that drains in 20 s.
	{name: "leaky-20s", alg: providersim.LeakyBucket, burst: 20},
}

var matrixRates = []float64{5, 20, 200, 1000}

var matrixRetryAfter = []raStyle{
	{style: providersim.RetryAfterSeconds, min: time.Second},
	{style: providersim.RetryAfterSeconds, min: 2 * time.Second},
	{style: providersim.RetryAfterExact},
	{style: providersim.RetryAfterAbsent},
}

var matrixLatencies = []time.Duration{0, 20 * time.Millisecond, 200 * time.Millisecond}

var matrixProcesses = []int{1, 4}

// matrixPattern is how the limit moves over a night: the highest rate r
// of the cell at the given times, a quarter of it otherwise.
type matrixPattern struct {
	name string
	// steps: the rate's factor (of r) from each time on.
	steps []providersim.Step
}

const matrixLength = 120 * time.Second

var matrixPatterns = []matrixPattern{
	{"steady", []providersim.Step{{At: 0, Rate: 1}}},
	{"rise-x4", []providersim.Step{{At: 0, Rate: 0.25}, {At: 40 * time.Second, Rate: 1}}},
	{"fall-x4", []providersim.Step{{At: 0, Rate: 1}, {At: 40 * time.Second, Rate: 0.25}}},
	{"fall-rise", []providersim.Step{{At: 0, Rate: 1}, {At: 40 * time.Second, Rate: 0.25}, {At: 80 * time.Second, Rate: 1}}},
	{"zigzag", []providersim.Step{{At: 0, Rate: 1}, {At: 24 * time.Second, Rate: 0.25}, {At: 48 * time.Second, Rate: 1},
		{At: 72 * time.Second, Rate: 0.25}, {At: 96 * time.Second, Rate: 1}}},
}

// matrixFamily is what the limiter is told when the night starts.
type matrixFamily int

const (
	// familyUnknown: the limit set is three times the provider's.
	familyUnknown matrixFamily = iota
	// familyTold: the limit set is the provider's, exactly.
	familyTold
	// familyStored: an earlier night measured the provider.
	familyStored
)

func (f matrixFamily) String() string { return [...]string{"unknown", "told", "stored"}[f] }

// matrixCell is one simulated night of the matrix.
type matrixCell struct {
	family  matrixFamily
	shape   matrixShape
	rate    float64
	ra      raStyle
	latency time.Duration
	procs   int
	pattern matrixPattern
	phase   int // see matrixPhases
}

func (c matrixCell) String() string {
	s := fmt.Sprintf("%s %s %g/s %s RA %s latency %v %d proc", c.family, c.shape.name, c.rate, c.pattern.name, c.ra,
		c.latency, c.procs)
	if c.phase > 0 {
		s += fmt.Sprintf(" phase %d", c.phase)
	}
	return s
}

// shapeNamed is the matrix's shape of that name.
func shapeNamed(name string) matrixShape {
	return matrixShapes[slices.IndexFunc(matrixShapes, func(s matrixShape) bool { return s.name == name })]
}

// bucket is the provider's bucket (or window quota) in calls.
func (c matrixCell) bucket() int {
	if c.shape.window > 0 {
		return max(1, int(math.Floor(c.rate*c.shape.window.Seconds())))
	}
	return max(1, int(math.Round(c.shape.burst*c.rate)))
}

func (c matrixCell) spec() nightSpec {
	sched := make(providersim.Schedule, len(c.pattern.steps))
	for i, st := range c.pattern.steps {
		sched[i] = providersim.Step{At: st.At, Rate: st.Rate * c.rate}
	}
	sp := nightSpec{alg: c.shape.alg, sched: sched, window: c.shape.window, headers: c.shape.headers, ra: c.ra,
		latency: c.latency, procs: c.procs, length: matrixLength, ceiling: 3 * c.rate, told: max(10, int(c.rate/5)),
		offset: time.Duration(c.phase) * phaseStart, jitter: time.Duration(c.phase) * phaseLatency}
	if c.shape.window == 0 {
		sp.burst = c.bucket()
	}
	switch c.family {
	case familyTold:
		sp.ceiling, sp.told = c.rate, c.bucket()
		if c.shape.window > 0 {
			// Paced at the rate, a window's quota is never exceeded;
			// a burst could be.
			sp.told = 1
		}
	case familyStored:
		// What an earlier night stored: its estimate, a lower bound, 1% under.
		sp.stored = [2]float64{0.99 * c.rate, float64(c.bucket())}
		if c.shape.window > 0 {
			sp.stored[1] = 1
		}
	}
	return sp
}

// matrixFull runs every cell of the matrix instead of the suite's
// cross-section: go test -run TestDiscoveryMatrix -v ./internal/limiter/ -matrix.full
var matrixFull = flag.Bool("matrix.full", false, "run every cell of the discovery matrix (about 6,000 nights), not the suite's cross-section")

// matrixOnly and matrixTrace narrow the matrix to the cells whose names
// contain a string and log each one's history and per-second calls:
// go test -run TestDiscoveryMatrix -v ./internal/limiter/ -matrix.full -matrix.only 'unknown bucket-1s 200/s steady RA 1s latency 0s 1 proc' -matrix.trace
var (
	matrixOnly  = flag.String("matrix.only", "", "run only the matrix cells whose names contain this")
	matrixTrace = flag.Bool("matrix.trace", false, "log each matrix cell's history of rate changes and accepted/refused calls a second")
	// matrixFloorsOut prints matrixFloors as measured on the code under
	// test, to replace it after a change that improves the worst cells:
	// go test -run TestDiscoveryMatrix -v ./internal/limiter/ -matrix.floors
	matrixFloorsOut = flag.Bool("matrix.floors", false, "print the regression bounds of the cross-section as measured, as a Go literal")
	// matrixCellsOut writes every cell's figures, one line per cell and
	// figure ("cell|figure|value"), so that two versions can be compared
	// over the whole distribution of a row and not only its worst cell,
	// which a change of the discovery moves by chance as much as by merit:
	// go test -run TestDiscoveryMatrix ./internal/limiter/ -matrix.full -matrix.cells /tmp/cells.txt
	matrixCellsOut = flag.String("matrix.cells", "", "write every cell's figures to this file, one line per cell and figure")
	// matrixPhaseList runs every cell at the phases given instead of its
	// own (the suite's) or phase 0 (-matrix.full): one night is a single
	// draw, and two versions compare fairly only over several, each
	// row's worst cell then holding its median over them:
	// go test -run TestDiscoveryMatrix ./internal/limiter/ -matrix.full -matrix.phases 0,2,4 -matrix.cells /tmp/cells.txt
	matrixPhaseList = flag.String("matrix.phases", "", "run every cell at these phases, separated by commas (default: the suite's own; 0 with -matrix.full)")
)

// parsePhases reads a -matrix.phases list: phases from 0 on, separated by
// commas.
func parsePhases(list string) ([]int, error) {
	var phases []int
	for _, f := range strings.Split(list, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p < 0 {
			return nil, fmt.Errorf("-matrix.phases: %q is not a phase (a whole number from 0 on)", f)
		}
		if !slices.Contains(phases, p) {
			phases = append(phases, p)
		}
	}
	return phases, nil
}

// suiteCells is the cross-section of the matrix the ordinary suite runs,
// each cell at each of its phases (matrixPhases): every shape at every rate
// and Retry-After for the unknown steady limit, every shape under every
// changing pattern, every shape and rate told the limit and started from a
// stored one; the latency and the process count turn with the cell so that
// each of their values meets each shape, rate and Retry-After. It takes
// about 6 s, 33-39 s under the race detector on two cores.
func suiteCells(all []matrixCell) []matrixCell {
	index := func(c matrixCell) (shape, rate, ra, lat, procs, pattern int) {
		shape = slices.IndexFunc(matrixShapes, func(s matrixShape) bool { return s.name == c.shape.name })
		rate = slices.Index(matrixRates, c.rate)
		ra = slices.Index(matrixRetryAfter, c.ra)
		lat = slices.Index(matrixLatencies, c.latency)
		procs = slices.Index(matrixProcesses, c.procs)
		pattern = slices.IndexFunc(matrixPatterns, func(p matrixPattern) bool { return p.name == c.pattern.name })
		return
	}
	var out []matrixCell
	for _, c := range all {
		shape, rate, ra, lat, procs, pattern := index(c)
		keep := false
		switch {
		case c.family == familyUnknown && pattern == 0:
			keep = true
		case c.family == familyUnknown:
			// One rate and one Retry-After per shape and pattern.
			keep = rate == (shape+pattern)%len(matrixRates) && ra == (shape+2*pattern)%len(matrixRetryAfter)
		default:
			// One Retry-After per shape and rate.
			keep = ra == (shape+rate)%len(matrixRetryAfter)
		}
		turn := shape + rate + ra + pattern + int(c.family)
		if keep && lat == turn%len(matrixLatencies) && procs == turn%len(matrixProcesses) {
			out = append(out, c)
		}
	}
	return withPhases(out, nil)
}

// A cell's phase is when its processes start after the provider's clock
// (phase × phaseStart) and how much longer than its latency every answer
// takes (phase × phaseLatency). One night is a single draw: where the
// processes' leases and reads fall against the provider's refills, windows
// and Retry-Afters and the limit's steps decides whether a 429 comes a
// lease earlier or later, and from there the night diverges; a change of a
// constant by a fraction of a per cent moves one night's figures by as much
// as fifteen points while their mean over many nights moves by less than
// one. Changing the phase changes nothing of the shape tested: the limit,
// its steps, the bucket, the Retry-After, the latency within 4 ms and the
// processes are the same, and the later start lowers the supply a night is
// measured against by at most 80 ms of 120 s (0.07%). Both parts are
// needed: a full bucket has no phase, so a steady token or leaky bucket
// night only shifts with its start, and a latency a few milliseconds
// longer moves each 429's arrival against the leases instead.
const (
	phaseStart   = 20 * time.Millisecond
	phaseLatency = time.Millisecond
)

// matrixPhases are the phases at which the suite runs a cell of its
// cross-section, and its regression bound holds the cell's median over
// them, which one unlucky phase cannot move. A row of a changing pattern is
// a single cell: it runs at five phases; the other rows hold four or
// sixteen cells, each run at three, which keeps the suite under 40 s with
// the race detector.
func matrixPhases(c matrixCell) []int {
	if c.pattern.name != "steady" {
		return []int{0, 1, 2, 3, 4}
	}
	return []int{0, 2, 4}
}

// withPhases returns every cell at each of the given phases, or when none
// are given at each of its own (matrixPhases).
func withPhases(cells []matrixCell, phases []int) []matrixCell {
	var out []matrixCell
	for _, c := range cells {
		ps := phases
		if len(ps) == 0 {
			ps = matrixPhases(c)
		}
		for _, p := range ps {
			c.phase = p
			out = append(out, c)
		}
	}
	return out
}

// matrixCells lists every cell: the unknown limit in every shape, rate,
// Retry-After, latency, process count and pattern; the told and stored
// starts for steady limits.
func matrixCells() []matrixCell {
	var cells []matrixCell
	for _, family := range []matrixFamily{familyUnknown, familyTold, familyStored} {
		for _, shape := range matrixShapes {
			for _, rate := range matrixRates {
				for _, ra := range matrixRetryAfter {
					for _, latency := range matrixLatencies {
						for _, procs := range matrixProcesses {
							for _, pattern := range matrixPatterns {
								if family != familyUnknown && pattern.name != "steady" {
									continue
								}
								cells = append(cells, matrixCell{family: family, shape: shape, rate: rate, ra: ra,
									latency: latency, procs: procs, pattern: pattern})
							}
						}
					}
				}
			}
		}
	}
	return cells
}

// steadyCells are the matrix's cells of family under a steady limit and
// the first Retry-After style, for each of shapes (by name), rates,
// latencies and process counts: the slices the focused tests run.
func steadyCells(family matrixFamily, shapes []string, rates []float64, latencies []time.Duration, procs []int) []matrixCell {
	var cells []matrixCell
	for _, shape := range shapes {
		for _, rate := range rates {
			for _, latency := range latencies {
				for _, n := range procs {
					cells = append(cells, matrixCell{family: family, shape: shapeNamed(shape), rate: rate,
						ra: matrixRetryAfter[0], latency: latency, procs: n, pattern: matrixPatterns[0]})
				}
			}
		}
	}
	return cells
}

// matrixFigure is one figure of a cell with the discovery's target for it.
type matrixFigure struct {
	name   string
	value  float64
	target float64
	most   bool // the target is an upper bound
	// invariant: the target must hold in every cell, whatever the
	// provider; the test fails on any cell that misses it. The other
	// targets are reported, and guarded against regression by
	// matrixFloors.
	invariant bool
}

// worse reports whether a is worse than b for a figure bounded from above
// (most) or from below.
func worse(most bool, a, b float64) bool {
	if most {
		return a > b+1e-9
	}
	return a < b-1e-9
}

func (f matrixFigure) ok() bool { return !worse(f.most, f.value, f.target) }

// matrixResult is a cell's figures.
type matrixResult struct {
	cell    matrixCell
	figures []matrixFigure
}

// The discovery's targets: the share of what the provider allows that a
// night not told the limit reaches under a steady limit and a changing one,
// and the seconds after a ×4 rise until it is used (three whole seconds
// within 10% of the new limit) and after a fall until it is obeyed.
const (
	steadyTarget   = 0.95
	changingTarget = 0.90
	riseTarget     = 5
	fallTarget     = 2
)

// figures measures a night of the cell against the discovery's targets.
func (c matrixCell) figures(r nightResult) []matrixFigure {
	var fs []matrixFigure
	secs := int(matrixLength / time.Second)
	switch c.family {
	case familyTold:
		_, _, late := r.count(1, secs)
		fs = append(fs,
			matrixFigure{name: "efficiency", value: r.efficiency(), target: 0.99},
			// Told the provider's limit, the limiter keeps within it.
			matrixFigure{name: "429s after 1 s", value: float64(late), target: 0, most: true, invariant: true})
	case familyStored:
		_, a, _ := r.count(1, 2)
		fs = append(fs, matrixFigure{name: "second 2 / limit", value: float64(a) / c.rate, target: 0.9})
	default:
		if c.pattern.name == "steady" {
			fs = append(fs,
				matrixFigure{name: "efficiency", value: r.efficiency(), target: steadyTarget},
				matrixFigure{name: "429 share after 10 s", value: r.throttleShare(10), target: 0.01, most: true})
			break
		}
		fs = append(fs, matrixFigure{name: "efficiency", value: r.efficiency(), target: changingTarget})
		steps := c.pattern.steps
		for i := 1; i < len(steps); i++ {
			at := int(steps[i].At / time.Second)
			end := secs
			if i+1 < len(steps) {
				end = int(steps[i+1].At / time.Second)
			}
			limit := steps[i].Rate * c.rate
			if steps[i].Rate > steps[i-1].Rate {
				fs = append(fs, matrixFigure{name: "rise used after", value: float64(r.risenBy(at, limit, end-at)), target: riseTarget, most: true})
			} else {
				fs = append(fs, matrixFigure{name: "fall obeyed after", value: float64(r.obeyedBy(at, limit, end-at)), target: fallTarget, most: true})
			}
		}
	}
	calls, accepted, _ := r.count(0, secs)
	fs = append(fs,
		matrixFigure{name: "calls in a Retry-After window", value: float64(r.early), target: 0, most: true, invariant: true},
		// Without faults the floor is one call an item: every 429 is a
		// call more.
		matrixFigure{name: "calls per item", value: float64(calls) / float64(max(accepted, 1)), target: 1.02, most: true})
	return fs
}

// runMatrix simulates every cell on all cores and returns the results in
// the cells' order.
func runMatrix(cells []matrixCell) []matrixResult {
	out := make([]matrixResult, len(cells))
	work := make(chan int)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range work {
				r := simulateNight(cells[i].spec())
				out[i] = matrixResult{cell: cells[i], figures: cells[i].figures(r)}
			}
		})
	}
	for i := range cells {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// TestDiscoveryMatrix runs the limit discovery against the shapes a
// provider's limit can have (the suite's cross-section of matrixCells, or
// every cell with -matrix.full) and prints, for each start, shape, pattern
// and figure, the worst cell against the discovery's target and how many
// cells miss it, of which how many (in brackets) are conflicting: cells
// where no limiter meets both a steady night's target and a rise's (see
// conflictLoss). It fails when a cell misses an invariant (no call inside a
// known Retry-After window; told the limit, no 429 after the first second),
// and, in the cross-section, when a row's worst cell's median over its
// phases (matrixPhases) is worse than its regression bound in matrixFloors.
func TestDiscoveryMatrix(t *testing.T) {
	t.Parallel()
	cells := matrixCells()
	if !*matrixFull {
		cells = suiteCells(cells)
	}
	if *matrixPhaseList != "" {
		phases, err := parsePhases(*matrixPhaseList)
		if err != nil {
			t.Fatal(err)
		}
		cells = withPhases(slices.DeleteFunc(cells, func(c matrixCell) bool { return c.phase != 0 }), phases)
	}
	if *matrixOnly != "" {
		cells = slices.DeleteFunc(cells, func(c matrixCell) bool { return !strings.Contains(c.String(), *matrixOnly) })
	}
	start := time.Now()
	results := runMatrix(cells)
	if *matrixTrace {
		for _, r := range results {
			sim := simulateNight(r.cell.spec())
			t.Logf("%v:%s\n%s", r.cell, formatChanges(sim.changes), formatNight(sim.series))
		}
	}
	t.Logf("%d cells in %v", len(cells), time.Since(start).Round(time.Millisecond))
	rows := matrixRows(results)
	t.Log("\n" + matrixTable(rows))
	if *matrixFloorsOut {
		t.Log("\n" + matrixFloorsLiteral(rows))
	}
	if *matrixCellsOut != "" {
		if err := os.WriteFile(*matrixCellsOut, []byte(matrixCellLines(results)), 0o644); err != nil {
			t.Fatalf("write the cells' figures: %v", err)
		}
	}
	failed := 0
	fail := func(format string, args ...any) {
		if failed++; failed <= 40 {
			t.Errorf(format, args...)
		}
	}
	for _, r := range results {
		for _, f := range r.figures {
			if f.invariant && !f.ok() {
				fail("%v: %s %.4g, want %s %.4g in every cell", r.cell, f.name, f.value, bound(f.most), f.target)
			}
		}
	}
	if !*matrixFull && *matrixOnly == "" {
		for _, w := range rows {
			floor, ok := matrixFloors[w.key.String()]
			switch {
			case !ok && guarded[w.key.figure] > 0:
				fail("%s: no regression bound in matrixFloors (its worst cell's median: %.4g)", w.key, w.median)
			case ok && worse(w.f.most, w.median, floor):
				fail("%s: worst cell's median %.4g (%v), worse than its regression bound %.4g", w.key, w.median,
					w.medianCell, floor)
			}
		}
	}
	if failed > 40 {
		t.Errorf("... %d misses in all", failed)
	}
}

// matrixCellLines is every figure of every cell but the invariants (the
// test checks those), one line each: "cell|figure|value".
func matrixCellLines(results []matrixResult) string {
	var sb strings.Builder
	for _, r := range results {
		for _, f := range r.figures {
			if !f.invariant {
				fmt.Fprintf(&sb, "%v|%s|%.4f\n", r.cell, f.name, f.value)
			}
		}
	}
	return sb.String()
}

// bound names the side a target bounds.
func bound(most bool) string {
	if most {
		return "<="
	}
	return ">="
}

// matrixKey names a row of the table: the cells of one start, shape and
// pattern, one figure.
type matrixKey struct{ family, shape, pattern, figure string }

func (k matrixKey) String() string {
	return k.family + " " + k.shape + " " + k.pattern + " " + k.figure
}

// matrixRow is a row's worst night, how many of its nights miss the
// target, and the figure its regression bound holds: the worst of its
// cells' medians over their phases (see matrixPhases).
type matrixRow struct {
	key  matrixKey
	f    matrixFigure
	cell matrixCell
	n    int
	miss int
	// conflict counts the misses of a steady night's efficiency or a
	// rise's time whose cell is conflicting: no limiter meets both there.
	conflict int
	// median is the worst cell's median, of the cell medianCell; bound
	// is the worst any cell's median may become by chance: the median
	// less (or plus) the cell's spread over its phases, or the figure's
	// least margin in guarded when wider.
	median, bound float64
	medianCell    matrixCell
	nights        map[string][]float64 // a cell's nights, by its name at phase 0
	cells         []matrixCell
}

// matrixRows is the worst night and the worst cell's median of every
// figure per start, shape and pattern, in the cells' order.
func matrixRows(results []matrixResult) []*matrixRow {
	byKey := map[matrixKey]*matrixRow{}
	losses := map[string]time.Duration{}
	var rows []*matrixRow
	for _, r := range results {
		for _, f := range r.figures {
			k := matrixKey{r.cell.family.String(), r.cell.shape.name, r.cell.pattern.name, f.name}
			w, ok := byKey[k]
			if !ok {
				w = &matrixRow{key: k, f: f, cell: r.cell, nights: map[string][]float64{}}
				byKey[k] = w
				rows = append(rows, w)
			}
			w.n++
			if !f.ok() {
				w.miss++
				steady := f.name == "efficiency" && r.cell.pattern.name == "steady"
				if (steady || f.name == "rise used after") && r.cell.conflicting(losses) {
					w.conflict++
				}
			}
			if worse(f.most, f.value, w.f.value) {
				w.f, w.cell = f, r.cell
			}
			c := r.cell
			c.phase = 0
			name := c.String()
			if _, ok := w.nights[name]; !ok {
				w.cells = append(w.cells, c)
			}
			w.nights[name] = append(w.nights[name], f.value)
		}
	}
	for _, w := range rows {
		for i, c := range w.cells {
			vs := w.nights[c.String()]
			m := median(vs)
			if i == 0 || worse(w.f.most, m, w.median) {
				w.median, w.medianCell = m, c
			}
			margin := max(guarded[w.key.figure], slices.Max(vs)-slices.Min(vs))
			b := m - margin
			if w.f.most {
				b = m + margin
			}
			if i == 0 || worse(w.f.most, b, w.bound) {
				w.bound = b
			}
		}
	}
	return rows
}

// median is the median of vs (the mean of the middle two of an even count).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// matrixTable prints the rows as one Markdown table.
func matrixTable(rows []*matrixRow) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| start | shape | pattern | figure | worst | target | missed (in conflict) | worst cell's median | regression bound | worst cell |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range rows {
		name := w.key.figure
		if w.f.invariant {
			name += " (always)"
		}
		floor := ""
		if v, ok := matrixFloors[w.key.String()]; ok {
			floor = bound(w.f.most) + " " + formatFigure(w.key.figure, v)
		}
		missed := fmt.Sprintf("%d/%d", w.miss, w.n)
		if w.conflict > 0 {
			missed += fmt.Sprintf(" (%d)", w.conflict)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %s | %s %s | %s | %s | %s | %g/s RA %s latency %v, %d proc%s |\n",
			w.key.family, w.key.shape, w.key.pattern, name, formatFigure(w.key.figure, w.f.value), bound(w.f.most),
			formatFigure(w.key.figure, w.f.target), missed, formatFigure(w.key.figure, w.median), floor,
			w.cell.rate, w.cell.ra, w.cell.latency, w.cell.procs, startOf(w.cell))
	}
	return sb.String()
}

// startOf names a night's phase when it is not 0.
func startOf(c matrixCell) string {
	if c.phase == 0 {
		return ""
	}
	return fmt.Sprintf(", phase %d", c.phase)
}

// formatFigure writes shares as percentages.
func formatFigure(figure string, v float64) string {
	if strings.Contains(figure, "efficiency") || strings.Contains(figure, "share") || strings.Contains(figure, "limit") {
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	return fmt.Sprintf("%.4g", v)
}

// guarded are the figures matrixFloors bounds, with the least margin a
// bound leaves below (or above) a cell's median measured when it was set;
// the margin is the cell's spread over its phases when wider, and a row's
// bound is the worst of its cells': a bound lets each cell's median move as
// far as the phase alone moved its nights, and no further, so a miss is a
// change beyond a night's chance. The least margins are the resolution of each figure that counts:
// a point of efficiency (and of a 429 share), two calls in a hundred per
// item (the target's own tolerance), five points of the second second's
// calls (one call of a second at 20/s). The times to use a rise or obey a fall are not
// bounded: their worst cell is often the whole span (never), and the
// changing patterns' efficiency bounds what they cost.
var guarded = map[string]float64{
	"efficiency":           0.01,
	"second 2 / limit":     0.05,
	"429 share after 10 s": 0.01,
	"calls per item":       0.02,
}

// matrixFloorsLiteral is matrixFloors as measured on rows.
func matrixFloorsLiteral(rows []*matrixRow) string {
	var sb strings.Builder
	sb.WriteString("var matrixFloors = map[string]float64{\n")
	for _, w := range rows {
		if _, ok := guarded[w.key.figure]; !ok {
			continue
		}
		// Rounded outwards: a bound no tighter than measured.
		v := math.Floor(w.bound*1000) / 1000
		if w.f.most {
			v = math.Ceil(w.bound*1000) / 1000
		}
		fmt.Fprintf(&sb, "\t%q: %.3f,\n", w.key.String(), v)
	}
	sb.WriteString("}\n")
	return sb.String()
}

// matrixFloors are regression bounds of the suite's cross-section, measured
// on this code with the margins of guarded (-matrix.floors prints them): the
// worst cell's median over its phases must stay at least this good in each
// row. They are not the
// discovery's targets (the table's target column); where a row misses its
// target, the bound only keeps it from getting worse.
var matrixFloors = map[string]float64{
	"unknown bucket-1call steady efficiency":             0.739,
	"unknown bucket-1call steady 429 share after 10 s":   0.034,
	"unknown bucket-1call steady calls per item":         1.065,
	"unknown bucket-1call zigzag efficiency":             0.721,
	"unknown bucket-1call zigzag calls per item":         1.115,
	"unknown bucket-1call rise-x4 efficiency":            0.850,
	"unknown bucket-1call rise-x4 calls per item":        1.044,
	"unknown bucket-1call fall-x4 efficiency":            0.795,
	"unknown bucket-1call fall-x4 calls per item":        1.030,
	"unknown bucket-1call fall-rise efficiency":          0.847,
	"unknown bucket-1call fall-rise calls per item":      1.072,
	"unknown bucket-0.1s steady efficiency":              0.608,
	"unknown bucket-0.1s steady 429 share after 10 s":    0.026,
	"unknown bucket-0.1s steady calls per item":          1.075,
	"unknown bucket-0.1s fall-rise efficiency":           0.865,
	"unknown bucket-0.1s fall-rise calls per item":       1.110,
	"unknown bucket-0.1s zigzag efficiency":              0.511,
	"unknown bucket-0.1s zigzag calls per item":          1.060,
	"unknown bucket-0.1s rise-x4 efficiency":             0.932,
	"unknown bucket-0.1s rise-x4 calls per item":         1.038,
	"unknown bucket-0.1s fall-x4 efficiency":             0.784,
	"unknown bucket-0.1s fall-x4 calls per item":         1.028,
	"unknown bucket-1s steady efficiency":                0.870,
	"unknown bucket-1s steady 429 share after 10 s":      0.041,
	"unknown bucket-1s steady calls per item":            1.062,
	"unknown bucket-1s fall-x4 efficiency":               0.986,
	"unknown bucket-1s fall-x4 calls per item":           1.122,
	"unknown bucket-1s fall-rise efficiency":             0.969,
	"unknown bucket-1s fall-rise calls per item":         1.033,
	"unknown bucket-1s zigzag efficiency":                0.988,
	"unknown bucket-1s zigzag calls per item":            1.031,
	"unknown bucket-1s rise-x4 efficiency":               0.972,
	"unknown bucket-1s rise-x4 calls per item":           1.021,
	"unknown bucket-5s steady efficiency":                0.978,
	"unknown bucket-5s steady 429 share after 10 s":      0.099,
	"unknown bucket-5s steady calls per item":            1.114,
	"unknown bucket-5s rise-x4 efficiency":               0.955,
	"unknown bucket-5s rise-x4 calls per item":           1.110,
	"unknown bucket-5s fall-x4 efficiency":               0.987,
	"unknown bucket-5s fall-x4 calls per item":           1.121,
	"unknown bucket-5s fall-rise efficiency":             0.978,
	"unknown bucket-5s fall-rise calls per item":         1.025,
	"unknown bucket-5s zigzag efficiency":                0.988,
	"unknown bucket-5s zigzag calls per item":            1.042,
	"unknown log-1s steady efficiency":                   0.355,
	"unknown log-1s steady 429 share after 10 s":         0.090,
	"unknown log-1s steady calls per item":               1.130,
	"unknown log-1s zigzag efficiency":                   0.467,
	"unknown log-1s zigzag calls per item":               1.210,
	"unknown log-1s rise-x4 efficiency":                  0.770,
	"unknown log-1s rise-x4 calls per item":              1.060,
	"unknown log-1s fall-x4 efficiency":                  0.779,
	"unknown log-1s fall-x4 calls per item":              1.065,
	"unknown log-1s fall-rise efficiency":                0.930,
	"unknown log-1s fall-rise calls per item":            1.022,
	"unknown log-10s steady efficiency":                  0.743,
	"unknown log-10s steady 429 share after 10 s":        0.281,
	"unknown log-10s steady calls per item":              1.399,
	"unknown log-10s fall-rise efficiency":               0.857,
	"unknown log-10s fall-rise calls per item":           1.492,
	"unknown log-10s zigzag efficiency":                  0.763,
	"unknown log-10s zigzag calls per item":              1.142,
	"unknown log-10s rise-x4 efficiency":                 0.740,
	"unknown log-10s rise-x4 calls per item":             1.275,
	"unknown log-10s fall-x4 efficiency":                 0.891,
	"unknown log-10s fall-x4 calls per item":             1.118,
	"unknown window-1s steady efficiency":                0.575,
	"unknown window-1s steady 429 share after 10 s":      0.062,
	"unknown window-1s steady calls per item":            1.071,
	"unknown window-1s fall-x4 efficiency":               0.936,
	"unknown window-1s fall-x4 calls per item":           1.102,
	"unknown window-1s fall-rise efficiency":             0.778,
	"unknown window-1s fall-rise calls per item":         1.034,
	"unknown window-1s zigzag efficiency":                0.787,
	"unknown window-1s zigzag calls per item":            1.158,
	"unknown window-1s rise-x4 efficiency":               0.751,
	"unknown window-1s rise-x4 calls per item":           1.025,
	"unknown window-1s-ietf steady efficiency":           0.861,
	"unknown window-1s-ietf steady 429 share after 10 s": 0.026,
	"unknown window-1s-ietf steady calls per item":       1.043,
	"unknown window-1s-ietf rise-x4 efficiency":          0.740,
	"unknown window-1s-ietf rise-x4 calls per item":      1.071,
	"unknown window-1s-ietf fall-x4 efficiency":          0.947,
	"unknown window-1s-ietf fall-x4 calls per item":      1.040,
	"unknown window-1s-ietf fall-rise efficiency":        0.961,
	"unknown window-1s-ietf fall-rise calls per item":    1.021,
	"unknown window-1s-ietf zigzag efficiency":           0.965,
	"unknown window-1s-ietf zigzag calls per item":       1.025,
	"unknown leaky-20s zigzag efficiency":                0.986,
	"unknown leaky-20s zigzag calls per item":            1.084,
	"unknown leaky-20s steady efficiency":                0.978,
	"unknown leaky-20s steady 429 share after 10 s":      0.091,
	"unknown leaky-20s steady calls per item":            1.082,
	"unknown leaky-20s rise-x4 efficiency":               0.988,
	"unknown leaky-20s rise-x4 calls per item":           1.046,
	"unknown leaky-20s fall-x4 efficiency":               0.988,
	"unknown leaky-20s fall-x4 calls per item":           1.023,
	"unknown leaky-20s fall-rise efficiency":             0.988,
	"unknown leaky-20s fall-rise calls per item":         1.028,
	"told bucket-1call steady efficiency":                0.988,
	"told bucket-1call steady calls per item":            1.020,
	"told bucket-0.1s steady efficiency":                 0.988,
	"told bucket-0.1s steady calls per item":             1.020,
	"told bucket-1s steady efficiency":                   0.988,
	"told bucket-1s steady calls per item":               1.020,
	"told bucket-5s steady efficiency":                   0.988,
	"told bucket-5s steady calls per item":               1.020,
	"told log-1s steady efficiency":                      0.989,
	"told log-1s steady calls per item":                  1.020,
	"told log-10s steady efficiency":                     0.989,
	"told log-10s steady calls per item":                 1.020,
	"told window-1s steady efficiency":                   0.989,
	"told window-1s steady calls per item":               1.020,
	"told window-1s-ietf steady efficiency":              0.989,
	"told window-1s-ietf steady calls per item":          1.020,
	"told leaky-20s steady efficiency":                   0.988,
	"told leaky-20s steady calls per item":               1.020,
	"stored bucket-1call steady second 2 / limit":        0.929,
	"stored bucket-1call steady calls per item":          1.043,
	"stored bucket-0.1s steady second 2 / limit":         0.929,
	"stored bucket-0.1s steady calls per item":           1.030,
	"stored bucket-1s steady second 2 / limit":           0.929,
	"stored bucket-1s steady calls per item":             1.040,
	"stored bucket-5s steady second 2 / limit":           0.929,
	"stored bucket-5s steady calls per item":             1.045,
	"stored log-1s steady second 2 / limit":              0.929,
	"stored log-1s steady calls per item":                1.037,
	"stored log-10s steady second 2 / limit":             0.929,
	"stored log-10s steady calls per item":               1.153,
	"stored window-1s steady second 2 / limit":           0.929,
	"stored window-1s steady calls per item":             1.116,
	"stored window-1s-ietf steady second 2 / limit":      0.915,
	"stored window-1s-ietf steady calls per item":        1.020,
	"stored leaky-20s steady second 2 / limit":           0.929,
	"stored leaky-20s steady calls per item":             1.072,
}
