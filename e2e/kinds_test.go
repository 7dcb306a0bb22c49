//go:build e2e

package e2e

import (
	"bytes"
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
	"time"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// stripeCall is one lookup a Stripe-shaped simulator received.
type stripeCall struct{ endpoint, account string }

// stripeLog sits in front of a Stripe-shaped simulator: it counts each
// lookup under the idempotency key of its item (the Stripe profile sends
// none; the key is the run's, "nightly-<date>:<id>"), remembers where each
// went and with which Stripe-Account, and counts the partial captures it
// served (a PaymentIntent whose amount exceeds amount_received).
type stripeLog struct {
	prov   *simProvider
	run    string
	next   http.Handler
	mu     sync.Mutex
	calls  map[string][]stripeCall
	served map[string]bool // ids answered with a PaymentIntent of a partial capture
}

func (l *stripeLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	cut := strings.LastIndexByte(path, '/')
	if cut < 0 || strings.HasPrefix(path, "/_sim/") {
		l.next.ServeHTTP(w, r)
		return
	}
	id, err := url.PathUnescape(path[cut+1:])
	if err != nil {
		id = path[cut+1:]
	}
	l.prov.mu.Lock()
	l.prov.callsByKey[l.run+":"+id]++
	l.prov.mu.Unlock()
	rec := httptest.NewRecorder()
	l.next.ServeHTTP(rec, r)
	var pi struct {
		Object         string `json:"object"`
		Amount         int64  `json:"amount"`
		AmountReceived int64  `json:"amount_received"`
	}
	partial := json.Unmarshal(rec.Body.Bytes(), &pi) == nil && pi.Object == "payment_intent" && pi.AmountReceived > 0 && pi.Amount > pi.AmountReceived
	l.mu.Lock()
	l.calls[id] = append(l.calls[id], stripeCall{endpoint: path[:cut+1], account: r.Header.Get("Stripe-Account")})
	if partial {
		l.served[id] = true
	}
	l.mu.Unlock()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// stripeNight is a day of a Connect platform's Stripe account: payments in
// every ledger status (some partially captured), refunds and disputes (by
// Stripe's id prefixes or the kind column), several connected accounts and
// the platform's own payments, in EUR, USD, GBP, JPY and ISK.
func stripeNight(t *testing.T, date string, n int) (*day, map[string]string, map[string]string) {
	t.Helper()
	d, err := payments.ParseDate(date)
	if err != nil {
		t.Fatal(err)
	}
	connected := []string{"acct_1Nv0FGQ9RKHgC001", "acct_1Nv0FGQ9RKHgC002", "acct_1Nv0FGQ9RKHgC003", "acct_1PzR7sT2uVwXyZab"}
	currencies := []string{"EUR", "USD", "ISK", "JPY", "GBP"}
	refundStatuses := []string{payments.StatusSucceeded, payments.StatusPending, payments.StatusFailed, payments.StatusCanceled}
	disputeStatuses := []string{payments.StatusDisputed, payments.StatusSucceeded, payments.StatusRefunded, payments.StatusCanceled}
	dy := &day{date: date, path: filepath.Join(t.TempDir(), "stripe-"+date+".csv"), ids: map[string]payments.Payment{}}
	kinds, accounts := map[string]string{}, map[string]string{}
	var csv bytes.Buffer
	csv.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at,kind\n")
	for i := range n {
		p := payments.Payment{
			Currency:   currencies[i%len(currencies)],
			OccurredAt: d.Start(time.UTC).Add(time.Duration(i) * 24 * time.Hour / time.Duration(n)),
			AccountID:  fmt.Sprintf("player_%03d", i%40),
		}
		if i%3 != 0 {
			p.AccountID = connected[i%len(connected)]
			accounts[fmt.Sprint(i)] = p.AccountID
		}
		p.AmountMinor = int64(500 + i*37)
		if p.Currency == "JPY" || p.Currency == "ISK" {
			p.AmountMinor = int64(1000 + i*11) // whole yen and krónur
		}
		stated := ""
		switch i % 5 {
		case 3:
			p.Kind, p.TransactionID = payments.KindRefund, fmt.Sprintf("re_3Q%07dLkdIwHu7", i)
			if i%4 == 3 {
				p.TransactionID, stated = fmt.Sprintf("pyr_3Q%07dLkdIw", i), payments.KindRefund
			}
			p.AmountMinor, p.Status = -p.AmountMinor/2, refundStatuses[i/5%len(refundStatuses)]
		case 4:
			p.Kind, p.TransactionID = payments.KindDispute, fmt.Sprintf("dp_3Q%07dLkdIwHu7", i)
			if i%4 == 0 {
				p.TransactionID, stated = fmt.Sprintf("ch_3Q%07dLkdIwHu7", i), payments.KindDispute
			}
			p.AmountMinor, p.Status = -p.AmountMinor, disputeStatuses[i/5%len(disputeStatuses)]
		default:
			p.Kind, p.TransactionID = payments.KindPayment, fmt.Sprintf("pi_3Q%07dLkdIwHu7", i)
			p.Status = payments.Statuses()[i%len(payments.Statuses())]
			if i%7 == 0 {
				stated = payments.KindPayment
			}
		}
		if p.Kind != payments.KindPayment {
			kinds[p.TransactionID] = p.Kind
		}
		if a, ok := accounts[fmt.Sprint(i)]; ok {
			delete(accounts, fmt.Sprint(i))
			accounts[p.TransactionID] = a
		}
		dy.payments = append(dy.payments, p)
		dy.ids[p.TransactionID] = p
		fmt.Fprintf(&csv, "%s,%s,%d,%s,%s,%s,%s\n", p.TransactionID, p.AccountID, p.AmountMinor, p.Currency, p.Status,
			p.OccurredAt.Format(time.RFC3339), stated)
	}
	if err := os.WriteFile(dy.path, csv.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return dy, kinds, accounts
}

// TestStripeNightOfEveryKind reconciles a Stripe-shaped night with the
// built-in stripe profile: payments in every ledger status (refunded,
// partially refunded and disputed ones as Stripe shows them, on the
// charge), partial captures, refunds and disputes at their own endpoints
// (by id prefix or the kind column), four connected accounts behind
// Stripe-Account and the platform's own payments without it, ISK amounts
// in Stripe's two decimals, and the simulator's faults. Every item reaches
// its true outcome with the provider's values in the ledger's terms (a
// refund's money negative), and every invariant of the ledger holds.
func TestStripeNightOfEveryKind(t *testing.T) {
	t.Parallel()
	const date = "2026-12-05"
	dy, kinds, accounts := stripeNight(t, date, 1500)
	const token = "sk_test_51Night0fEveryKind"
	sim, err := providersim.New(providersim.Config{Records: dy.records(), Kinds: kinds, Accounts: accounts, Seed: 23,
		Token: provider.Secret(token), Limit: mustSchedule(t, "400"), TransientCalls: 2,
		Shares: providersim.Shares{Mismatch: 0.05, Missing: 0.03, BadRequest: 0.01, Transient: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	shaped, err := providersim.Shaped(sim, providersim.ShapeStripe, providersim.ShapeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	prov := &simProvider{sim: sim, callsByKey: map[string]int{}}
	log := &stripeLog{prov: prov, run: "nightly-" + date, next: shaped, calls: map[string][]stripeCall{}, served: map[string]bool{}}
	prov.srv = httptest.NewServer(log)
	t.Cleanup(prov.srv.Close)
	prov.URL = prov.srv.URL
	w := newWorld(t, prov)
	w.extraEnv = []string{"RECONCILE_PROVIDER_PROFILE=stripe", "RECONCILE_PROVIDER_TOKEN=" + token}

	w.mustRun(t, "enqueue", "--date", date, "--source", dy.path)
	res := w.run(t, nil, consumeArgs("--until-done", "--concurrency", "8", "--rate", "300", "--burst", "20")...)
	if res.code != 0 {
		t.Fatalf("consume:\n%s", res)
	}
	fig := checkInvariants(t, w, dy, truth(sim))

	// Each kind of row went to its endpoint, with its account.
	endpoint := map[string]string{payments.KindPayment: "/v1/payment_intents/", payments.KindRefund: "/v1/refunds/",
		payments.KindDispute: "/v1/disputes/"}
	log.mu.Lock()
	for id, calls := range log.calls {
		p := dy.ids[id]
		for _, c := range calls {
			if c.endpoint != endpoint[p.Kind] || c.account != accounts[id] {
				t.Errorf("%s (%s of %s): asked at %s with Stripe-Account %q", id, p.Kind, p.AccountID, c.endpoint, c.account)
				break
			}
		}
	}
	partials := len(log.served)
	log.mu.Unlock()

	// The night had something of everything, and each kind reached each
	// outcome.
	outcomes := map[string]int{}
	rows, err := w.pool.Query(t.Context(), `SELECT transaction_id, state, kind FROM items`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, state, kind string
		if err := rows.Scan(&id, &state, &kind); err != nil {
			t.Fatal(err)
		}
		p := dy.ids[id]
		outcomes[p.Kind+" "+state]++
		if strings.HasPrefix(id, "pyr_") || strings.HasPrefix(id, "ch_") {
			if kind != p.Kind {
				t.Errorf("%s: stored kind %q, want %q", id, kind, p.Kind)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, kind := range payments.Kinds() {
		for _, state := range []ledger.State{ledger.Matched, ledger.Mismatched, ledger.Missing} {
			if outcomes[kind+" "+string(state)] == 0 {
				t.Errorf("no %s ended %s: %v", kind, state, outcomes)
			}
		}
	}
	if partials == 0 {
		t.Error("no partial capture was served")
	}
	var isk int
	if err := w.pool.QueryRow(t.Context(), `SELECT count(*) FROM items WHERE currency = 'ISK' AND state = 'matched'`).Scan(&isk); err != nil || isk == 0 {
		t.Errorf("%d ISK items matched (%v)", isk, err)
	}
	t.Logf("FIGURES stripe night: %s; outcomes %v; %d partial captures served", fig, outcomes, partials)
}
