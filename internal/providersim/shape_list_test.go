package providersim

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// TestShapesListTheDay pages through each shape's list with the built-in
// profile of the same name while pages shift and fail between them: the
// client reads every payment of the window exactly as the simulator holds
// it, and nothing else (no refund or dispute, no record of another day, no
// late record, for Stripe no connected account's payment, for PayPal no
// payment in a status its reporting list has no letter for), and no page
// is served twice.
func TestShapesListTheDay(t *testing.T) {
	t.Parallel()
	for _, shape := range []Shape{ShapeStripe, ShapePayPal, ShapeSquare} {
		t.Run(shape.String(), func(t *testing.T) {
			t.Parallel()
			recs, kinds, accounts := kindsDataset(2600) // two pages of PayPal's 500 payments
			for i := range recs {
				kind := cmp.Or(kinds[recs[i].ID], payments.KindPayment)
				if !shape.Expresses(kind, recs[i].Status) {
					recs[i].Status = map[string]string{payments.KindPayment: payments.StatusSucceeded,
						payments.KindRefund: payments.StatusSucceeded, payments.KindDispute: payments.StatusDisputed}[kind]
				}
			}
			from := time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)
			to := from.AddDate(0, 0, 1)
			otherDay, late := recs[4].ID, recs[8].ID // payments both
			sim, err := New(Config{Records: recs, Kinds: kinds, Accounts: accounts, Seed: 7, Token: "sim-token",
				List: ListConfig{Shift: true, Faults: 2, Late: map[string]bool{late: true},
					Times: map[string]time.Time{otherDay: to.Add(3 * time.Hour)}}})
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

			want := map[string]provider.Record{}
			for _, r := range recs {
				switch {
				case kinds[r.ID] != "", r.ID == otherDay, r.ID == late:
				case shape == ShapeStripe && accounts[r.ID] != "":
				case shape == ShapePayPal && paypalStatus[r.Status] == "":
				default:
					want[r.ID] = r
				}
			}
			got := map[string]provider.Listed{}
			var pages, repeated, failed int
			for cursor := ""; ; {
				resp, page, err := c.ListPage(context.Background(), provider.PageRequest{From: from, To: to, Cursor: cursor})
				if err != nil {
					t.Fatalf("page %q: %v", cursor, err)
				}
				if resp.Status == http.StatusServiceUnavailable {
					failed++
					continue
				}
				if resp.Status != http.StatusOK {
					t.Fatalf("page %q: status %d: %s", cursor, resp.Status, resp.BodyExcerpt)
				}
				pages++
				for _, r := range page.Records {
					if _, seen := got[r.ID]; seen {
						repeated++
					}
					got[r.ID] = r
				}
				if page.Next == "" {
					break
				}
				cursor = page.Next
			}
			if len(got) != len(want) {
				t.Errorf("listed %d records, want the %d payments of the window", len(got), len(want))
			}
			for id, w := range want {
				g, ok := got[id]
				if !ok {
					t.Errorf("%s not listed", id)
					continue
				}
				if g.AmountMinor != w.AmountMinor || g.Currency != w.Currency || g.Status != w.Status || g.Kind != payments.KindPayment {
					t.Errorf("%s listed as %+v, want %+v", id, g, w)
				}
			}
			if pages < 2 || repeated != pages-1 || failed != 2 {
				t.Errorf("%d pages, %d records repeated, %d failures: want at least 2 pages, each after the first shifted back one record, and the 2 faults between pages",
					pages, repeated, failed)
			}
			for page, n := range sim.PageCalls() {
				if n != 1 {
					t.Errorf("page %q served %d times", page, n)
				}
			}
		})
	}
}
