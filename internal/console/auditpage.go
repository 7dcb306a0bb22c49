package console

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/report"
)

type auditData struct {
	RunID  string
	Date   string
	Recent []runRow
	// Report is set once a verification ran.
	Report  *audit.Report
	Elapsed time.Duration
}

// auditPage verifies the hash chains of a run (run=ID) or of a date's runs
// (date=YYYY-MM-DD) with audit.Verify, and shows each run's digest.
// Without either it shows the form and the latest runs.
func (h *Handler) auditPage(w http.ResponseWriter, r *http.Request, u User) error {
	q := r.URL.Query()
	d := auditData{RunID: q.Get("run"), Date: q.Get("date")}
	var f audit.Filter
	if d.RunID != "" {
		id, err := uuid.Parse(d.RunID)
		if err != nil {
			return badRequest("run=%q: not a run id", d.RunID)
		}
		f.RunID = &id
	}
	if d.Date != "" {
		t, err := time.Parse(time.DateOnly, d.Date)
		if _, valid := parseDay(d.Date); err != nil || !valid {
			return badRequest("date=%q: want YYYY-MM-DD", d.Date)
		}
		f.BusinessDate = &t
	}
	if f.RunID == nil && f.BusinessDate == nil {
		err := h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
			var err error
			d.Recent, err = loadRuns(r.Context(), rd, ledger.RunFilter{NewestFirst: true, Limit: 10})
			return err
		})
		if err != nil {
			return err
		}
		h.render(w, r, http.StatusOK, "audit", view{Title: "Audit", User: &u, Data: d})
		return nil
	}
	// A verification reads whole runs: it takes a slot of the exports and
	// one of their connections, not a page's.
	release, err := h.exports.acquire(u.Name)
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(exportRetry/time.Second)))
		return &httpError{code: http.StatusTooManyRequests, msg: "the console is busy with other exports or verifications; try again in a minute"}
	}
	defer release()
	h.exportDeadline(w)
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.ExportTimeout)
	defer cancel()
	start := time.Now()
	rep, err := audit.Verify(ctx, h.exportPool, f)
	if err != nil {
		return err
	}
	d.Report, d.Elapsed = &rep, time.Since(start)
	statsOf(r.Context()).queries += 3 // Verify: begin, runs, transitions
	h.render(w, r, http.StatusOK, "audit", view{Title: "Audit", User: &u, Data: d})
	return nil
}

// bundleFormat identifies the layout of an audit bundle's manifest.
const bundleFormat = "reconcile-audit-bundle/v1"

