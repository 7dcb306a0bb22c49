package provider

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/reconcile/reconcile/internal/profile"
)

// stripeRequest is what a Stripe-shaped server saw of one request.
type stripeRequest struct{ path, query, account, version string }

// TestStripeKindsAndAccounts: each kind of row goes to its own Stripe
// endpoint, the PaymentIntent with its charge expanded, with
// Stripe-Account for a connected account's items only; refunds and
// disputes come back negative; an item the account map lacks is never
// asked about.
func TestStripeKindsAndAccounts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []stripeRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, stripeRequest{r.URL.Path, r.URL.RawQuery, r.Header.Get("Stripe-Account"), r.Header.Get("Stripe-Version")})
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/payment_intents/pi_1":
			_, _ = w.Write([]byte(`{"id":"pi_1","amount":5000,"amount_received":4000,"currency":"isk","status":"succeeded",
				"latest_charge":{"refunded":false,"amount_refunded":1000,"disputed":false}}`))
		case "/v1/refunds/re_1":
			_, _ = w.Write(fixture(t, "stripe-refund.json"))
		case "/v1/disputes/dp_1":
			_, _ = w.Write(fixture(t, "stripe-dispute.json"))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write(fixture(t, "stripe-404.json"))
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, func(c *Config) { c.Profile = loadProfile(t, "stripe") })

	for _, tc := range []struct {
		l    Lookup
		want Record
		kind string
		saw  stripeRequest
	}{
		{Lookup{TransactionID: "pi_1", AccountID: "acct_1Nv0FGQ9RKHgCVdK"}, Record{"pi_1", 40, "ISK", "partially_refunded"}, "payment",
			stripeRequest{"/v1/payment_intents/pi_1", "expand%5B%5D=latest_charge", "acct_1Nv0FGQ9RKHgCVdK", "2024-06-20"}},
		{Lookup{TransactionID: "re_1", AccountID: "player_17"}, Record{"re_1Nispe2eZvKYlo2Cd31jOCgZ", -1000, "USD", "succeeded"}, "refund",
			stripeRequest{"/v1/refunds/re_1", "", "", "2024-06-20"}},
		{Lookup{TransactionID: "dp_1", Kind: "dispute"}, Record{"dp_1MtJUT2eZvKYlo2CNaw2HvEv", -1000, "USD", "disputed"}, "dispute",
			stripeRequest{"/v1/disputes/dp_1", "", "", "2024-06-20"}},
	} {
		resp, err := c.Get(t.Context(), tc.l)
		mu.Lock()
		last := seen[len(seen)-1]
		mu.Unlock()
		if last != tc.saw {
			t.Errorf("%s: request %+v, want %+v", tc.l.TransactionID, last, tc.saw)
		}
		if tc.l.TransactionID != "pi_1" {
			// The fixtures' ids are not the ids asked for.
			if KindOf(err) != KindBadBody {
				t.Errorf("%s: %v, want a bad body (id)", tc.l.TransactionID, err)
			}
			continue
		}
		if err != nil || resp.Record != tc.want || resp.Kind != tc.kind || resp.Rule != "status_rules[2]" {
			t.Errorf("%s: %+v, %v; want %+v", tc.l.TransactionID, resp, err, tc.want)
		}
	}

	// An account map the item's account is not in: no call, an error of
	// its own kind.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "accounts.json"), []byte(`{"player_17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := loadProfile(t, "stripe")
	m, err := profile.LoadAccountMap(filepath.Join(dir, "accounts.json"))
	if err != nil {
		t.Fatal(err)
	}
	p.Account.Map, p.Account.MapFile = m, "accounts.json"
	mapped := newClient(t, srv.URL, func(c *Config) { c.Profile = p })
	if _, err := mapped.Get(t.Context(), Lookup{TransactionID: "pi_1", AccountID: "player_17"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if got := seen[len(seen)-1].account; got != "acct_1Nv0FGQ9RKHgCVdK" {
		t.Errorf("mapped account sent as %q", got)
	}
	before := len(seen)
	mu.Unlock()
	_, err = mapped.Get(t.Context(), Lookup{TransactionID: "pi_1", AccountID: "player_99"})
	var ue *profile.UnmappedAccountError
	if KindOf(err) != KindUnmappedAccount || !errors.As(err, &ue) || ue.AccountID != "player_99" {
		t.Errorf("unmapped account: %v", err)
	}
	mu.Lock()
	if len(seen) != before {
		t.Errorf("%d calls for an unmapped account", len(seen)-before)
	}
	mu.Unlock()
}
