package metrics

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/outbox"
)

// aliveWindow is how old a consumer's heartbeat may be for it to count as
// running: three heartbeats, so that one slow beat does not count it out.
const aliveWindow = 3 * consume.HeartbeatEvery

// opsDescs are the series an operator's alerts watch that only the
// database knows: they are the same whichever process serves them, so the
// console (which always runs) can serve them when no consumer does.
type opsDescs struct {
	runOpen, runEnqueued, runDeadline         *prometheus.Desc
	consumers, heartbeatAge                   *prometheus.Desc
	deadLetters                               *prometheus.Desc
	notificationDeliveries, notificationOlder *prometheus.Desc
}

func newOpsDescs() opsDescs {
	return opsDescs{
		runOpen: desc("run_open", "1 while the run has items not in a terminal state, else 0 (open runs and those completed recently).",
			"reconciliation_id"),
		runEnqueued: desc("run_enqueued_timestamp_seconds", "When the run was enqueued, Unix seconds (open and recent runs).",
			"reconciliation_id"),
		runDeadline: desc("run_deadline_timestamp_seconds",
			"When the run should be complete, Unix seconds: its enqueue time plus the --deadline of the consumer or scheduler that first saw it (runs with a deadline).",
			"reconciliation_id"),
		consumers: desc("consumers", "Consumers whose heartbeat is at most 15 seconds old (three heartbeats)."),
		heartbeatAge: desc("consumer_heartbeat_age_seconds",
			"Seconds since the latest heartbeat of any consumer; +Inf when no consumer was ever seen."),
		deadLetters: desc("dead_letters", "Dead-lettered queue messages waiting for a redrive, by the reason they were dead-lettered with.",
			"reason"),
		notificationDeliveries: desc("notification_deliveries", "Webhook deliveries of run announcements by state: pending, delivered, failed.",
			"state"),
		notificationOlder: desc("notification_oldest_pending_age_seconds",
			"Age of the oldest webhook delivery still pending, seconds (0: none)."),
	}
}

func (d opsDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.runOpen, d.runEnqueued, d.runDeadline, d.consumers, d.heartbeatAge,
		d.deadLetters, d.notificationDeliveries, d.notificationOlder} {
		ch <- x
	}
}

// collectOperations reads the runs' times, the consumers' heartbeats and
// the webhook deliveries.
func (c *Collector) collectOperations(ctx context.Context, ch chan<- prometheus.Metric) error {
	d := c.ops
	now := c.cfg.Now()
	clocks, err := ledger.RunClocks(ctx, c.cfg.DB, now.Add(-c.cfg.Recent))
	if err != nil {
		return err
	}
	for _, r := range clocks {
		open := 1.0
		if !r.CompletedAt.IsZero() {
			open = 0
		}
		ch <- prometheus.MustNewConstMetric(d.runOpen, prometheus.GaugeValue, open, r.ReconciliationID)
		ch <- prometheus.MustNewConstMetric(d.runEnqueued, prometheus.GaugeValue, unix(r.EnqueuedAt), r.ReconciliationID)
		if !r.DeadlineAt.IsZero() {
			ch <- prometheus.MustNewConstMetric(d.runDeadline, prometheus.GaugeValue, unix(r.DeadlineAt), r.ReconciliationID)
		}
	}
	hb, err := consume.ReadHeartbeats(ctx, c.cfg.DB, now.Add(-aliveWindow))
	if err != nil {
		return err
	}
	age := math.Inf(1)
	if !hb.LastSeen.IsZero() {
		age = max(0, now.Sub(hb.LastSeen).Seconds())
	}
	ch <- prometheus.MustNewConstMetric(d.consumers, prometheus.GaugeValue, float64(hb.Alive))
	ch <- prometheus.MustNewConstMetric(d.heartbeatAge, prometheus.GaugeValue, age)
	st, err := outbox.ReadStats(ctx, c.cfg.DB)
	if err != nil {
		return err
	}
	for state, n := range map[string]int64{outbox.Pending: st.Pending, outbox.Delivered: st.Delivered, outbox.Failed: st.Failed} {
		ch <- prometheus.MustNewConstMetric(d.notificationDeliveries, prometheus.GaugeValue, float64(n), state)
	}
	ch <- prometheus.MustNewConstMetric(d.notificationOlder, prometheus.GaugeValue, st.OldestPending.Seconds())
	return nil
}

// collectDeadLetters counts the queue's dead letters by reason.
func (c *Collector) collectDeadLetters(ctx context.Context, ch chan<- prometheus.Metric) error {
	byReason, err := c.cfg.Queue.DeadLettersByReason(ctx)
	if err != nil {
		return err
	}
	for _, r := range byReason {
		ch <- prometheus.MustNewConstMetric(c.ops.deadLetters, prometheus.GaugeValue, float64(r.Count), r.Reason)
	}
	return nil
}

// unix is t in Unix seconds, to the microsecond (the database's precision).
func unix(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }
