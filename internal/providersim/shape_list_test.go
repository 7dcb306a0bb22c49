package providersim

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
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
			recs, kinds, accounts := shapeDataset(shape, 2600) // two pages of PayPal's 500 payments
			from := time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)
			to := from.AddDate(0, 0, 1)
			otherDay, late := recs[4].ID, recs[8].ID // payments both
			sim, _, c := shapedClient(t, shape, Config{Records: recs, Kinds: kinds, Accounts: accounts, Seed: 7,
				List: ListConfig{Shift: true, Faults: 2, Late: map[string]bool{late: true},
					Times: map[string]time.Time{otherDay: to.Add(3 * time.Hour)}}})

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
