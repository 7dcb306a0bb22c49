//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// lookupLog records, in front of one simulated provider, every lookup's
// transaction id and the credentials it carried.
type lookupLog struct {
	prefix string
	next   http.Handler
	mu     sync.Mutex
	calls  []lookup
}

type lookup struct{ id, auth string }

func (l *lookupLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if esc, ok := strings.CutPrefix(r.URL.EscapedPath(), l.prefix); ok {
		id, _ := url.PathUnescape(esc)
		l.mu.Lock()
		l.calls = append(l.calls, lookup{id: id, auth: r.Header.Get("Authorization")})
		l.mu.Unlock()
	}
	l.next.ServeHTTP(w, r)
}

func (l *lookupLog) all() []lookup {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lookup(nil), l.calls...)
}

// TestTwoProvidersOneNight routes one night to two simulated providers, one
// Stripe-shaped (profile stripe) and one with today's contract (profile
// reconcile), through a providers file: every item reaches its true
// outcome (matched, mismatched, missing, dead-lettered), every call went to
// its item's provider with that provider's credentials, the summary,
// status and report break down by provider, and the bad-input cases (a
// provider not in the file, an unset credential variable, items of
// providers consume does not know) exit 2 before anything is claimed.
func TestTwoProvidersOneNight(t *testing.T) {
	t.Parallel()
	const date = "2026-11-30"
	d := newDay(t, date, 900, 5)
	names := map[string]string{} // transaction id → provider
	records := map[string][]provider.Record{}
	var csv strings.Builder
	csv.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at,provider\n")
	for i, p := range d.payments {
		name, status := "cards", "succeeded"
		if i%3 == 0 {
			name, status = "legacy", p.Status
		}
		names[p.TransactionID] = name
		fmt.Fprintf(&csv, "%s,%s,%d,%s,%s,%s,%s\n", p.TransactionID, p.AccountID, p.AmountMinor, p.Currency, status,
			p.OccurredAt.Format("2006-01-02T15:04:05Z07:00"), name)
		records[name] = append(records[name], provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: status})
	}
	dir := t.TempDir()
	source := filepath.Join(dir, "night.csv")
	if err := os.WriteFile(source, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	shares := providersim.Shares{Mismatch: 0.05, Missing: 0.03, BadRequest: 0.02, Transient: 0.05}
	tokens := map[string]string{"cards": "sk_test_cards_9f2", "legacy": "legacy-token-77"}
	sims := map[string]*providersim.Server{}
	logs := map[string]*lookupLog{}
	urls := map[string]string{}
	for name, shape := range map[string]providersim.Shape{"cards": providersim.ShapeStripe, "legacy": providersim.ShapeReconcile} {
		sim, err := providersim.New(providersim.Config{Records: records[name], Seed: 21, Shares: shares, Limit: mustSchedule(t, "300"),
			Token: provider.Secret(tokens[name])})
		if err != nil {
			t.Fatal(err)
		}
		h, err := providersim.Shaped(sim, shape, providersim.ShapeConfig{})
		if err != nil {
			t.Fatal(err)
		}
		prefix := map[providersim.Shape]string{providersim.ShapeStripe: "/v1/payment_intents/", providersim.ShapeReconcile: lookupPrefix}[shape]
		sims[name], logs[name] = sim, &lookupLog{prefix: prefix, next: h}
		srv := httptest.NewServer(logs[name])
		t.Cleanup(srv.Close)
		urls[name] = srv.URL
	}
	providersFile := filepath.Join(dir, "providers.json")
	pf := fmt.Sprintf(`{"providers": {
  "cards": {"profile": "stripe", "url": %q, "token_env": "CARDS_KEY", "rate": 150, "burst": 10},
  "legacy": {"profile": "reconcile", "url": %q, "token_env": "LEGACY_TOKEN", "rate": 60, "burst": 5}
}, "default": "cards"}`, urls["cards"], urls["legacy"])
	if err := os.WriteFile(providersFile, []byte(pf), 0o600); err != nil {
		t.Fatal(err)
	}
	w := newWorld(t, nil)
	creds := []string{"CARDS_KEY=" + tokens["cards"], "LEGACY_TOKEN=" + tokens["legacy"]}

	// A payment naming a provider the file lacks is bad input on its line.
	bad := filepath.Join(dir, "bad.csv")
	lines := strings.SplitAfter(csv.String(), "\n")
	lines[3] = strings.Replace(lines[3], ",legacy\n", ",legcy\n", 1)
	lines[3] = strings.Replace(lines[3], ",cards\n", ",legcy\n", 1)
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	res := w.run(t, nil, "enqueue", "--date", date, "--source", bad, "--providers", providersFile)
	if res.code != 2 || !strings.Contains(res.stderr, bad+`:4: provider "legcy": not in `+providersFile+" (known: cards, legacy)") {
		t.Fatalf("enqueue of an unknown provider:\n%s", res)
	}

	// Enqueued without the file, the names are accepted; consume without
	// the file refuses them, naming each with its count.
	w.mustRun(t, "enqueue", "--date", date, "--source", source)
	res = w.run(t, w.env(append(creds, "RECONCILE_PROVIDER_URL="+urls["legacy"])...), consumeArgs("--until-done")...)
	if res.code != 2 || !strings.Contains(res.stderr, fmt.Sprintf("cards (%d items), legacy (%d items)", len(records["cards"]), len(records["legacy"]))) {
		t.Fatalf("consume of named providers without a providers file:\n%s", res)
	}
	// An unset credential variable is named, with the file, line and key.
	res = w.run(t, w.env("RECONCILE_PROVIDERS="+providersFile, "CARDS_KEY="+tokens["cards"]), consumeArgs("--until-done")...)
	if res.code != 2 || !strings.Contains(res.stderr, providersFile+":3: providers.legacy.token_env: environment variable LEGACY_TOKEN is not set") ||
		strings.Contains(res.stderr+res.stdout, tokens["cards"]) {
		t.Fatalf("consume without LEGACY_TOKEN:\n%s", res)
	}
	for name, l := range logs {
		if n := len(l.all()); n != 0 {
			t.Fatalf("%d calls to %s before consume was allowed to start", n, name)
		}
	}

	res = w.run(t, w.env(append(creds, "RECONCILE_PROVIDERS="+providersFile)...), consumeArgs("--until-done", "--concurrency", "8")...)
	if res.code != 0 {
		t.Fatalf("consume:\n%s", res)
	}
	for _, want := range []string{"provider cards: " + fmt.Sprint(len(records["cards"])) + " items", "provider legacy: " + fmt.Sprint(len(records["legacy"])) + " items"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, res.stdout)
		}
	}

	// Every outcome is the item's provider's truth.
	ctx := context.Background()
	rows, err := w.pool.Query(ctx, `SELECT transaction_id, provider, state FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[ledger.State]int{}
	n := 0
	for rows.Next() {
		var id, name, state string
		if err := rows.Scan(&id, &name, &state); err != nil {
			t.Fatal(err)
		}
		n++
		seen[ledger.State(state)]++
		if name != names[id] {
			t.Errorf("item %s recorded provider %q, want %q", id, name, names[id])
		}
		if want := sims[names[id]].Truth(id).Outcome; ledger.State(state) != want {
			t.Errorf("item %s (%s): %s, want %s", id, names[id], state, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(d.payments) {
		t.Errorf("%d items, want %d", n, len(d.payments))
	}
	for _, s := range []ledger.State{ledger.Matched, ledger.Mismatched, ledger.Missing, ledger.DeadLettered} {
		if seen[s] == 0 {
			t.Errorf("no item ended %s: %v", s, seen)
		}
	}
	// Every call went to its item's provider with that provider's token.
	for name, l := range logs {
		calls := l.all()
		if len(calls) < len(records[name]) {
			t.Errorf("%s: %d calls for %d items", name, len(calls), len(records[name]))
		}
		for _, c := range calls {
			if names[c.id] != name || c.auth != "Bearer "+tokens[name] {
				t.Errorf("call to %s for %s (of %s) with credentials %q", name, c.id, names[c.id], redact(c.auth, tokens))
			}
		}
	}
	var completions int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM run_completions`).Scan(&completions); err != nil || completions != 1 {
		t.Errorf("completions: %d (%v), want one", completions, err)
	}

	// status and report break down by provider.
	res = w.mustRun(t, "status", "--date", date)
	for _, want := range []string{"limiter provider:cards: configured 150/s", "limiter provider:legacy: configured 60/s", "provider cards: ", "provider legacy: "} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, res.stdout)
		}
	}
	res = w.mustRun(t, "report", "--date", date, "--format", "json")
	var rep struct {
		Providers []ledger.ProviderTotal `json:"providers"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Providers) != 2 || rep.Providers[0].Provider != "cards" || rep.Providers[0].Items != len(records["cards"]) ||
		rep.Providers[1].Items != len(records["legacy"]) {
		t.Errorf("report by provider: %+v", rep.Providers)
	}
	res = w.mustRun(t, "limit", "show", "--provider", "legacy")
	if !strings.Contains(res.stdout, "provider:legacy") || !strings.Contains(res.stdout, "60/s") {
		t.Errorf("limit show --provider legacy:\n%s", res.stdout)
	}
}

func mustSchedule(t *testing.T, s string) providersim.Schedule {
	t.Helper()
	sched, err := providersim.ParseSchedule(s)
	if err != nil {
		t.Fatal(err)
	}
	return sched
}

// redact hides the tokens in a header value for an error message.
func redact(s string, tokens map[string]string) string {
	for name, tok := range tokens {
		s = strings.ReplaceAll(s, tok, "<"+name+" token>")
	}
	return s
}
