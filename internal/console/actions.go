package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
)

// Every action is two requests: a GET that shows what would happen, counted
// on the server, with a form asking for a reason; and the POST that does
// it, through the package that owns the tables, recording the acting user.

// maxNote is the longest reason kept, in runes.
const maxNote = 200

// actionNote returns the form's reason, cleaned of control characters; an
// error page when it is missing.
func actionNote(r *http.Request) (string, error) {
	note := strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, strings.TrimSpace(r.PostForm.Get("note")))
	if note == "" {
		return "", badRequest("give a reason for this action")
	}
	if rs := []rune(note); len(rs) > maxNote {
		note = string(rs[:maxNote])
	}
	return note, nil
}

// actor is what the ledger records as the author of an action: the user
// and, since transitions of a requeue carry no details, the reason.
func actor(u User, note string) string { return u.Actor() + " (" + note + ")" }

// actionData is what the preview and result pages of every action get.
type actionData struct {
	Run    runRow
	Action string
	// Count is what the action will touch (preview) or touched (result).
	Count int64
	// Stays is what it leaves alone, as a sentence.
	Stays string
	// Detail says more about what happens, as a sentence.
	Detail string
	// Hidden are the form fields that repeat the selection.
	Hidden url.Values
	// Done is true on the result page.
	Done bool
	// Unavailable says why the action cannot be done here.
	Unavailable string
	// Limiter, Rate and Burst are set for a limit change.
	Limiter *limiterRow
	Rate    float64
	Burst   int
}

// redriveSelection is which dead letters of a run a redrive takes: message
// ids (id=…), one reason group (reason=…) or all of them (all=1).
type redriveSelection struct {
	IDs    []int64
	Reason string
	All    bool
}

func parseRedrive(v url.Values) (redriveSelection, error) {
	var s redriveSelection
	for _, raw := range v["id"] {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n <= 0 {
			return s, badRequest("id=%q: not a message id", raw)
		}
		s.IDs = append(s.IDs, n)
	}
	s.Reason = v.Get("reason")
	s.All = v.Get("all") == "1"
	if len(s.IDs) == 0 && s.Reason == "" && !s.All {
		return s, badRequest("select dead letters to redrive (ids, a reason or all)")
	}
	return s, nil
}

func (s redriveSelection) hidden() url.Values {
	v := url.Values{}
	for _, id := range s.IDs {
		v.Add("id", strconv.FormatInt(id, 10))
	}
	if s.Reason != "" {
		v.Set("reason", s.Reason)
	}
	if s.All {
		v.Set("all", "1")
	}
	return v
}

// selectDeadLetters returns the ids of the run's dead letters s selects.
func (h *Handler) selectDeadLetters(ctx context.Context, db queue.Querier, runID uuid.UUID, s redriveSelection) ([]int64, error) {
	return h.cfg.Queue.DeadLetterIDs(ctx, db, runID, s.IDs, s.Reason)
}

func (h *Handler) redrivePreview(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	sel, err := parseRedrive(r.URL.Query())
	if err != nil {
		return err
	}
	d := actionData{Action: "redrive", Hidden: sel.hidden()}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		ids, err := h.selectDeadLetters(r.Context(), rd, id, sel)
		d.Count = int64(len(ids))
		return err
	})
	if err != nil {
		return err
	}
	d.Stays = fmt.Sprintf("%s other dead letters and every finished item stay as they are.", fmtInt(max(0, d.Run.DeadLettered-d.Count)))
	d.Detail = "Each goes back to the queue with a fresh delivery count, and its item moves from dead_lettered to queued with a recorded transition. A running consumer picks them up."
	h.render(w, r, http.StatusOK, "action", view{Title: "Redrive dead letters", User: &u, Data: d})
	return nil
}

