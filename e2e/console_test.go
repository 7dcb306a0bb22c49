package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/crypto/bcrypt"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/providersim"
)

var screenshots = flag.Bool("screenshots", false, "TestConsoleInBrowser: write screenshots of the main pages to docs/img/")

// browser returns a chromedp context on a headless Debian chromium, which
// .ci/run installs. Running as root needs --no-sandbox.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("no chromium on PATH: install it (apt-get install chromium); .ci/run does")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1000))
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// TestConsoleInBrowser drives the console of a real run in headless
// chromium: an auditor sees the runs, the run's chart, a verified chain and
// a mismatch's amounts in major units, sees no action and is refused the
// POST itself; an operator redrives a dead letter and sees its transition,
// and cancels a second night, which then reads as cancelled with who and
// why; a cross-origin form post is refused.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	dy := newDay(t, "2026-10-24", 300, 11)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 11,
		Shares: providersim.Shares{Mismatch: 0.05, Missing: 0.03, BadRequest: 0.03, Transient: 0.05}}, nil)
	w := newWorld(t, prov)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
	w.mustRun(t, "consume", "--until-done", "--concurrency", "8", "--rate", "300", "--burst", "20",
		"--backoff-base", "10ms", "--backoff-cap", "100ms", "--progress", "off")
	// A second night, enqueued and never consumed: the operator cancels it.
	later := newDay(t, "2026-10-25", 40, 12)
	w.mustRun(t, "enqueue", "--date", later.date, "--source", later.path)

	users := filepath.Join(t.TempDir(), "htpasswd")
	var file strings.Builder
	for _, u := range []string{"alice", "bob"} {
		hash, err := bcrypt.GenerateFromPassword([]byte(u+"-secret"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&file, "%s:%s\n", u, hash)
	}
	if err := os.WriteFile(users, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ui := w.start(t, "ui", "ui", "--addr", "127.0.0.1:0", "--users", users, "--operators", "alice")
	addr := regexp.MustCompile(`console: (http://\S+)/`)
	var base string
	waitFor(t, 30*time.Second, func() (bool, string) {
		if m := addr.FindStringSubmatch(ui.stdout.String()); m != nil {
			base = m[1]
			return true, ""
		}
		return ui.exited(), "console URL on stdout; stderr: " + ui.stderr.String()
	})
	if ui.exited() {
		t.Fatalf("ui exited: %s", ui.stderr.String())
	}

	var runID, deadID string
	if err := w.pool.QueryRow(context.Background(), `SELECT run_id::text FROM runs`).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	if err := w.pool.QueryRow(context.Background(), `SELECT transaction_id FROM items
		 WHERE state = 'dead_lettered' ORDER BY transaction_id LIMIT 1`).Scan(&deadID); err != nil {
		t.Fatalf("the run has no dead letter: %v", err)
	}
	var mismatchID, currency, provCurrency string
	var amount, provAmount int64
	if err := w.pool.QueryRow(context.Background(), `SELECT transaction_id, amount_minor, currency, provider_amount_minor, provider_currency
		  FROM items WHERE state = 'mismatched' AND provider_amount_minor IS NOT NULL ORDER BY transaction_id LIMIT 1`).
		Scan(&mismatchID, &amount, &currency, &provAmount, &provCurrency); err != nil {
		t.Fatalf("the run has no mismatch with the provider's amount: %v", err)
	}
	var laterID string
	if err := w.pool.QueryRow(context.Background(), `SELECT run_id::text FROM runs WHERE business_date = $1`, later.date).Scan(&laterID); err != nil {
		t.Fatal(err)
	}
	runURL := base + "/runs/" + runID
	ctx := browser(t)
	shot := func(name string) {
		t.Helper()
		if !*screenshots {
			return
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "img", "console-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	login := func(user string) {
		t.Helper()
		run("log in as "+user,
			chromedp.Navigate(base+"/login"),
			chromedp.WaitVisible(chromedp.CSS(`input[name=user]`)),
			chromedp.SendKeys(chromedp.CSS(`input[name=user]`), user),
			chromedp.SendKeys(chromedp.CSS(`input[name=password]`), user+"-secret"),
			chromedp.Submit(chromedp.CSS(`form.login`)),
			chromedp.WaitVisible(chromedp.CSS(`table.runs`)))
	}
	text := func(what, sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return s
	}
	// postStatus posts a redrive form from the page with fetch and returns
	// the status code.
	postStatus := func(target string) int {
		t.Helper()
		js := fmt.Sprintf(`fetch(%q, {method: "POST", body: new URLSearchParams({all: "1", note: "auditor tries"})}).then(r => r.status)`, target)
		code, err := chromedp.Run(ctx, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("fetch POST: %v", err)
		}
		return code
	}

	// The auditor.
	login("bob")
	if runs := text("runs page", `table.runs`); !strings.Contains(runs, "nightly-2026-10-24") || !strings.Contains(runs, "complete") ||
		!strings.Contains(runs, "nightly-2026-10-25") || !strings.Contains(runs, "running") {
		t.Errorf("runs page does not show the complete run:\n%s", runs)
	}
	shot("runs")
	run("run page", chromedp.Navigate(runURL), chromedp.WaitVisible(chromedp.CSS(`#run-chart`)))
	lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#run-chart polyline").length`))
	if err != nil {
		t.Fatal(err)
	}
	if lines < 3 {
		t.Errorf("the run chart draws %d lines, want calls, done and 429s at least", lines)
	}
	limits, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[...document.querySelectorAll("#run-chart path.effective, #run-chart circle.mark-limit title")].map(e => e.textContent || "line").join("\n")`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(limits, "line\n") || !strings.Contains(limits, "effective") {
		t.Errorf("the run chart has no effective limit line with its causes on hover: %q", limits)
	}
	if p := text("providers", `table.providers`); !strings.Contains(p, "(default)") {
		t.Errorf("the run page does not break the run down by provider:\n%s", p)
	}
	if body := text("run page", `main`); strings.Contains(body, "Actions") || strings.Contains(body, "Redrive") {
		t.Errorf("the auditor sees actions on the run page:\n%s", body)
	}
	shot("run")
	run("dead letters", chromedp.Navigate(runURL+"/dead-letters"), chromedp.WaitVisible(chromedp.CSS(`table.groups`)))
	if body := text("dead letters", `main`); strings.Contains(body, "Redrive") {
		t.Errorf("the auditor sees a redrive button:\n%s", body)
	}
	txURL := runURL + "/tx/" + deadID
	run("transaction", chromedp.Navigate(txURL), chromedp.WaitVisible(chromedp.CSS(`#chain-verdict`)))
	if v := text("verdict", `#chain-verdict`); !strings.Contains(v, "Hash chain verified") {
		t.Errorf("chain verdict %q", v)
	}
	// A mismatch's amounts, the expected and the provider's, in major
	// units with their currency; a dead letter has no provider's amount.
	run("mismatched transaction", chromedp.Navigate(runURL+"/tx/"+url.PathEscape(mismatchID)), chromedp.WaitVisible(chromedp.CSS(`#reported`)))
	if e, p := text("expected", `#expected`), text("provider", `#reported`); !strings.Contains(e, human.Money(amount, currency)) ||
		!strings.Contains(p, human.Money(provAmount, provCurrency)) {
		t.Errorf("transaction %s shows expected %q and provider %q, want %s and %s", mismatchID, e, p,
			human.Money(amount, currency), human.Money(provAmount, provCurrency))
	}
	run("dead letter again", chromedp.Navigate(txURL), chromedp.WaitVisible(chromedp.CSS(`#reported`)))
	if p := text("provider", `#reported`); !strings.Contains(p, "–") || regexp.MustCompile(`0x[0-9a-f]{4,}`).MatchString(p) {
		t.Errorf("the dead letter's provider row %q, want a dash", p)
	}
	if code := postStatus(runURL + "/redrive"); code != http.StatusForbidden {
		t.Errorf("the auditor's POST got %d, want 403", code)
	}
	run("log out", chromedp.Submit(chromedp.CSS(`form.logout`)), chromedp.WaitVisible(chromedp.CSS(`form.login`)))

	// The operator.
	login("alice")
	run("redrive one", chromedp.Navigate(runURL+"/dead-letters?reason="), chromedp.WaitVisible(chromedp.CSS(`input[name=id]`)))
	shot("dead-letters")
	run("select the dead letter", chromedp.Navigate(txURL), chromedp.WaitVisible(chromedp.CSS(`#chain-verdict`)),
		chromedp.Click(chromedp.CSS(`a.button`)), chromedp.WaitVisible(chromedp.CSS(`#preview-count`)))
	if p := text("preview", `#preview-count`); !strings.Contains(p, "1 item(s) will be redriven") {
		t.Errorf("preview %q, want one item", p)
	}
	run("confirm", chromedp.SendKeys(chromedp.CSS(`input[name=note]`), "provider fixed the id"),
		chromedp.Submit(chromedp.CSS(`form.confirm`)), chromedp.WaitVisible(chromedp.CSS(`p.notice`)))
	run("transaction after redrive", chromedp.Navigate(txURL), chromedp.WaitVisible(chromedp.CSS(`#history`)))
	history := text("history", `#history`)
	if !strings.Contains(history, "redrive") || !strings.Contains(history, "alice@console (provider fixed the id)") {
		t.Errorf("the history does not show alice's redrive:\n%s", history)
	}
	if v := text("verdict", `#chain-verdict`); !strings.Contains(v, "Hash chain verified") {
		t.Errorf("chain verdict after the redrive %q", v)
	}
	shot("transaction")
	// The operator cancels the night nobody consumed: every page then says
	// it is cancelled, by whom and why.
	run("cancel preview", chromedp.Navigate(base+"/runs/"+laterID+"/cancel"), chromedp.WaitVisible(chromedp.CSS(`#preview-count`)))
	if p := text("cancel preview", `#preview-count`); !strings.Contains(p, "40 item(s) will be cancelled") {
		t.Errorf("cancel preview %q, want 40 items", p)
	}
	run("confirm the cancel", chromedp.SendKeys(chromedp.CSS(`input[name=note]`), "the export was truncated"),
		chromedp.Submit(chromedp.CSS(`form.confirm`)), chromedp.WaitVisible(chromedp.CSS(`p.notice`)))
	run("cancelled run", chromedp.Navigate(base+"/runs/"+laterID), chromedp.WaitVisible(chromedp.CSS(`#cancelled`)))
	if c := text("cancelled", `#cancelled`); !strings.Contains(c, "Cancelled by alice@console") || !strings.Contains(c, "the export was truncated") ||
		!strings.Contains(c, "40 item(s) were withdrawn") {
		t.Errorf("the cancelled run's page says %q", c)
	}
	if st := text("state", `section.progress h2`); !strings.Contains(st, "cancelled") {
		t.Errorf("the cancelled run's state reads %q", st)
	}
	run("runs after the cancel", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`table.runs`)))
	if runs := text("runs page", `table.runs`); !strings.Contains(runs, "cancelled by alice@console: the export was truncated") {
		t.Errorf("the runs page does not show the cancelled run with who and why:\n%s", runs)
	}
	shot("cancelled")
	run("audit", chromedp.Navigate(base+"/audit?run="+runID), chromedp.WaitVisible(chromedp.CSS(`#audit-verdict`)))
	if v := text("audit verdict", `#audit-verdict`); !strings.Contains(v, "Every chain verified") {
		t.Errorf("audit verdict %q", v)
	}
	shot("audit")

	// A page of another origin posts a redrive form to the console: the
	// browser sends alice's cookie (same site, another port), the console
	// refuses the request.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/redrive"><input name="all" value="1"><input name="note" value="csrf"></form>
<script>document.getElementById("f").submit()</script>`, runURL)
	}))
	defer evil.Close()
	var before int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM items WHERE state = 'dead_lettered'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	run("cross-origin post", chromedp.Navigate(evil.URL), chromedp.WaitReady(chromedp.CSS(`body`)))
	var refused string
	waitFor(t, 10*time.Second, func() (bool, string) {
		refused, _ = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`body`)))
		return strings.Contains(refused, "cross-origin request refused"), "refusal page, have " + refused
	})
	var after int
	if err := w.pool.QueryRow(context.Background(), `SELECT count(*) FROM items WHERE state = 'dead_lettered'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("the cross-origin post changed the dead letters: %d before, %d after", before, after)
	}
}
