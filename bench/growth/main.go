// Command growth measures whether the ledger keeps its speed as it grows
// over years. In one throwaway cluster with stock durability it makes two
// databases: an empty ledger, and one generated in SQL with the given
// number of past nightly runs (550 runs of 18,000 items: 9.9 M items and
// 24.75 M transitions, the acked queue messages of the last 90 runs). On
// each it then runs the real binary on the same days of payments: enqueue of
// each day, `consume --until-done` against the unlimited provider simulator
// (the consumer's claim, call and recording rate); then it times `status`,
// `report --date` and `audit verify --date` of the last day, alternating
// between the two ledgers so that a moment's load weighs on both. It prints
// the figures side by side, and the plans of every statement of the last
// three commands on the big ledger (auto_explain, with ANALYZE and BUFFERS).
// With -old REV it also builds the binary of a git revision and times its
// `status` and `report --date` on the big ledger, alternating with this
// tree's, and says whether the two reports are the same. Last it enqueues
// one more day on the big ledger and, that run open, times `status`
// against the floor every command pays on the machine (the process's start,
// a connection and one statement from psql) and through a session-mode
// PgBouncer; the plans printed after it are of that state.
//
//	nice -n 10 go run ./bench/growth                 # about 15 GB in the temporary directory
//	nice -n 10 go run ./bench/growth -old main       # and main's status and report beside this tree's
//	go run ./bench/growth -runs 20 -items 2000       # a quick look
//	nice -n 10 go run ./bench/growth -keep           # and leave the cluster running to time commands by hand
//
// See generate for how the past runs are made (their hash chains are not
// real ones: `audit verify` is measured on the freshly consumed days only).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/sample"
	"github.com/reconcile/reconcile/migrations"
)

type options struct {
	runs, items, acked, days, repeat, concurrency, floor int
	old                                                  string
	keep                                                 bool
}

func main() {
	var o options
	flag.IntVar(&o.runs, "runs", 550, "past nightly runs in the big ledger")
	flag.IntVar(&o.items, "items", 18000, "items per run, past and measured")
	flag.IntVar(&o.acked, "acked", 90, "past runs whose acked queue messages are kept (the prune window)")
	flag.IntVar(&o.days, "days", 3, "days enqueued and consumed on each ledger")
	flag.IntVar(&o.repeat, "repeat", 5, "runs of status, report and audit verify (the median is printed)")
	flag.IntVar(&o.concurrency, "concurrency", 32, "consumer workers")
	flag.IntVar(&o.floor, "floor", 11, "runs of status with a run open, against the floor of any command (0: none, and no run left open)")
	flag.StringVar(&o.old, "old", "", "a git revision whose status and report are timed beside this tree's on the big ledger")
	flag.BoolVar(&o.keep, "keep", false, "leave the cluster running at the end, to time commands on the big ledger by hand (about 23 GB)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		log.Fatal(err)
	}
}

// figures are one ledger's measurements.
type figures struct {
	enqueue []time.Duration // per day
	consume time.Duration   // all days
	status  time.Duration
	report  time.Duration
	audit   time.Duration
	size    string
	reads   string // blocks read from outside shared buffers during the consume, by relation
}

