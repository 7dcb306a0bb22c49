//go:build e2e

package e2e

import (
	"context"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestStopsInsteadOfMissing runs the real binary with two configurations
// that can find nothing: a wrong base path (every id answered 404 "no such
// route") and a Stripe test-mode key asking for live objects (Stripe's
// resource_missing that says so). Each stops the consumer's calls with a
// WARN naming the URL and the body within the first 20 items; no item is
// recorded, no attempt is charged. With the right URL the night then
// reconciles in full with every invariant, nothing to redrive.
func TestStopsInsteadOfMissing(t *testing.T) {
	t.Parallel()
	t.Run("wrong base path", func(t *testing.T) {
		t.Parallel()
		dy := newDay(t, "2026-12-06", 400, 41)
		prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 41, Shares: providersim.Shares{Mismatch: 0.03, Missing: 0.03}}, nil)
		w := newWorld(t, prov)
		w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
		wrong := prov.URL + "/api"
		c := w.start(t, "consumer", append(consumeArgs("--rate", "200", "--burst", "10", "--concurrency", "4"), "--provider-url", wrong)...)
		stopped := waitForStop(t, w, c, wrong, "no such route", "wrong base URL")
		if n := prov.sim.Stats().Calls; n != 0 {
			t.Errorf("%d calls reached the provider's lookups", n)
		}
		t.Logf("FIGURES wrong base path: %s", stopped)

		res := w.run(t, nil, consumeArgs("--until-done", "--rate", "300", "--burst", "20")...)
		if res.code != 0 {
			t.Fatalf("consume with the right URL:\n%s", res)
		}
		fig := checkInvariants(t, w, dy, truth(prov.sim))
		t.Logf("FIGURES after the fix: %s", fig)
	})
	t.Run("stripe test key for live objects", func(t *testing.T) {
		t.Parallel()
		dy := newDay(t, "2026-12-07", 300, 42)
		const token = "sk_test_51WrongMode"
		sim, err := providersim.New(providersim.Config{Records: dy.records(), Seed: 42, Token: provider.Secret(token)})
		if err != nil {
			t.Fatal(err)
		}
		h, err := providersim.Shaped(sim, providersim.ShapeStripe, providersim.ShapeConfig{WrongMode: true})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		w := newWorld(t, nil)
		w.extraEnv = []string{"RECONCILE_PROVIDER_PROFILE=stripe", "RECONCILE_PROVIDER_TOKEN=" + token}
		w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)
		c := w.start(t, "consumer", append(consumeArgs("--rate", "200", "--burst", "10", "--concurrency", "4"), "--provider-url", srv.URL)...)
		stopped := waitForStop(t, w, c, srv.URL, "a similar object exists in live mode", "another mode or account")
		t.Logf("FIGURES wrong mode: %s", stopped)
	})
}

// waitForStop waits for consumer c to warn that its circuit opened, naming
// url, the body's text and why, then checks that nothing was recorded and
// no attempt charged, and stops it with SIGTERM. It returns a summary.
func waitForStop(t *testing.T, w *world, c *proc, url, body, why string) string {
	t.Helper()
	waitFor(t, time.Minute, func() (bool, string) {
		if c.exited() {
			t.Fatalf("consumer exited %d before its circuit opened:\n%s", c.code, tail(c.stderr.String(), 20))
		}
		return strings.Contains(c.stderr.String(), "circuit open, calls stopped"), "no circuit warning yet"
	})
	var warn string
	for line := range strings.Lines(c.stderr.String()) {
		if strings.Contains(line, "circuit open, calls stopped") {
			warn = line
			break
		}
	}
	if !strings.Contains(warn, `"level":"WARN"`) || !strings.Contains(warn, url) || !strings.Contains(warn, body) || !strings.Contains(warn, why) {
		t.Errorf("opening warning: %s\nwant a WARN naming %s, %q and %q", warn, url, body, why)
	}
	var terminal, charged, touched int
	if err := w.pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM items WHERE terminal_at IS NOT NULL),
		       (SELECT count(*) FROM queue_messages WHERE attempt > 0),
		       (SELECT count(DISTINCT transaction_id) FROM transitions)`).Scan(&terminal, &charged, &touched); err != nil {
		t.Fatal(err)
	}
	// At most the 20 judged, and the calls in flight when it opened.
	if terminal != 0 || charged != 0 || touched > 20+4 {
		t.Errorf("after the stop: %d items recorded, %d messages charged an attempt, %d items touched; want 0, 0, at most 24",
			terminal, charged, touched)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code := c.wait(t, time.Minute); code != 0 {
		t.Errorf("consumer exited %d after SIGTERM:\n%s", code, tail(c.stderr.String(), 10))
	}
	return strings.TrimSpace(warn)
}