func (h *Handler) redrive(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	sel, err := parseRedrive(r.PostForm)
	if err != nil {
		return err
	}
	note, err := actionNote(r)
	if err != nil {
		return err
	}
	var n int
	err = pgx.BeginFunc(r.Context(), h.cfg.Pool, func(tx pgx.Tx) error {
		ids, err := h.selectDeadLetters(r.Context(), tx, id, sel)
		if err != nil || len(ids) == 0 {
			return err // with no ids the filter would take the whole run
		}
		n, err = enqueue.Requeue(r.Context(), h.cfg.Queue, tx, queue.Filter{RunID: id, IDs: ids}, "redrive", actor(u, note))
		return err
	})
	if err != nil {
		return fmt.Errorf("redrive dead letters of run %s: %w", id, err)
	}
	h.cfg.Logger.Info("console action", "action", "redrive", "user", u.Name, "run_id", id, "count", n, "note", note)
	return h.actionDone(w, r, u, id, actionData{Action: "redrive", Count: int64(n),
		Detail: fmt.Sprintf("Redrove %d dead letter(s) back to the queue.", n)})
}

// runOnly reads run id in a read-only transaction of its own.
func (h *Handler) runOnly(ctx context.Context, id uuid.UUID) (runRow, error) {
	var run runRow
	err := h.read(ctx, h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		run, err = loadRun(ctx, rd, id)
		return err
	})
	return run, err
}

// actionDone renders the result of an action with the run as it is now.
func (h *Handler) actionDone(w http.ResponseWriter, r *http.Request, u User, id uuid.UUID, d actionData) error {
	d.Done = true
	var err error
	if d.Run, err = h.runOnly(r.Context(), id); err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "action", view{Title: "Done", User: &u, Data: d, Notice: d.Detail})
	return nil
}

// rerunPlan is what a re-run of the run's date would do.
type rerunPlan struct {
	mode   enqueue.Rerun
	latest runRow // the date's latest generation, which a failed re-run takes
	count  int64
	stays  string
	detail string
	// problem says why the re-run cannot be done from the console.
	problem string
}

func (h *Handler) planRerun(ctx context.Context, rd *reader, run runRow, mode enqueue.Rerun) (rerunPlan, error) {
	p := rerunPlan{mode: mode}
	s, err := ledger.FindSummary(ctx, rd, ledger.RunFilter{Date: run.BusinessDate, NewestFirst: true})
	latest := runRow{s}
	if err != nil {
		return p, fmt.Errorf("find latest run of %s: %w", run.BusinessDate, err)
	}
	p.latest = latest
	switch mode {
	case enqueue.RerunFailed:
		p.count = latest.DeadLettered
		p.stays = fmt.Sprintf("%s matched, %s mismatched and %s missing items of %s stay as they are.",
			fmtInt(latest.Matched), fmtInt(latest.Mismatched), fmtInt(latest.Missing), latest.ReconciliationID)
		p.detail = fmt.Sprintf("The dead letters of %s (the latest generation of %s) go back to the queue.",
			latest.ReconciliationID, run.BusinessDate)
	case enqueue.RerunAll:
		p.count = latest.Items
		p.stays = fmt.Sprintf("Generation %d and its outcomes stay in the ledger as they are.", latest.Generation)
		p.detail = fmt.Sprintf("Generation %d of %s checks every payment of the source %s again.",
			latest.Generation+1, run.BusinessDate, latest.Source)
		sum, err := h.sourceSHA256(latest.Source)
		switch {
		case err != nil:
			p.problem = fmt.Sprintf("The source cannot be read again here (%v); re-run with `reconcile enqueue --date %s --rerun all --source FILE`.", err, run.BusinessDate)
		case sum != latest.SourceSHA256:
			p.problem = fmt.Sprintf("The source %s has changed since generation %d (SHA-256 %s, recorded %s); re-run it with `reconcile enqueue` if that is intended.",
				latest.Source, latest.Generation, sum, latest.SourceSHA256)
		}
	}
	return p, nil
}

func (h *Handler) sourceSHA256(source string) (string, error) {
	f, err := h.cfg.OpenSource(source)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hs := sha256.New()
	if _, err := io.Copy(hs, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(hs.Sum(nil)), nil
}

func rerunMode(s string) (enqueue.Rerun, error) {
	switch m := enqueue.Rerun(s); m {
	case enqueue.RerunFailed, enqueue.RerunAll:
		return m, nil
	}
	return "", badRequest("mode=%q: want failed or all", s)
}

func (h *Handler) rerunPreview(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	mode, err := rerunMode(r.URL.Query().Get("mode"))
	if err != nil {
		return err
	}
	var p rerunPlan
	d := actionData{Action: "rerun", Hidden: url.Values{"mode": {string(mode)}}}
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		p, err = h.planRerun(r.Context(), rd, d.Run, mode)
		return err
	})
	if err != nil {
		return err
	}
	d.Count, d.Stays, d.Detail, d.Unavailable = p.count, p.stays, p.detail, p.problem
	h.render(w, r, http.StatusOK, "action", view{Title: "Re-run " + d.Run.BusinessDate.String(), User: &u, Data: d})
	return nil
}