func run(ctx context.Context, o options) error {
	fmt.Printf("load average at start: %s", loadavg())
	dir, err := os.MkdirTemp("", "reconcile-growth-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	c, err := pgserver.Start(ctx, pgserver.Config{Durable: true, Detachable: o.keep})
	if err != nil {
		return err
	}
	defer func() {
		if !o.keep {
			c.Stop()
			return
		}
		fmt.Printf("the cluster is left running: DATABASE_URL='%s' reconcile status; stop it with pg_ctl -D %s/data stop (as its owner) and rm -r %s\n",
			c.ConnString("big"), c.Detach(), c.Detach())
	}()
	admin, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	for _, db := range []string{"empty", "big"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			return err
		}
		if _, err := migrations.Up(ctx, c.ConnString(db)); err != nil {
			return err
		}
	}
	bin := filepath.Join(dir, "reconcile")
	if err := build(".", bin); err != nil {
		return err
	}
	var oldBin string
	if o.old != "" {
		if oldBin, err = buildRevision(o.old, dir); err != nil {
			return err
		}
	}

	first := payments.Date{Year: 2026, Month: time.October, Day: 24}
	big, err := pgx.Connect(ctx, c.ConnString("big"))
	if err != nil {
		return err
	}
	defer big.Close(ctx)
	t0 := time.Now()
	fmt.Printf("generating %d runs of %d items (%d acked runs kept in the queue)\n", o.runs, o.items, o.acked)
	err = generate(ctx, big, shape{runs: o.runs, items: o.items, acked: o.acked, before: first.Start(time.UTC)},
		func(name string, d time.Duration) { fmt.Printf("  %-32s %s\n", name, d.Round(time.Millisecond)) })
	if err != nil {
		return err
	}
	fmt.Printf("generated in %s\n", time.Since(t0).Round(time.Second))
	var items, transitions int64
	var itemsSize, transSize, queueSize, dbSize string
	if err := big.QueryRow(ctx, `SELECT (SELECT count(*) FROM items), (SELECT count(*) FROM transitions),
		pg_size_pretty(pg_total_relation_size('items')), pg_size_pretty(pg_total_relation_size('transitions')),
		pg_size_pretty(pg_total_relation_size('queue_messages')), pg_size_pretty(pg_database_size('big'))`).
		Scan(&items, &transitions, &itemsSize, &transSize, &queueSize, &dbSize); err != nil {
		return err
	}
	fmt.Printf("big ledger: %d items (%s with indexes), %d transitions (%s), queue_messages %s; database %s\n",
		items, itemsSize, transitions, transSize, queueSize, dbSize)

	// The days measured, the same files on both ledgers.
	var days []payments.Date
	var recs []provider.Record
	var files []string
	for i := range o.days {
		d := first.AddDays(i)
		path := filepath.Join(dir, "payments-"+d.String()+".csv")
		cfg := sample.Config{Date: d, Count: o.items, Seed: uint64(100 + i)}
		if err := writeDay(path, cfg); err != nil {
			return err
		}
		g, err := sample.New(cfg)
		if err != nil {
			return err
		}
		for p, ok := g.Next(); ok; p, ok = g.Next() {
			recs = append(recs, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
		}
		days, files = append(days, d), append(files, path)
	}
	sim, err := providersim.New(providersim.Config{Records: recs, Seed: 1})
	if err != nil {
		return err
	}
	srv := httptest.NewServer(sim)
	defer srv.Close()

	figs := map[string]*figures{}
	envs := map[string][]string{}
	for _, db := range []string{"empty", "big"} {
		env := append(os.Environ(), "DATABASE_URL="+c.ConnString(db), "RECONCILE_PROVIDER_URL="+srv.URL)
		envs[db] = env
		f, err := measure(ctx, c.ConnString(db), bin, env, o, days, files)
		if err != nil {
			return fmt.Errorf("%s ledger: %w", db, err)
		}
		if err := admin.QueryRow(ctx, `SELECT pg_size_pretty(pg_database_size($1))`, db).Scan(&f.size); err != nil {
			return err
		}
		figs[db] = f
	}

	last := days[len(days)-1].String()
	if err := timeReads(o, bin, envs, figs, last); err != nil {
		return err
	}
	fmt.Printf("\n%-46s %14s %14s\n", "", "empty ledger", fmt.Sprintf("%.1f M items", float64(items)/1e6))
	e, b := figs["empty"], figs["big"]
	for i, d := range days {
		fmt.Printf("%-46s %14s %14s\n", fmt.Sprintf("enqueue %d items (%s)", o.items, d), round(e.enqueue[i]), round(b.enqueue[i]))
	}
	n := float64(o.items * o.days)
	fmt.Printf("%-46s %14s %14s\n", fmt.Sprintf("consume --until-done %d items, items/s", o.items*o.days),
		fmt.Sprintf("%.0f", n/e.consume.Seconds()), fmt.Sprintf("%.0f", n/b.consume.Seconds()))
	fmt.Printf("%-46s %14s %14s\n", "status (median)", round(e.status), round(b.status))
	fmt.Printf("%-46s %14s %14s\n", "report --date "+last+" (median)", round(e.report), round(b.report))
	fmt.Printf("%-46s %14s %14s\n", "audit verify --date "+last+" (median)", round(e.audit), round(b.audit))
	fmt.Printf("%-46s %14s %14s\n", "database size", e.size, b.size)
	fmt.Printf("blocks read from disk or page cache during the consume, empty ledger: %s\n", e.reads)
	fmt.Printf("blocks read from disk or page cache during the consume, big ledger: %s\n", b.reads)
	fmt.Printf("load average at the end: %s", loadavg())
	if out, err := exec.Command("du", "-sh", c.SocketDir()).Output(); err == nil {
		fmt.Printf("cluster directory: %s", out)
	}
	if oldBin != "" {
		env := append(os.Environ(), "DATABASE_URL="+c.ConnString("big"))
		if err := compare(o, env, oldBin, bin, last); err != nil {
			return err
		}
	}

	if o.floor > 0 {
		// A further day enqueued and not consumed: a night in progress.
		open := days[len(days)-1].AddDays(1)
		path := filepath.Join(dir, "payments-"+open.String()+".csv")
		if err := writeDay(path, sample.Config{Date: open, Count: o.items, Seed: uint64(100 + o.days)}); err != nil {
			return err
		}
		if _, err := timed(bin, envs["big"], "enqueue", "--date", open.String(), "--source", path); err != nil {
			return err
		}
		if err := floor(o, c, bin); err != nil {
			return err
		}
	}
	return printPlans(ctx, big, bin, c, last)
}

// measure enqueues and consumes the days on one ledger.
func measure(ctx context.Context, url, bin string, env []string, o options, days []payments.Date, files []string) (*figures, error) {
	f := &figures{}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	for i, d := range days {
		wall, err := timed(bin, env, "enqueue", "--date", d.String(), "--source", files[i])
		if err != nil {
			return nil, err
		}
		f.enqueue = append(f.enqueue, wall)
	}
	before, err := blocksRead(ctx, conn)
	if err != nil {
		return nil, err
	}
	wall, err := timed(bin, env, "consume", "--until-done", "--concurrency", fmt.Sprint(o.concurrency), "--rate", "100000")
	if err != nil {
		return nil, err
	}
	f.consume = wall
	after, err := blocksRead(ctx, conn)
	if err != nil {
		return nil, err
	}
	f.reads = readDelta(before, after)
	return f, nil
}

// timeReads times status, report --date and audit verify --date of the
// last day on both ledgers, o.repeat times each, alternating, and stores
// the medians in figs.
func timeReads(o options, bin string, envs map[string][]string, figs map[string]*figures, last string) error {
	for _, m := range []struct {
		into func(*figures) *time.Duration
		args []string
	}{
		{func(f *figures) *time.Duration { return &f.status }, []string{"status"}},
		{func(f *figures) *time.Duration { return &f.report }, []string{"report", "--date", last}},
		{func(f *figures) *time.Duration { return &f.audit }, []string{"audit", "verify", "--date", last}},
	} {
		ledgers := []string{"empty", "big"}
		invs := make([]invocation, len(ledgers))
		for i, db := range ledgers {
			invs[i] = reconcileCmd(bin, envs[db], m.args...)
		}
		walls, _, err := alternate(o.repeat, invs)
		if err != nil {
			return err
		}
		for i, db := range ledgers {
			*m.into(figs[db]) = median(walls[i])
		}
	}
	return nil
}

// invocation is a command line to time, with its environment.
type invocation struct {
	env  []string
	argv []string
}

// reconcileCmd is the binary's command line for args, logging errors only.
func reconcileCmd(bin string, env []string, args ...string) invocation {
	return invocation{env: env, argv: append(append([]string{bin}, args...), "--log-level", "error")}
}

// run runs the command to completion and returns its wall time and its
// standard output.
func (inv invocation) run() (time.Duration, []byte, error) {
	cmd := exec.Command(inv.argv[0], inv.argv[1:]...)
	cmd.Env = inv.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	wall := time.Since(t0)
	if err != nil {
		return 0, nil, fmt.Errorf("%s: %v: %s%s", strings.Join(inv.argv, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return wall, stdout.Bytes(), nil
}

// alternate runs every invocation rounds times, round after round, each
// round starting one further along, so that a moment's load weighs on all
// of them alike and none always goes first. It returns each invocation's
// wall times, in the order measured, and its last output.
func alternate(rounds int, invs []invocation) ([][]time.Duration, [][]byte, error) {
	walls := make([][]time.Duration, len(invs))
	outs := make([][]byte, len(invs))
	for i := range rounds {
		for k := range invs {
			j := (i + k) % len(invs)
			wall, out, err := invs[j].run()
			if err != nil {
				return nil, nil, err
			}
			walls[j], outs[j] = append(walls[j], wall), out
		}
	}
	return walls, outs, nil
}

// timed runs the binary to completion and returns its wall time.
func timed(bin string, env []string, args ...string) (time.Duration, error) {
	wall, _, err := reconcileCmd(bin, env, args...).run()
	return wall, err
}

// build builds the reconcile binary of the module at dir into bin.
func build(dir, bin string) error {
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/reconcile")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v: %s", dir, err, out)
	}
	return nil
}

// buildRevision builds the binary of a git revision of this repository
// (git archive of it, in dir) and returns its path.
func buildRevision(rev, dir string) (string, error) {
	src := filepath.Join(dir, "old")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	tar := filepath.Join(dir, "old.tar")
	if out, err := exec.Command("git", "archive", "--format=tar", "-o", tar, rev).CombinedOutput(); err != nil {
		return "", fmt.Errorf("-old %s: git archive: %v: %s", rev, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tar, "-C", src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("-old %s: tar: %v: %s", rev, err, out)
	}
	bin := filepath.Join(dir, "reconcile-old")
	return bin, build(src, bin)
}

// compare times status and report --date of the last day with the old and
// the new binary on one ledger, o.repeat times each, alternating which
// goes first, and prints every time and the medians; it says whether the
// two binaries' reports are byte for byte the same.
func compare(o options, env []string, oldBin, newBin, last string) error {
	fmt.Printf("\nold (-old %s) and new side by side on the big ledger, %d runs each, alternating; load average: %s",
		o.old, o.repeat, loadavg())
	fmt.Printf("%-34s %-40s %s\n", "", "old: median (each run)", "new: median (each run)")
	for _, args := range [][]string{{"status"}, {"report", "--date", last}} {
		walls, outs, err := alternate(o.repeat, []invocation{reconcileCmd(oldBin, env, args...), reconcileCmd(newBin, env, args...)})
		if err != nil {
			return err
		}
		fmt.Printf("%-34s %-40s %s\n", strings.Join(args, " "), spread(walls[0]), spread(walls[1]))
		if args[0] == "report" {
			fmt.Printf("%-34s %v\n", "reports the same", bytes.Equal(outs[0], outs[1]))
		}
	}
	fmt.Printf("load average at the end: %s", loadavg())
	return nil
}

// spread is the median of walls and every value, in the order measured.
func spread(walls []time.Duration) string {
	parts := make([]string, len(walls))
	for i, w := range walls {
		parts[i] = round(w)
	}
	return round(median(walls)) + " (" + strings.Join(parts, ", ") + ")"
}

// median is the middle one of walls (the upper of the two middle ones of an
// even number).
func median(walls []time.Duration) time.Duration {
	return slices.Sorted(slices.Values(walls))[len(walls)/2]
}

// printPlans runs status, report and audit verify once more on the big
// ledger with auto_explain logging the plan of every statement, and prints
// those plans from the server log.
func printPlans(ctx context.Context, big *pgx.Conn, bin string, c *pgserver.Cluster, last string) error {
	for _, sql := range []string{
		`LOAD 'auto_explain'`,
		`ALTER DATABASE big SET session_preload_libraries = 'auto_explain'`,
		`ALTER DATABASE big SET auto_explain.log_min_duration = 0`,
		`ALTER DATABASE big SET auto_explain.log_analyze = on`,
		`ALTER DATABASE big SET auto_explain.log_buffers = on`,
	} {
		if _, err := big.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	logPath := filepath.Join(c.SocketDir(), "postgres.log")
	env := append(os.Environ(), "DATABASE_URL="+c.ConnString("big"))
	for _, args := range [][]string{{"status"}, {"report", "--date", last}, {"audit", "verify", "--date", last}} {
		st, err := os.Stat(logPath)
		if err != nil {
			return err
		}
		if _, err := timed(bin, env, args...); err != nil {
			return err
		}
		b, err := os.ReadFile(logPath)
		if err != nil {
			return err
		}
		fmt.Printf("\n### plans of `reconcile %s` on the big ledger\n\n", strings.Join(args, " "))
		fmt.Print(plans(b[st.Size():]))
	}
	_, err := big.Exec(ctx, `ALTER DATABASE big RESET ALL`)
	return err
}

var logLine = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)

// plans returns the auto_explain entries of a server log: an entry starts
// with a timestamped line and goes on with the indented ones.
func plans(log []byte) string {
	var out strings.Builder
	keep := false
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if logLine.MatchString(line) {
			keep = strings.Contains(line, "plan:")
			if keep {
				_, rest, _ := strings.Cut(line, "LOG:  ")
				out.WriteString(rest + "\n")
			}
			continue
		}
		if keep {
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

// blocksRead returns the blocks each table and index of the database has
// read from outside shared buffers so far. The statistics are flushed by
// backends when they go idle, so the figures trail by up to a second.
func blocksRead(ctx context.Context, conn *pgx.Conn) (map[string]int64, error) {
	rows, err := conn.Query(ctx, `
		SELECT relname, coalesce(heap_blks_read, 0) FROM pg_statio_user_tables
		UNION ALL
		SELECT indexrelname, coalesce(idx_blks_read, 0) FROM pg_statio_user_indexes`)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error { m[name] = n; return nil })
	return m, err
}

// readDelta lists the relations that read the most blocks between two
// blocksRead snapshots, with their share of all reads.
func readDelta(before, after map[string]int64) string {
	type rel struct {
		name string
		n    int64
	}
	var rels []rel
	var total int64
	for name, n := range after {
		if d := n - before[name]; d > 0 {
			rels = append(rels, rel{name, d})
			total += d
		}
	}
	slices.SortFunc(rels, func(a, b rel) int { return int(b.n - a.n) })
	var parts []string
	for _, r := range rels[:min(len(rels), 6)] {
		parts = append(parts, fmt.Sprintf("%s %d", r.name, r.n))
	}
	return fmt.Sprintf("%d in all (%s)", total, strings.Join(parts, ", "))
}

func writeDay(path string, cfg sample.Config) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := sample.Write(f, payments.FormatCSV, cfg); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func round(d time.Duration) string { return d.Round(time.Millisecond).String() }

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown\n"
	}
	return string(b)
}
