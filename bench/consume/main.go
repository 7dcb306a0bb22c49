// Command consume measures the consumer end to end: a generated day is
// enqueued into a fresh database, the in-process provider simulator serves it
// over loopback HTTP with the scenario's rate limit and faults, and a
// Consumer with the shared limiter works the queue. Each scenario prints its
// figures against the targets of the design; -runs repeats it and prints the
// median of every figure.
//
//	go run ./bench/consume -scenario known-limit
//	go run ./bench/consume -scenario all -runs 3
//
// The database server is DATABASE_URL's when set, otherwise a throwaway
// cluster with stock durability (fsync and synchronous_commit on) started
// with pgserver. Every run gets its own database, dropped afterwards.
//
// The changing-limit scenario writes its per-second series to
// OUT/changing-limit.csv and a plot to OUT/changing-limit.png (OUT is -out,
// bench/out by default).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/reconcile/reconcile/internal/profile"
)

type options struct {
	scenario    string
	runs        int
	out         string
	concurrency int
	items       int
	cpuProfile  string
	verbose     bool
	waits       bool
	history     bool
	decrease    float64
	increase    float64
	recovery    time.Duration
	replot      string
	recordBatch int
	profile     string
}

func main() {
	var o options
	flag.StringVar(&o.scenario, "scenario", "all", "scenarios to run, separated by commas: "+strings.Join(scenarioNames(), ", ")+", or all")
	flag.StringVar(&o.profile, "profile", profile.DefaultName, "provider API the simulator speaks and the consumer reads: "+strings.Join(profile.BuiltinNames(), ", "))
	flag.IntVar(&o.runs, "runs", 1, "runs of each scenario; with more than one the median of every figure is printed")
	flag.StringVar(&o.out, "out", "bench/out", "directory for CSV and PNG files")
	flag.IntVar(&o.concurrency, "concurrency", 0, "consumer workers (0: the scenario's own)")
	flag.IntVar(&o.items, "items", 0, "items of the generated day (0: the scenario's own)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the runs to this file")
	flag.BoolVar(&o.verbose, "v", false, "log the consumer's warnings to stderr")
	flag.Float64Var(&o.decrease, "decrease", 0, "limiter Decrease (0: its default)")
	flag.Float64Var(&o.increase, "increase", 0, "limiter Increase (0: its default)")
	flag.DurationVar(&o.recovery, "recovery", 0, "limiter Recovery (0: its default, negative: off)")
	flag.StringVar(&o.replot, "replot", "", "only redraw the PNG beside this changing-limit CSV, then exit")
	flag.IntVar(&o.recordBatch, "record-batch", 0, "consumer RecordBatch (0: its default; 1: a transaction per result)")
	flag.BoolVar(&o.waits, "waits", false, "sample pg_stat_activity during each run and print what the backends waited on")
	flag.BoolVar(&o.history, "history", false, "print each run's limiter history: every change of the rate, from the run's start, with why")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.replot != "" {
		series, err := readSeriesCSV(o.replot)
		if err != nil {
			return err
		}
		return plotSeries(strings.TrimSuffix(o.replot, ".csv")+".png", series, nil, changingTitle)
	}
	var selected []scenario
	names := strings.Split(o.scenario, ",")
	for _, s := range scenarios() {
		if (o.scenario == "all" && !s.named) || slices.Contains(names, s.name) {
			selected = append(selected, s)
		}
	}
	for _, name := range names {
		if o.scenario != "all" && !slices.Contains(scenarioNames(), name) {
			return fmt.Errorf("-scenario: unknown scenario %q: want one of %s or all", name, strings.Join(scenarioNames(), ", "))
		}
	}
	if o.runs < 1 {
		return fmt.Errorf("-runs %d: want at least 1", o.runs)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	srv, err := openServer(ctx)
	if err != nil {
		return err
	}
	defer srv.close()
	fmt.Printf("server: %s\n", srv.describe(ctx))

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	failed := 0
	for _, s := range selected {
		if o.concurrency > 0 {
			s.spec.concurrency = o.concurrency
		}
		if o.items > 0 {
			s.spec.items = o.items
		}
		fmt.Printf("\n== %s: %s\n", s.name, s.about)
		var all [][]figure
		for i := range o.runs {
			if s.multi != nil {
				figs, err := s.multi(ctx, srv, o)
				if err != nil {
					return fmt.Errorf("%s run %d: %w", s.name, i+1, err)
				}
				fmt.Printf("run %d (load average %s):\n", i+1, loadAverage())
				printFigures(figs)
				all = append(all, figs)
				continue
			}
			res, err := execute(ctx, srv, s.spec, o)
			if err != nil {
				return fmt.Errorf("%s run %d: %w", s.name, i+1, err)
			}
			figs := s.figures(res)
			if s.write != nil {
				if err := s.write(o.out, res); err != nil {
					return fmt.Errorf("%s run %d: %w", s.name, i+1, err)
				}
			}
			fmt.Printf("run %d (load average %s):\n", i+1, loadAverage())
			printFigures(figs)
			all = append(all, figs)
		}
		if o.runs > 1 {
			fmt.Printf("median of %d runs:\n", o.runs)
			med := medians(all)
			printFigures(med)
			for _, f := range med {
				if f.check != nil && !f.check(f.value) {
					failed++
				}
			}
		} else {
			for _, f := range all[0] {
				if f.check != nil && !f.check(f.value) {
					failed++
				}
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d figures missed their target", failed)
	}
	return nil
}

// figure is one measured value with its target.
type figure struct {
	name   string
	value  float64
	unit   string
	target string
	check  func(float64) bool // nil: informational
	values []float64          // every run's value, for medians
}

func printFigures(fs []figure) {
	for _, f := range fs {
		verdict := ""
		if f.check != nil {
			verdict = "FAIL"
			if f.check(f.value) {
				verdict = "pass"
			}
		}
		runs := ""
		if len(f.values) > 1 {
			parts := make([]string, len(f.values))
			for i, v := range f.values {
				parts[i] = fmt.Sprintf("%.4g", v)
			}
			runs = " runs [" + strings.Join(parts, ", ") + "]"
		}
		fmt.Printf("  %-34s %12.4g %-9s %-22s %s%s\n", f.name, f.value, f.unit, f.target, verdict, runs)
	}
}

// medians returns each figure's median over the runs.
func medians(runs [][]figure) []figure {
	out := make([]figure, len(runs[0]))
	for i := range out {
		out[i] = runs[0][i]
		vals := make([]float64, len(runs))
		for r := range runs {
			vals[r] = runs[r][i].value
		}
		out[i].values = vals
		s := slices.Clone(vals)
		slices.Sort(s)
		if n := len(s); n%2 == 1 {
			out[i].value = s[n/2]
		} else {
			out[i].value = (s[n/2-1] + s[n/2]) / 2
		}
	}
	return out
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
