package console

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/outbox"
)

// queueSplit is where a run's open messages are, each count capped.
type queueSplit struct {
	Available, InFlight, Delayed capped
}

type runData struct {
	Run      runRow
	Now      time.Time
	Queue    queueSplit
	Accounts []ledger.Account
	// NextAccount is the cursor of the next page of accounts.
	NextAccount string
	Limiters    []limiterRow
	// Limiter is the limiter the chart shows (nil when it has no row).
	Limiter *limiterRow
	// Breakdown is the run's outcomes by provider and amounts at stake.
	Breakdown breakdown
	Traffic   traffic
	Chart     svgChart
	// ETA is the estimated time to finish; zero when done or unknown.
	ETA      time.Duration
	ETABasis string
	// Calls and Throttles are the run's provider calls and 429s so far:
	// its counters once it is complete, which count an item's calls when
	// the item finishes; while it runs, what its chart adds up to, so the
	// two agree (Estimated when the chart is sampled).
	Calls, Throttles int64
	Estimated        bool
	// Announcements are the run's announcements to webhooks with their
	// deliveries (the morning message).
	Announcements []outbox.Announcement
}

// runPage shows a run: progress and ETA, queue, chart, accounts, limiters
// and completion records. It reloads itself while the run is open.
func (h *Handler) runPage(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	after := r.URL.Query().Get("accounts_after")
	limiterName := r.URL.Query().Get("limiter")
	d := runData{Now: h.cfg.Now()}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		if d.Run.Open > 0 {
			if d.Queue, err = h.loadQueueSplit(r.Context(), rd, id, h.cfg.CountCap); err != nil {
				return err
			}
		}
		if d.Accounts, d.NextAccount, err = loadAccounts(r.Context(), rd, id, after, h.cfg.PageSize); err != nil {
			return err
		}
		if d.Announcements, err = outbox.ForRuns(r.Context(), rd, []uuid.UUID{id}); err != nil {
			return err
		}
		bs, err := loadBreakdowns(r.Context(), rd, []uuid.UUID{id})
		if err != nil {
			return err
		}
		d.Breakdown = *bs[id]
		if d.Limiters, err = loadLimiters(r.Context(), rd); err != nil {
			return err
		}
		if d.Traffic, err = loadTraffic(r.Context(), rd, id); err != nil {
			return err
		}
		d.Limiter = chartLimiter(d.Limiters, limiterName, h.cfg.Limiter, d.Breakdown.Providers)
		if d.Run.Open > 0 && d.Now.After(d.Traffic.End) && !d.Traffic.End.IsZero() {
			d.Traffic.End = d.Now
		}
		lim, err := loadLimits(r.Context(), rd, d.Limiter, d.Traffic.Start, d.Traffic.End)
		d.Chart = newSVGChart(d.Traffic, lim)
		return err
	})
	if err != nil {
		return err
	}
	d.ETA, d.ETABasis = estimate(d)
	d.Calls, d.Throttles = d.Run.ProviderCalls, d.Run.Throttles
	if d.Run.Open > 0 && len(d.Traffic.Points) > 0 {
		d.Calls, d.Throttles = int64(math.Round(d.Traffic.Calls)), int64(math.Round(d.Traffic.Throttles))
		d.Estimated = d.Traffic.Sampled
	}
	v := view{Title: d.Run.ReconciliationID, User: &u, Data: d}
	if d.Run.Open > 0 {
		v.Refresh = int(h.cfg.Refresh / time.Second)
	}
	h.render(w, r, http.StatusOK, "run", v)
	return nil
}

// providerLimiterPrefix starts the limiter names of a providers file's
// providers (provider:stripe); the default provider's is Config.Limiter.
const providerLimiterPrefix = "provider:"

// chartLimiter picks the limiter a run's chart shows: the one asked for,
// else that of the run's first named provider, else fallback.
func chartLimiter(ls []limiterRow, asked, fallback string, providers []providerOutcomes) *limiterRow {
	name := asked
	if name == "" {
		name = fallback
		for _, p := range providers {
			if p.Provider != "" {
				name = providerLimiterPrefix + p.Provider
				break
			}
		}
	}
	for i := range ls {
		if ls[i].Name == name {
			return &ls[i]
		}
	}
	return nil
}

// estimate is the time the run's open items need at the rate items
// finished lately, or else at the limiter's effective rate.
func estimate(d runData) (time.Duration, string) {
	open := float64(d.Run.Open)
	if open == 0 {
		return 0, ""
	}
	if n := len(d.Traffic.Points); n > 0 {
		recent := d.Traffic.Points[max(0, n-3):]
		var sum float64
		for _, p := range recent {
			sum += p.Done
		}
		if rate := sum / float64(len(recent)); rate > 0 && d.Now.Sub(d.Traffic.Points[n-1].At) < time.Minute {
			return time.Duration(open / rate * float64(time.Second)),
				"at the " + strings.Replace(human.Rate(rate), "/", " items/", 1) + " of the last samples"
		}
	}
	if d.Limiter != nil && d.Limiter.EffectiveRate > 0 {
		return time.Duration(open / d.Limiter.EffectiveRate * float64(time.Second)),
			fmt.Sprintf("at limiter %s's effective %s", d.Limiter.Name, strings.Replace(human.Rate(d.Limiter.EffectiveRate), "/", " calls/", 1))
	}
	return 0, ""
}

// loadQueueSplit counts where a run's open messages are, each count capped
// at limit.
func (h *Handler) loadQueueSplit(ctx context.Context, rd *reader, runID uuid.UUID, limit int) (queueSplit, error) {
	s, err := h.cfg.Queue.RunSplit(ctx, rd, runID, limit)
	if err != nil {
		return queueSplit{}, err
	}
	c := int64(limit)
	return queueSplit{Available: capped{s.Available, c}, InFlight: capped{s.InFlight, c}, Delayed: capped{s.Delayed, c}}, nil
}

// loadAccounts reads a page of a run's accounts after the account id
// after, and the cursor of the next page (empty on the last).
func loadAccounts(ctx context.Context, rd *reader, runID uuid.UUID, after string, page int) ([]ledger.Account, string, error) {
	as, err := ledger.Accounts(ctx, rd, runID, after, page+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(as) > page {
		as = as[:page]
		next = as[page-1].AccountID
	}
	return as, next, nil
}