func (h *Handler) rerun(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	mode, err := rerunMode(r.PostForm.Get("mode"))
	if err != nil {
		return err
	}
	note, err := actionNote(r)
	if err != nil {
		return err
	}
	var run runRow
	var p rerunPlan
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		p, err = h.planRerun(r.Context(), rd, run, mode)
		return err
	})
	if err != nil {
		return err
	}
	if p.problem != "" {
		return &httpError{code: http.StatusConflict, msg: p.problem}
	}
	date := run.BusinessDate
	loc, err := time.LoadLocation(p.latest.TimeZone)
	if err != nil {
		return fmt.Errorf("time zone of run %s: %w", p.latest.ReconciliationID, err)
	}
	e, err := enqueue.New(h.cfg.Pool, enqueue.Config{Queue: h.cfg.Queue, Actor: actor(u, note), Logger: h.cfg.Logger})
	if err != nil {
		return err
	}
	req := enqueue.Request{Date: date, Location: loc, Source: p.latest.Source, Rerun: mode, Trigger: enqueue.Manual,
		Open: func() (io.ReadCloser, error) { return h.cfg.OpenSource(p.latest.Source) }}
	res, err := e.Enqueue(r.Context(), req)
	var problems payments.ProblemList
	if errors.As(err, &problems) {
		return &httpError{code: http.StatusConflict, msg: "the source has bad rows: " + problems.Error()}
	}
	if err != nil {
		return fmt.Errorf("re-run %s: %w", run.BusinessDate, err)
	}
	h.cfg.Logger.Info("console action", "action", "rerun_"+string(mode), "user", u.Name, "run_id", res.RunID,
		"generation", res.Generation, "requeued", res.Requeued, "items", res.Items, "note", note)
	d := actionData{Action: "rerun", Count: int64(res.Requeued)}
	if mode == enqueue.RerunAll {
		d.Count = int64(res.Items)
		d.Detail = fmt.Sprintf("Created %s with %d items.", res.ReconciliationID, res.Items)
	} else {
		d.Detail = fmt.Sprintf("Requeued %d dead-lettered item(s) of %s.", res.Requeued, res.ReconciliationID)
	}
	return h.actionDone(w, r, u, res.RunID, d)
}

func (h *Handler) cancelPreview(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	d := actionData{Action: "cancel", Hidden: url.Values{}}
	if d.Run, err = h.runOnly(r.Context(), id); err != nil {
		return err
	}
	d.Count = d.Run.Open
	d.Stays = fmt.Sprintf("The %s finished items keep their outcomes.", fmtInt(d.Run.Done()))
	d.Detail = "Open items stop being checked: their messages leave the queue and the items are recorded as cancelled."
	h.render(w, r, http.StatusOK, "action", view{Title: "Cancel " + d.Run.ReconciliationID, User: &u, Data: d})
	return nil
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	note, err := actionNote(r)
	if err != nil {
		return err
	}
	run, err := h.runOnly(r.Context(), id)
	if err != nil {
		return err
	}
	date := run.BusinessDate
	// The same path as `reconcile cancel`: the run is locked there and its
	// open items are counted again, so a preview that went stale changes
	// nothing but the count.
	e, err := enqueue.New(h.cfg.Pool, enqueue.Config{Queue: h.cfg.Queue, Actor: u.Actor(), Logger: h.cfg.Logger})
	if err != nil {
		return err
	}
	res, err := e.Cancel(r.Context(), enqueue.CancelRequest{Date: date, Generation: run.Generation, Reason: note})
	if err != nil {
		return fmt.Errorf("cancel run %s: %w", id, err)
	}
	n := res.Cancelled
	h.cfg.Logger.Info("console action", "action", "cancel", "user", u.Name, "run_id", id, "count", n, "note", note)
	return h.actionDone(w, r, u, id, actionData{Action: "cancel", Count: int64(n),
		Detail: fmt.Sprintf("Cancelled %d open item(s).", n)})
}
