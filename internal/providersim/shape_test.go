package providersim

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// TestShapesMatchTruth: each shape, read by the built-in profile of the same
// name, gives every transaction the outcome the simulator's truth says.
func TestShapesMatchTruth(t *testing.T) {
	t.Parallel()
	for _, shape := range []Shape{ShapeStripe, ShapePayPal, ShapeSquare} {
		t.Run(shape.String(), func(t *testing.T) {
			t.Parallel()
			recs := dataset(300)
			for i := range recs {
				if !shape.Expresses(recs[i].Status) {
					recs[i].Status = payments.StatusSucceeded
				}
			}
			sim, err := New(Config{Records: recs, Seed: 7, Token: "sim-token", TransientCalls: 1,
				Shares: Shares{Mismatch: 0.1, Missing: 0.1, BadRequest: 0.05, BadBody: 0.05, Transient: 0.1}})
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
			policy := decision.Policy{MaxAttempts: 3}.WithDefaults()
			game := map[string]provider.Record{}
			for _, r := range recs {
				game[r.ID] = r
			}
			ids := append(sim.Records(), "unknown_1")
			for _, id := range ids {
				exp := sim.Truth(id)
				var d decision.Decision
				for attempt := 1; ; attempt++ {
					resp, err := c.Get(t.Context(), provider.Lookup{TransactionID: id, IdempotencyKey: "k:" + id})
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
				if exp.Outcome == ledger.Mismatched && exp.Fields[0] == "status" {
					// The mismatched status may be one the shape cannot
					// say; it still reads as a mismatch.
					if got != ledger.Mismatched {
						t.Errorf("%s: %s, want a status mismatch", id, got)
					}
					continue
				}
				if got != exp.Outcome {
					t.Errorf("%s (%v): outcome %s, want %s (%s %s)", id, exp.Fault, got, exp.Outcome, d.Reason, d.Detail)
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
