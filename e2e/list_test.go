package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestListModeCrashResumes lists a day in list mode with a consumer killed
// (SIGKILL) in the middle of the listing and two consumers started after
// it: they resume from the stored cursor once the dead lister's lease runs
// out, and between the three of them no stored page is fetched twice (the
// page in flight when the lister died may be: its answer was lost). The
// records the provider has and the file lacks are reported unexpected.
func TestListModeCrashResumes(t *testing.T) {
	const unexpected = 30
	dy := newDay(t, "2026-10-24", 3000, 7)
	recs := dy.records()
	for i := range unexpected {
		recs = append(recs, provider.Record{ID: fmt.Sprintf("tx_unbooked_%03d", i), AmountMinor: int64(500 + i), Currency: "EUR",
			Status: "succeeded"})
	}
	sched, err := providersim.ParseSchedule("4")
	if err != nil {
		t.Fatal(err)
	}
	// Four pages a second: the 31 pages take about 8 s, time to kill the
	// lister in the middle.
	prov := startProvider(t, providersim.Config{Records: recs, Seed: 11, Limit: sched, Burst: 4}, nil)
	w := newWorld(t, prov)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	args := consumeArgs("--until-done", "--mode", "list", "--concurrency", "4", "--rate", "4", "--burst", "4", "--visibility", "2s")
	first := w.start(t, "lister", args...)
	waitFor(t, time.Minute, func() (bool, string) {
		var pages int
		err := w.pool.QueryRow(context.Background(), `SELECT coalesce(max(pages), 0) FROM run_listings`).Scan(&pages)
		return err == nil && pages >= 8, fmt.Sprintf("%d pages stored (%v)", pages, err)
	})
	first.kill()
	var stored int
	if err := w.pool.QueryRow(context.Background(), `SELECT pages FROM run_listings`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored >= 31 {
		t.Fatalf("the listing was done (%d pages) before the kill: slow the provider down", stored)
	}
	others := []*proc{w.start(t, "consumer 1", args...), w.start(t, "consumer 2", args...)}
	for _, p := range others {
		if code := p.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", p.name, code, tail(p.stderr.String(), 20))
		}
	}

	twice := 0
	for page, n := range prov.sim.PageCalls() {
		if n > 1 {
			twice++
			t.Logf("page %q served %d times", page, n)
		}
	}
	if twice > 1 {
		t.Errorf("%d pages fetched more than once; only the one in flight when the lister died may be", twice)
	}
	var state string
	var pages, listed int
	if err := w.pool.QueryRow(context.Background(), `SELECT state, pages, records FROM run_listings`).Scan(&state, &pages, &listed); err != nil {
		t.Fatal(err)
	}
	if state != "done" || pages != 31 || listed != len(recs) {
		t.Errorf("listing: %s, %d pages, %d records; want done, 31 pages, %d records", state, pages, listed, len(recs))
	}

	out := w.mustRun(t, "report", "--date", dy.date, "--format", "json")
	var rep struct {
		Run struct {
			Items, Matched, Unexpected, Open int
		} `json:"run"`
		Unexpected []struct {
			TransactionID string `json:"transaction_id"`
			Amount        int64  `json:"provider_amount_minor"`
		} `json:"unexpected"`
	}
	if err := json.Unmarshal([]byte(out.stdout), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, out.stdout)
	}
	if rep.Run.Open != 0 || rep.Run.Matched != 3000 || rep.Run.Unexpected != unexpected || rep.Run.Items != 3000+unexpected {
		t.Errorf("report run = %+v, want 3000 matched and %d unexpected of %d items, none open", rep.Run, unexpected, 3000+unexpected)
	}
	if len(rep.Unexpected) != unexpected || !strings.HasPrefix(rep.Unexpected[0].TransactionID, "tx_unbooked_") || rep.Unexpected[0].Amount != 500 {
		t.Errorf("report lists %d unexpected records (first %+v), want %d from tx_unbooked_000 at 500", len(rep.Unexpected), rep.Unexpected, unexpected)
	}
	if ok, why := w.done(t); !ok {
		t.Errorf("not done: %s", why)
	}
	w.mustRun(t, "audit", "verify") // exits non-zero on a broken chain
}
