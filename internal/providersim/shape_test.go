package providersim

import (
	"cmp"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// kindsDataset is a day of every kind and ledger status: payments (some in
// ISK, MGA and JPY), refunds and disputes as negative amounts, and for
// Stripe a connected account on every third record. It returns the
// records, their kinds and their accounts.
func kindsDataset(n int) ([]provider.Record, map[string]string, map[string]string) {
	recs := dataset(n)
	kinds, accounts := map[string]string{}, map[string]string{}
	currencies := []string{"EUR", "USD", "ISK", "JPY", "MGA", "GBP"}
	for i := range recs {
		r := &recs[i]
		r.Status = payments.Statuses()[i%len(payments.Statuses())]
		r.Currency = currencies[i%len(currencies)]
		r.AmountMinor = int64(100*(i+1)) * 100 // whole units in every currency
		switch i % 4 {
		case 1:
			kinds[r.ID], r.AmountMinor = payments.KindRefund, -r.AmountMinor
		case 2:
			kinds[r.ID], r.AmountMinor = payments.KindDispute, -r.AmountMinor
		}
		if i%3 == 0 {
			accounts[r.ID] = fmt.Sprintf("acct_1Nv0FGQ9RKHgC%03d", i%7)
		}
	}
	return recs, kinds, accounts
}

// shapeDataset is kindsDataset(n) with every status the shape cannot say
// for a kind replaced by one it can.
func shapeDataset(shape Shape, n int) ([]provider.Record, map[string]string, map[string]string) {
	recs, kinds, accounts := kindsDataset(n)
	for i := range recs {
		kind := cmp.Or(kinds[recs[i].ID], payments.KindPayment)
		if !shape.Expresses(kind, recs[i].Status) {
			recs[i].Status = map[string]string{payments.KindPayment: payments.StatusSucceeded,
				payments.KindRefund: payments.StatusSucceeded, payments.KindDispute: payments.StatusDisputed}[kind]
		}
	}
	return recs, kinds, accounts
}

// shapedClient serves a simulator of cfg (its token set) in the shape and
// returns it, its handler and a client of the built-in profile of the same
// name.
func shapedClient(t *testing.T, shape Shape, cfg Config) (*Server, http.Handler, *provider.Client) {
	t.Helper()
	cfg.Token = "sim-token"
	sim, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h, err := Shaped(sim, shape, ShapeConfig{ClientID: "cid", ClientSecret: "csecret"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p, _ := profile.Builtin(shape.String())
	c, err := provider.New(provider.Config{BaseURL: srv.URL, Profile: p, Token: "sim-token", ClientID: "cid", ClientSecret: "csecret",
		Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return sim, h, c
}

// TestShapesMatchTruth: each shape, read by the built-in profile of the same
// name, gives every transaction of every kind the outcome the simulator's
// truth says, asked as the consumer asks: the item's kind and account.
func TestShapesMatchTruth(t *testing.T) {
	t.Parallel()
	for _, shape := range []Shape{ShapeStripe, ShapePayPal, ShapeSquare} {
		t.Run(shape.String(), func(t *testing.T) {
			t.Parallel()
			recs, kinds, accounts := shapeDataset(shape, 300)
			sim, h, c := shapedClient(t, shape, Config{Records: recs, Kinds: kinds, Accounts: accounts, Seed: 7, TransientCalls: 1,
				Shares: Shares{Mismatch: 0.1, Missing: 0.1, BadRequest: 0.05, BadBody: 0.05, Transient: 0.1}})
			policy := decision.Policy{MaxAttempts: 3}.WithDefaults()
			game := map[string]provider.Record{}
			for _, r := range recs {
				game[r.ID] = r
			}
			ids := append(sim.Records(), "unknown_1")
			outcomes := map[string]int{}
			for _, id := range ids {
				exp := sim.Truth(id)
				var d decision.Decision
				for attempt := 1; ; attempt++ {
					resp, err := c.Get(t.Context(), provider.Lookup{TransactionID: id, IdempotencyKey: "k:" + id, Kind: kinds[id],
						AccountID: accounts[id]})
					d = decision.Decide(policy, decision.Input{Expected: game[id], Response: resp, Err: err, Attempt: attempt, Now: time.Now()},
						func() float64 { return 0 })
					if d.Action != decision.Retry {
						break
					}
				}
				var got ledger.State
				switch {
				case d.Action == decision.DeadLetter:
					got = ledger.DeadLettered
					if d.Reason != exp.Reason {
						t.Errorf("%s: reason %s, want %s (%s)", id, d.Reason, exp.Reason, d.Detail)
					}
				case d.Action == decision.Ack:
					got = d.Outcome
				default:
					t.Fatalf("%s: %v %s %s", id, d.Action, d.Reason, d.Detail)
				}
				outcomes[cmp.Or(kinds[id], "payment")+" "+string(got)]++
				if exp.Outcome == ledger.Mismatched && exp.Fields[0] == "status" {
					// The mismatched status may be one the shape cannot
					// say; it still reads as a mismatch.
					if got != ledger.Mismatched {
						t.Errorf("%s: %s, want a status mismatch", id, got)
					}
					continue
				}
				if got != exp.Outcome {
					t.Errorf("%s (%s %s, %v): outcome %s, want %s (%s %s %v)", id, cmp.Or(kinds[id], "payment"), game[id].Status, exp.Fault,
						got, exp.Outcome, d.Reason, d.Detail, d.Differences)
				}
			}
			for _, kind := range payments.Kinds() {
				if outcomes[kind+" matched"] == 0 || outcomes[kind+" mismatched"] == 0 {
					t.Errorf("no %s matched and mismatched: %v", kind, outcomes)
				}
			}
			if shape == ShapePayPal {
				if n := TokensIssued(h); n != 1 {
					t.Errorf("%d access tokens issued, want 1 (cached)", n)
				}
				Revoke(h)
				resp, err := c.Get(t.Context(), provider.Lookup{TransactionID: ids[0], IdempotencyKey: "k"})
				if err != nil && provider.KindOf(err) != provider.KindBadBody || resp.Status == 401 || TokensIssued(h) != 2 {
					t.Errorf("after revoke: %d, %v, %d tokens", resp.Status, err, TokensIssued(h))
				}
			}
		})
	}
}

// TestShapeObjectsAreApart: a refund is not found at the payment endpoint,
// nor a connected account's object without its Stripe-Account header or
// with another's; a test-mode key asking for live objects gets Stripe's
// wrong-mode answer, which the stripe profile tells from a missing object.
func TestShapeObjectsAreApart(t *testing.T) {
	t.Parallel()
	recs := []provider.Record{{ID: "pi_1", AmountMinor: 1500, Currency: "ISK", Status: "succeeded"},
		{ID: "re_1", AmountMinor: -500, Currency: "EUR", Status: "succeeded"}}
	sim, err := New(Config{Records: recs, Kinds: map[string]string{"re_1": "refund"}, Accounts: map[string]string{"pi_1": "acct_1Nv0FGQ9RKHgCVdK"}})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Shaped(sim, ShapeStripe, ShapeConfig{})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p, _ := profile.Builtin("stripe")
	c, err := provider.New(provider.Config{BaseURL: srv.URL, Profile: p, Token: "sk_test_x"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		l      provider.Lookup
		status int
		class  profile.Class
		amount int64
	}{
		{provider.Lookup{TransactionID: "pi_1", AccountID: "acct_1Nv0FGQ9RKHgCVdK"}, 200, 0, 1500},
		{provider.Lookup{TransactionID: "pi_1"}, 404, profile.ClassMissing, 0},
		{provider.Lookup{TransactionID: "pi_1", AccountID: "acct_2Nv0FGQ9RKHgCVdK"}, 404, profile.ClassMissing, 0},
		{provider.Lookup{TransactionID: "re_1"}, 200, 0, -500},
		{provider.Lookup{TransactionID: "re_1", Kind: "payment"}, 404, profile.ClassMissing, 0},
		{provider.Lookup{TransactionID: "re_1", AccountID: "acct_1Nv0FGQ9RKHgCVdK"}, 404, profile.ClassMissing, 0},
	} {
		resp, err := c.Get(t.Context(), tc.l)
		if err != nil || resp.Status != tc.status || resp.Class != tc.class || resp.Record.AmountMinor != tc.amount {
			t.Errorf("%+v: %d %v %d, %v; want %d %v %d", tc.l, resp.Status, resp.Class, resp.Record.AmountMinor, err, tc.status, tc.class, tc.amount)
		}
	}
	wrong, _ := Shaped(sim, ShapeStripe, ShapeConfig{WrongMode: true})
	wsrv := httptest.NewServer(wrong)
	t.Cleanup(wsrv.Close)
	wc, _ := provider.New(provider.Config{BaseURL: wsrv.URL, Profile: p, Token: "sk_test_x"})
	if resp, err := wc.Get(t.Context(), provider.Lookup{TransactionID: "pi_1"}); err != nil || resp.Status != 404 ||
		resp.Class != profile.ClassWrongAccount || resp.Reason != "wrong_mode" {
		t.Errorf("wrong mode: %+v, %v", resp, err)
	}
	// A record Stripe's units cannot hold is refused up front.
	bad, _ := New(Config{Records: []provider.Record{{ID: "pi_x", AmountMinor: 150, Currency: "MGA", Status: "succeeded"}}})
	if _, err := Shaped(bad, ShapeStripe, ShapeConfig{}); err == nil || !strings.Contains(err.Error(), `transaction "pi_x"`) {
		t.Errorf("MGA 1.50 accepted: %v", err)
	}
}

func TestShapedAuth(t *testing.T) {
	t.Parallel()
	sim, _ := New(Config{Records: dataset(3), Token: "sim-token"})
	for _, shape := range []Shape{ShapeStripe, ShapeSquare, ShapePayPal} {
		h, _ := Shaped(sim, shape, ShapeConfig{ClientID: "cid", ClientSecret: "csecret"})
		srv := httptest.NewServer(h)
		p, _ := profile.Builtin(shape.String())
		c, err := provider.New(provider.Config{BaseURL: srv.URL, Profile: p, Token: "wrong", ClientID: "cid", ClientSecret: "wrong"})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(t.Context(), provider.Lookup{TransactionID: "tx_1", IdempotencyKey: "k"})
		d := decision.Decide(decision.Policy{}.WithDefaults(), decision.Input{Response: resp, Err: err, Attempt: 1}, func() float64 { return 0 })
		if d.Action != decision.Stop {
			t.Errorf("%s: wrong credentials: %v %s", shape, d.Action, d.Reason)
		}
		srv.Close()
	}
	if _, err := Shaped(sim, ShapePayPal, ShapeConfig{}); err == nil {
		t.Error("PayPal shape without client credentials accepted")
	}
}
