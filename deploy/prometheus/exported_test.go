package prometheus_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/sample"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// scrapeLabels are the labels Prometheus adds to every series it scrapes.
var scrapeLabels = []string{"instance", "job"}

// TestRulesAndDashboardUseWhatReconcileExports runs a night for real (the
// binary's enqueue, a consumer with a deadline against the provider
// simulator, the console), scrapes both processes' /metrics, and checks
// that every metric and label the alert rules and the dashboard name is
// one of theirs.
func TestRulesAndDashboardUseWhatReconcileExports(t *testing.T) {
	exported := scrapeARealNight(t)
	for _, q := range queries(t) {
		expr, err := parser.NewParser(parser.Options{}).ParseExpr(q.expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", q.where, err, q.expr)
			continue
		}
		checkExpr(t, q.where, expr, exported)
	}
}

// query is one PromQL expression and where it comes from.
type query struct{ where, expr string }

// queries reads the rules' and the dashboard's expressions.
func queries(t *testing.T) []query {
	t.Helper()
	var out []query
	var rules ruleFile
	readYAML(t, "alerts.yaml", &rules)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	b, err := os.ReadFile("../grafana/reconcile.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			// Grafana's own variable becomes what it stands for.
			out = append(out, query{"panel " + p.Title, strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m")})
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d expressions read", len(out))
	}
	return out
}

// checkExpr checks every selector of expr (its metric exported, its
// matchers' labels the metric's own) and every by, without, on and
// ignoring clause (its labels those of the metrics it groups).
func checkExpr(t *testing.T, where string, expr parser.Expr, exported map[string][]string) {
	t.Helper()
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			labels, ok := exported[n.Name]
			if !ok {
				t.Errorf("%s: metric %s is not exported by reconcile", where, n.Name)
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel && !slices.Contains(labels, m.Name) {
					t.Errorf("%s: %s has no label %q (it has %v)", where, n.Name, m.Name, labels)
				}
			}
		case *parser.AggregateExpr:
			checkLabels(t, where, n.Grouping, n.Expr, exported)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				checkLabels(t, where, n.VectorMatching.MatchingLabels, n.LHS, exported)
				checkLabels(t, where, n.VectorMatching.MatchingLabels, n.RHS, exported)
			}
		}
		return nil
	})
}

// checkLabels checks that each label of a grouping is a label of a metric
// under it (or one a scrape adds).
func checkLabels(t *testing.T, where string, labels []string, under parser.Expr, exported map[string][]string) {
	t.Helper()
	have := slices.Clone(scrapeLabels)
	for _, vs := range parser.ExtractSelectors(under) {
		for _, m := range vs {
			if m.Name == model.MetricNameLabel {
				have = append(have, exported[m.Value]...)
			}
		}
	}
	for _, l := range labels {
		if !slices.Contains(have, l) {
			t.Errorf("%s: groups or matches by %q, which none of its metrics has (%v)", where, l, have)
		}
	}
}

// scrapeARealNight returns every metric the consumer and the console
// export after a night's run, with its label names.
func scrapeARealNight(t *testing.T) map[string][]string {
	t.Helper()
	bin := buildReconcile(t)
	db := pgtest.ConnString(t)
	day := writeDay(t, 300)
	sim, err := providersim.New(providersim.Config{Records: day.records, Seed: 3,
		Shares: providersim.Shares{Mismatch: 0.05, Missing: 0.02, BadRequest: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	prov := httptest.NewServer(sim)
	t.Cleanup(prov.Close)
	env := append(os.Environ(), "DATABASE_URL="+db, "RECONCILE_PROVIDER_URL="+prov.URL)
	runBin(t, bin, env, "enqueue", "--date", day.date, "--source", day.path)

	consumerAddr, consoleAddr := freeAddr(t), freeAddr(t)
	startBin(t, bin, env, "consume", "--metrics-addr", consumerAddr, "--rate", "200", "--deadline", "1h", "--progress", "off",
		"--max-attempts", "2", "--backoff-base", "10ms", "--backoff-cap", "50ms")
	startBin(t, bin, env, "ui", "--insecure-local", "--addr", "127.0.0.1:0", "--metrics-addr", consoleAddr)

	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var done, withDeadline bool
		if err := conn.QueryRow(context.Background(), `SELECT completed_at IS NOT NULL, deadline_at IS NOT NULL FROM runs`).Scan(&done, &withDeadline); err != nil {
			t.Fatal(err)
		}
		if done && withDeadline {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run did not complete with a deadline within 2 minutes (complete %v, deadline %v)", done, withDeadline)
		}
		time.Sleep(200 * time.Millisecond)
	}
	exported := map[string][]string{}
	for _, addr := range []string{consumerAddr, consoleAddr} {
		for name, labels := range scrape(t, "http://"+addr+"/metrics") {
			for _, l := range labels {
				if !slices.Contains(exported[name], l) {
					exported[name] = append(exported[name], l)
				}
			}
			if _, ok := exported[name]; !ok {
				exported[name] = []string{}
			}
		}
	}
	return exported
}

// scrape reads an exposition and returns each metric's label names (a
// histogram's or summary's series under their own names).
func scrape(t *testing.T, url string) map[string][]string {
	t.Helper()
	var resp *http.Response
	var err error
	for range 50 { // the process may still be starting
		if resp, err = http.Get(url); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	out := map[string][]string{}
	for name, f := range fams {
		out[name] = []string{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(out[name], l.GetName()) {
					out[name] = append(out[name], l.GetName())
				}
			}
		}
	}
	return out
}

// buildReconcile builds the binary once for this test.
func buildReconcile(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "reconcile")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/reconcile")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build reconcile: %v\n%s", err, out)
	}
	return bin
}

func runBin(t *testing.T, bin string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reconcile %v: %v\n%s", args, err, out)
	}
}

// startBin starts the binary until the test ends.
func startBin(t *testing.T, bin string, env []string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("reconcile %v:\n%s", args, out.String())
		}
	})
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// day is a generated day of payments in a CSV file, and the provider's
// records of it.
type day struct {
	date, path string
	records    []provider.Record
}

func writeDay(t *testing.T, n int) day {
	t.Helper()
	d := payments.Date{Year: 2026, Month: time.October, Day: 24}
	cfg := sample.Config{Date: d, Count: n, Seed: 5}
	path := filepath.Join(t.TempDir(), "payments.csv")
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
	out := day{date: d.String(), path: path}
	for p, ok := g.Next(); ok; p, ok = g.Next() {
		out.records = append(out.records, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
	}
	if len(out.records) != n {
		t.Fatalf("%d records, want %d", len(out.records), n)
	}
	return out
}
