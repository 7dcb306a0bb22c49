package console

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/reconcile/reconcile/internal/limiter"
)

type limitsData struct {
	Limiters []limiterRow
	// History is a page of the limiters' changes, newest first, of
	// Limiter's only when it is set.
	History []limiter.Record
	Limiter string
	// Next is the cursor of the history's next page; nil on the last.
	Next *historyCursor
}

// limitsPage lists every limiter (one per provider) with its settings and
// running state, and the history of their changes with who set a limit and
// why; ?limiter=NAME shows one limiter's history, ?before= pages it.
func (h *Handler) limitsPage(w http.ResponseWriter, r *http.Request, u User) error {
	d, err := h.loadLimitsData(r)
	if err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "limits", view{Title: "Limits", User: &u, Data: d})
	return nil
}

func (h *Handler) loadLimitsData(r *http.Request) (limitsData, error) {
	d := limitsData{Limiter: r.URL.Query().Get("limiter")}
	before, err := parseHistoryCursor(r.URL.Query().Get("before"))
	if err != nil {
		return d, err
	}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Limiters, err = loadLimiters(r.Context(), rd); err != nil {
			return err
		}
		d.History, d.Next, err = loadHistory(r.Context(), rd, d.Limiter, before, h.cfg.PageSize)
		return err
	})
	return d, err
}

// parseLimit reads rate and burst, each defaulting to the current setting.
// parseFor reads the optional for= of a limit change: how long the new limit
// lasts before the one in force before it comes back (empty: until changed).
func parseFor(v url.Values) (time.Duration, error) {
	raw := v.Get("for")
	if raw == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d <= 0 {
		return 0, badRequest("for=%q: want a positive duration such as 2h or 30m", raw)
	}
	return d, nil
}

func parseLimit(v url.Values, cur limiter.Settings) (limiter.Settings, error) {
	s := cur
	if raw := v.Get("rate"); raw != "" {
		rate, err := strconv.ParseFloat(raw, 64)
		if err != nil || !(rate > 0) || math.IsInf(rate, 0) {
			return s, badRequest("rate=%q: want a positive number of requests per second", raw)
		}
		s.Rate = rate
	}
	if raw := v.Get("burst"); raw != "" {
		burst, err := strconv.Atoi(raw)
		if err != nil || burst < 1 {
			return s, badRequest("burst=%q: want a whole number of at least 1", raw)
		}
		s.Burst = burst
	}
	return s, s.Validate()
}

func (h *Handler) limitPreview(w http.ResponseWriter, r *http.Request, u User) error {
	name := r.PathValue("name")
	d := actionData{Action: "limit"}
	err := h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		cur, err := limiter.LoadState(r.Context(), rd, name)
		if err != nil {
			return err
		}
		s, err := parseLimit(r.URL.Query(), cur.Settings)
		if err != nil {
			return err
		}
		l := newLimiterRow(cur)
		d.Limiter = &l
		d.Rate, d.Burst = s.Rate, s.Burst
		d.Hidden = url.Values{"rate": {strconv.FormatFloat(s.Rate, 'f', -1, 64)}, "burst": {strconv.Itoa(s.Burst)}}
		lasts, err := parseFor(r.URL.Query())
		if err != nil {
			return err
		}
		until := ""
		if lasts > 0 {
			d.Hidden.Set("for", lasts.String())
			until = fmt.Sprintf(" For %s only: then the limit in force before it comes back by itself.", lasts)
		}
		d.Detail = fmt.Sprintf("Limiter %s goes from %s/s (burst %d) to %s/s (burst %d); running consumers apply it within a second and the adaptive rate restarts at the new rate.",
			name, strconv.FormatFloat(cur.Rate, 'f', -1, 64), cur.Burst, strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Burst)
		if !cur.Stored {
			d.Detail = fmt.Sprintf("Limiter %s has no row yet; it is created at %s/s (burst %d).", name,
				strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Burst)
		}
		d.Detail += until
		return nil
	})
	if err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "action", view{Title: "Set limit " + name, User: &u, Data: d})
	return nil
}

func (h *Handler) limitSet(w http.ResponseWriter, r *http.Request, u User) error {
	name := r.PathValue("name")
	note, err := actionNote(r)
	if err != nil {
		return err
	}
	cur, err := limiter.LoadSettings(r.Context(), h.cfg.Pool, name)
	if err != nil {
		return err
	}
	s, err := parseLimit(r.PostForm, cur)
	if err != nil {
		return err
	}
	lasts, err := parseFor(r.PostForm)
	if err != nil {
		return err
	}
	if err := limiter.SaveSettings(r.Context(), h.cfg.Pool, name, s, limiter.SetBy{Actor: u.Actor(), Reason: note, For: lasts}); err != nil {
		return err
	}
	h.cfg.Logger.Info("console action", "action", "limit_set", "user", u.Name, "limiter", name,
		"rate", s.Rate, "burst", s.Burst, "for", lasts, "previous_rate", cur.Rate, "previous_burst", cur.Burst, "note", note)
	d, err := h.loadLimitsData(r)
	if err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "limits", view{Title: "Limits", User: &u, Data: d,
		Notice: fmt.Sprintf("Limiter %s set to %s/s, burst %d.", name, strconv.FormatFloat(s.Rate, 'f', -1, 64), s.Burst)})
	return nil
}
