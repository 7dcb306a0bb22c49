package e2e

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// crashConfig sizes the crash scenario.
type crashConfig struct {
	items     int
	kills     int
	consumers int
	rate      int           // shared limit, calls/s
	minGap    time.Duration // between kills
	maxGap    time.Duration
}

// faultyShares are the simulator's faults in the crash scenario: every
// outcome, permanent errors and transient ones.
var faultyShares = providersim.Shares{Mismatch: 0.03, Missing: 0.02, BadRequest: 0.01, BadBody: 0.01, Transient: 0.03}

// crashScenario runs a day with consumers killed by SIGKILL at random
// moments and restarted each time, then checks every invariant.
func crashScenario(t *testing.T, cfg crashConfig) {
	dy := newDay(t, "2026-10-24", cfg.items, 7)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 11, Shares: faultyShares,
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond}}, nil)
	w := newWorld(t, prov)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	args := consumeArgs("--until-done", "--concurrency", "8", "--rate", strconv.Itoa(cfg.rate), "--visibility", "2s")
	consumers := make([]*proc, cfg.consumers)
	for i := range consumers {
		consumers[i] = w.start(t, "consumer "+strconv.Itoa(i), args...)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	start := time.Now()
	var killedAt []int
	for len(killedAt) < cfg.kills {
		gap := cfg.minGap + time.Duration(rng.Int64N(int64(cfg.maxGap-cfg.minGap)))
		time.Sleep(gap)
		done, total := w.progress(t, dy.date)
		if done == total {
			t.Fatalf("the run finished after only %d of %d kills: slow it down (lower the rate) so every kill lands mid-run", len(killedAt), cfg.kills)
		}
		i := rng.IntN(len(consumers))
		victim := consumers[i]
		if victim.exited() {
			t.Fatalf("%s exited by itself with code %d before the run was done:\n%s", victim.name, victim.code, tail(victim.stderr.String(), 20))
		}
		victim.kill()
		killedAt = append(killedAt, done)
		consumers[i] = w.start(t, victim.name+" (restarted)", args...)
	}
	for _, c := range consumers {
		if code := c.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	elapsed := time.Since(start)
	waitFor(t, 10*time.Second, func() (bool, string) { return w.done(t) })
	fig := checkInvariants(t, w, dy, truth(prov.sim))
	t.Logf("FIGURES crash: %d SIGKILLs (terminal items at each kill: %v), %d consumers x 8 workers at %d/s; %s; elapsed %s",
		len(killedAt), killedAt, cfg.consumers, cfg.rate, fig, elapsed.Round(time.Millisecond))
}