// bundleFile is one file of a bundle as its manifest lists it.
type bundleFile struct {
	Name   string `json:"name"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// bundleManifest is manifest.json of a bundle.
type bundleManifest struct {
	Format           string       `json:"format"`
	RunID            uuid.UUID    `json:"run_id"`
	ReconciliationID string       `json:"reconciliation_id"`
	CreatedAt        time.Time    `json:"created_at"`
	CreatedBy        string       `json:"created_by"`
	Verified         bool         `json:"verified"`
	Digest           string       `json:"digest"`
	Files            []bundleFile `json:"files"`
}

// auditBundle sends a zip of one run: the report (JSON and CSV, every item
// included), every transition as CSV, the verification result, a manifest
// with each file's SHA-256 and a SHA256SUMS file for sha256sum -c. The
// report and transitions are one snapshot; the verification is its own.
// The zip is staged as every export is (see stage): read at the database's
// pace, each file streamed from its rows, then sent at the client's.
func (h *Handler) auditBundle(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := uuid.Parse(r.URL.Query().Get("run"))
	if err != nil {
		return badRequest("run=%q: not a run id", r.URL.Query().Get("run"))
	}
	return h.stage(w, r, u, func(ctx context.Context, out io.Writer) (download, error) {
		ver, err := audit.Verify(ctx, h.exportPool, audit.Filter{RunID: &id})
		if err != nil {
			return download{}, err
		}
		if len(ver.Runs) == 0 {
			return download{}, notFound("no run %s", id)
		}
		run := ver.Runs[0]
		date, err := payments.ParseDate(run.BusinessDate)
		if err != nil {
			return download{}, fmt.Errorf("bundle run %s: %w", id, err)
		}
		m := bundleManifest{Format: bundleFormat, RunID: id, ReconciliationID: run.ReconciliationID,
			CreatedAt: h.cfg.Now().UTC(), CreatedBy: u.Actor(), Verified: ver.OK(), Digest: run.Digest}
		zw := zip.NewWriter(out)
		add := func(name string, write func(io.Writer) error) error {
			fw, err := zw.Create(name)
			if err != nil {
				return err
			}
			hw := &hashWriter{w: fw, h: sha256.New()}
			if err := write(hw); err != nil {
				return fmt.Errorf("write %s of the bundle of run %s: %w", name, id, err)
			}
			m.Files = append(m.Files, bundleFile{Name: name, Bytes: hw.n, SHA256: hex.EncodeToString(hw.h.Sum(nil))})
			return nil
		}
		err = h.readOn(ctx, h.exportPool, h.cfg.ExportTimeout, func(rd *reader) error {
			opts := report.Options{Date: date, Generation: run.Generation, All: true}
			for _, f := range []string{"json", "csv"} {
				if err := add("report."+f, func(w io.Writer) error { return report.Write(ctx, rd, opts, f, w) }); err != nil {
					return err
				}
			}
			return add("transitions.csv", func(w io.Writer) error { return writeTransitions(ctx, rd, id, w) })
		})
		if err == nil {
			err = add("verify.json", func(w io.Writer) error { return json.NewEncoder(w).Encode(ver) })
		}
		if err == nil {
			err = add("manifest.json", func(w io.Writer) error {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(m)
			})
		}
		if err == nil {
			err = add("SHA256SUMS", func(w io.Writer) error {
				for _, f := range m.Files {
					if _, err := fmt.Fprintf(w, "%s  %s\n", f.SHA256, f.Name); err != nil {
						return err
					}
				}
				return nil
			})
		}
		if err == nil {
			err = zw.Close()
		}
		if err != nil {
			return download{}, err
		}
		h.cfg.Logger.Info("audit bundle", "user", u.Name, "run_id", id, "verified", ver.OK(), "digest", run.Digest)
		return download{name: run.ReconciliationID + "-audit.zip", contentType: "application/zip"}, nil
	})
}

// transitionsHeader is the header row of a bundle's transitions.csv.
var transitionsHeader = []string{"transition_id", "transaction_id", "seq", "from_state", "to_state", "at", "attempt",
	"http_status", "reason", "retry_after_ms", "details", "actor", "prev_hash", "hash"}

func writeTransitions(ctx context.Context, rd *reader, runID uuid.UUID, w io.Writer) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(transitionsHeader)
	err := ledger.EachTransition(ctx, rd, runID, func(t ledger.Transition) error {
		retry, status := "", ""
		if t.RetryAfter > 0 {
			retry = strconv.FormatInt(t.RetryAfter.Milliseconds(), 10)
		}
		if t.HTTPStatus != 0 {
			status = strconv.Itoa(t.HTTPStatus)
		}
		// Text cells as the report writes them: no formula for a
		// spreadsheet (report.SafeCell); numbers and hashes as they are.
		return cw.Write([]string{strconv.FormatInt(t.ID, 10), report.SafeCell(t.TransactionID), strconv.Itoa(t.Seq),
			string(t.From), string(t.To), t.At.UTC().Format(time.RFC3339Nano), strconv.Itoa(t.Attempt), status,
			report.SafeCell(t.Reason), retry, report.SafeCell(t.Details), report.SafeCell(t.Actor),
			hex.EncodeToString(t.PrevHash), hex.EncodeToString(t.Hash)})
	})
	if err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// hashWriter hashes and counts what passes through it.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}
