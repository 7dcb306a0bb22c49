//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestFailover is the failover scenario: a primary and its streaming standby
// (pg_basebackup -R) behind one multi-host URL with
// target_session_attrs=read-write; the primary killed by SIGKILL in the
// middle of a run, the standby promoted three seconds later, as a failover
// manager would. The same consumer processes go on against the new primary
// and finish with every outcome right. Replication is asynchronous (and the
// throwaway primary runs with synchronous_commit off), so the last commits
// before the kill may be lost: their messages come back and are processed
// again under the same idempotency key.
func TestFailover(t *testing.T) {
	ctx := context.Background()
	primary, err := pgserver.Start(ctx, pgserver.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Stop() })
	conn, err := pgx.Connect(ctx, primary.ConnString("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE reconcile"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	standby, err := primary.StartStandby(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	dbURL := fmt.Sprintf("host=%s,%s port=5432,5432 user=postgres dbname=reconcile sslmode=disable target_session_attrs=read-write",
		primary.SocketDir(), standby.SocketDir())

	dy := newDay(t, "2026-10-24", 3000, 41)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 14, Shares: faultyShares,
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond}}, nil)
	w := newWorldOn(t, dbURL, prov)
	w.mustRun(t, "migrate")
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	args := consumeArgs("--until-done", "--concurrency", "8", "--rate", "100", "--visibility", "5s")
	consumers := []*proc{w.start(t, "consumer 0", args...), w.start(t, "consumer 1", args...)}
	start := time.Now()
	waitFor(t, time.Minute, func() (bool, string) {
		done, total := w.progress(t, dy.date)
		return done >= total/3, fmt.Sprintf("%d of %d items done", done, total)
	})
	atKill, _ := w.progress(t, dy.date)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	// The time a failover manager takes to notice and promote is part of
	// the scenario.
	time.Sleep(3 * time.Second)
	for _, c := range consumers {
		if c.exited() {
			t.Fatalf("%s exited while there was no primary (code %d):\n%s", c.name, c.code, tail(c.stderr.String(), 20))
		}
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	promotedAt := time.Now()
	atPromotion, _ := w.progress(t, dy.date)

	// Resumed: the first transition recorded from a call made after the
	// promotion (transitions.at is the time of the call).
	var resumedAfter time.Duration
	waitFor(t, time.Minute, func() (bool, string) {
		var first *time.Time
		if err := w.pool.QueryRow(ctx, `SELECT min(at) FROM transitions WHERE at > $1`, promotedAt).Scan(&first); err != nil {
			return false, err.Error()
		}
		if first == nil {
			return false, "no transition since the promotion"
		}
		resumedAfter = first.Sub(promotedAt)
		return true, ""
	})
	for _, c := range consumers {
		if code := c.wait(t, 3*time.Minute); code != 0 {
			t.Fatalf("%s exited %d:\n%s", c.name, code, tail(c.stderr.String(), 20))
		}
	}
	elapsed := time.Since(start)
	waitFor(t, 10*time.Second, func() (bool, string) { return w.done(t) })
	fig := checkInvariants(t, w, dy, truth(prov.sim))
	if resumedAfter > 5*time.Second {
		t.Errorf("the consumers resumed %s after the promotion, want at most 5s", resumedAfter.Round(time.Millisecond))
	}
	warnings, longest := warningLines(consumers)
	// The failures that are already summarised (logthrottle, the limiter's
	// own throttle) log one line for an outage of a few seconds, a second
	// one at most when the new primary refuses a first connection.
	for _, c := range consumers {
		for _, msg := range []string{"queue listener unavailable; polling", "limiter poll failed"} {
			if n := strings.Count(c.stderr.String(), `"msg":"`+msg+`"`); n > 2 {
				t.Errorf("%s logged %q %d times during a %s outage, want one line with a count", c.name, msg, n,
					promotedAt.Sub(killedAt).Round(time.Second))
			}
		}
	}
	if longest > 2000 {
		t.Errorf("a warning line is %d bytes long: error text must not carry argument values", longest)
	}
	t.Logf("FIGURES failover: primary killed with %d of %d items done (%d terminal on the standby at its promotion: "+
		"%d outcomes lost with the asynchronous tail, processed again); promoted %s after the kill; "+
		"first call recorded %s after the promotion; the same 2 consumer processes finished (exit 0); %s; elapsed %s",
		atKill, fig.Items, atPromotion, max(atKill-atPromotion, 0), promotedAt.Sub(killedAt).Round(time.Millisecond),
		resumedAfter.Round(time.Millisecond), fig, elapsed.Round(time.Millisecond))
	t.Logf("FIGURES failover warnings (lines per process and message; the longest %d bytes): %s", longest, warnings)
}

// warningLines counts the WARN and ERROR lines of each process by message,
// as "process: message ×n" sorted, and returns the longest line's length.
func warningLines(procs []*proc) (string, int) {
	var out []string
	longest := 0
	for _, p := range procs {
		count, l := warningCounts(p)
		longest = max(longest, l)
		for msg, n := range count {
			out = append(out, fmt.Sprintf("%s: %q ×%d", p.name, msg, n))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; "), longest
}
