package console

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/sample"
)

// spreadsheetFormulas are transaction ids that a spreadsheet would run.
var spreadsheetFormulas = []string{"=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "=HYPERLINK(\"http://evil.example\")"}

// zipFile reads one file of a zip.
func zipFile(t *testing.T, body []byte, name string) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("bundle is not a zip: %v", err)
	}
	f, err := zr.Open(name)
	if err != nil {
		t.Fatalf("bundle has no %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExportsRunNoFormula exports a run whose ids start like formulas, as
// the dead-letter CSV and as the audit bundle's report.csv and
// transitions.csv: no cell a spreadsheet would run.
func TestExportsRunNoFormula(t *testing.T) {
	t.Parallel()
	b := setupDeadLetters(t, spreadsheetFormulas)
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	w := b.do(t, "GET", run+"/dead-letters?format=csv", bob, nil)
	wantStatus(t, w, http.StatusOK, "dead-letter export")
	files := map[string][]byte{"dead-letters.csv": w.Body.Bytes()}
	w = b.do(t, "GET", "/audit/bundle?run="+b.runID.String(), bob, nil)
	wantStatus(t, w, http.StatusOK, "bundle")
	for _, name := range []string{"report.csv", "transitions.csv"} {
		files[name] = zipFile(t, w.Body.Bytes(), name)
	}
	for name, body := range files {
		rows, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		quoted := 0
		for _, row := range rows {
			for _, cell := range row {
				if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) && !isNumber(cell) {
					t.Errorf("%s holds a formula: %q", name, cell)
				}
				if strings.HasPrefix(cell, "'=") || strings.HasPrefix(cell, "'+") || strings.HasPrefix(cell, "'@") {
					quoted++
				}
			}
		}
		if quoted < len(spreadsheetFormulas)-1 {
			t.Errorf("%s quotes %d formula cells, want the ids':\n%s", name, quoted, body)
		}
	}
}

// isNumber reports whether a cell is a plain decimal number.
func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	return whole != "" && strings.Trim(whole, "0123456789") == "" && strings.Trim(frac, "0123456789") == ""
}

// recordRun enqueues a run of n items for date and records every one
// terminal (1% dead-lettered, 5% mismatched, 2% missing, the rest matched)
// in batches, as a consumer would.
func recordRun(t testing.TB, pool *pgxpool.Pool, q *queue.Queue, date string, n int) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	d, _ := payments.ParseDate(date)
	var file bytes.Buffer
	if err := sample.Write(&file, payments.FormatCSV, sample.Config{Date: d, Count: n, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q, Actor: "ops@batch-1"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: "/data/large.csv", Format: payments.FormatCSV,
		Open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(file.Bytes())), nil }})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT transaction_id FROM items WHERE run_id = $1 ORDER BY transaction_id`, res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < len(ids); lo += 2000 {
		var cs []ledger.Change
		for i := lo; i < min(lo+2000, len(ids)); i++ {
			c := ledger.Change{RunID: res.RunID, TransactionID: ids[i], From: ledger.Queued, To: ledger.Matched, Called: true,
				Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "worker-1:42", At: t0.Add(time.Duration(i) * time.Millisecond)}
			switch i % 100 {
			case 0:
				c.To, c.Reason, c.HTTPStatus = ledger.DeadLettered, "http_400", 400
				c.Details = map[string]any{"detail": "HTTP 400: invalid id"}
			case 1, 2, 3, 4, 5:
				c.To, c.Reason = ledger.Mismatched, "mismatched"
				c.Provider = &ledger.Provider{AmountMinor: 1, Currency: "EUR", Status: "succeeded"}
				c.Differences = []ledger.Difference{{Field: "amount_minor", Expected: "2", Provider: "1"}}
			case 6, 7:
				c.To, c.Reason, c.HTTPStatus = ledger.Missing, "missing", 404
			}
			cs = append(cs, c)
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ledger.RecordBatch(ctx, tx, cs); return err }); err != nil {
			t.Fatal(err)
		}
	}
	return res.RunID
}

// TestSlowReadersCannotStarveThePages has four auditors download an audit
// bundle of a 3,000-item run through clients that read nothing (a receive
// window of 4 KiB, and 4 KiB of send buffer at the server), on a console
// whose pool has four connections, as a small deployment's has. The runs
// page, the limits page and the readiness check still answer at once: an
// export holds no page connection and no transaction at its client's pace.
func TestSlowReadersCannotStarveThePages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, htpasswd(t))
	runID := recordRun(t, b.pool, b.q, "2026-10-20", 3000)
	cfg := b.pool.Config().Copy()
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	users := map[string]string{}
	names := []string{"ann", "bea", "cid", "dee"}
	for _, u := range names {
		hash, _ := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		users[u] = string(hash)
	}
	b.h = newHandler(t, Config{Pool: pool, Auth: Auth{Users: users}, Queue: b.q, StatementTimeout: time.Second,
		ExportTimeout: 20 * time.Second})
	ln := serveSmallBuffers(t, b.h)

	cookies := map[string]string{}
	for _, u := range names {
		cookies[u] = b.login(t, u)
	}
	cookie := cookies["ann"] // for the pages, logged in before the downloads start
	statuses := map[int]int{}
	for _, u := range names {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.(*net.TCPConn).SetReadBuffer(4096)
		fmt.Fprintf(conn, "GET /audit/bundle?run=%s HTTP/1.1\r\nHost: %s\r\nCookie: %s=%s\r\n\r\n", runID, ln.Addr(), sessionCookie, cookies[u])
		// Read the status line, then nothing more.
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
		if err != nil {
			t.Fatalf("%s's bundle: %v", u, err)
		}
		code, _ := strconv.Atoi(strings.Fields(line)[1])
		statuses[code]++
	}
	// Two at once (Config.MaxExports), the others told to come back.
	if statuses[http.StatusOK] != 2 || statuses[http.StatusTooManyRequests] != 2 {
		t.Errorf("four bundles at once: %v, want two answered and two refused (429)", statuses)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for range 3 {
		for _, page := range []string{"/", "/limits", "/readyz"} {
			req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+page, nil)
			req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("GET %s while four bundles are read slowly: %v", page, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != page || time.Since(start) > 2*time.Second {
				t.Errorf("GET %s while four bundles are read slowly: %d from %s after %s", page, resp.StatusCode, resp.Request.URL.Path, time.Since(start))
			}
		}
	}
}

// serveSmallBuffers serves h on a loopback listener of smallSendBuffers
// with the console's own server, until the test ends.
func serveSmallBuffers(t *testing.T, h *Handler) net.Listener {
	t.Helper()
	srv := h.NewServer(slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(smallSendBuffers{ln}) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln
}

// smallSendBuffers gives every accepted connection a 4 KiB send buffer, so
// that a client that reads nothing blocks the server's writes at once.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestExportsKeepMemoryBounded downloads the audit bundle of a run of 1,000
// items and of one of 12,000, and compares the console's peak heap during
// each: a bundle streamed from its rows costs about the same whatever the
// run's size (about 2 MB here; one held in memory grew by 1.6 MB per
// thousand items, to 925 MB for a run of 400,000). Not parallel: the heap
// is the process's.
func TestExportsKeepMemoryBounded(t *testing.T) {
	var peaks []float64
	for _, n := range []int{1000, 12000} {
		b := setup(t, htpasswd(t))
		runID := recordRun(t, b.pool, b.q, "2026-10-20", n)
		ln := serveSmallBuffers(t, b.h)
		cookie := b.login(t, "bob")
		peak := heapPeak(t, func() {
			req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/audit/bundle?run="+runID.String(), nil)
			req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("bundle of %d items: %d, %v", n, resp.StatusCode, err)
			}
		})
		peaks = append(peaks, peak)
	}
	t.Logf("peak heap growth: %.1f MB for 1,000 items, %.1f MB for 12,000", peaks[0]/1e6, peaks[1]/1e6)
	if grew := peaks[1] - peaks[0]; grew > 8e6 {
		t.Errorf("the bundle of 12,000 items took %.1f MB more heap than that of 1,000: memory grows with the run", grew/1e6)
	}
}

// heapPeak runs fn and returns how far the heap in use rose above its level
// before fn, sampled every 2 ms. The collector runs when the heap has grown
// by a tenth meanwhile, so that the peak is what is live, not garbage
// waiting for the next collection.
func heapPeak(t *testing.T, fn func()) float64 {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var m runtime.MemStats
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	fn()
	close(stop)
	<-done
	return float64(peak.Load()) - float64(base.HeapInuse)
}

func TestExportSlots(t *testing.T) {
	t.Parallel()
	s := &exportSlots{max: 2, users: map[string]bool{}}
	relAnn, err := s.acquire("ann")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("ann"); !errors.Is(err, errUserExporting) {
		t.Errorf("ann's second export: %v, want one per user", err)
	}
	relBea, err := s.acquire("bea")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.acquire("cid"); !errors.Is(err, errExportsBusy) {
		t.Errorf("a third export: %v, want at most two", err)
	}
	relAnn()
	relCid, err := s.acquire("cid")
	if err != nil {
		t.Errorf("cid after ann's ended: %v", err)
	}
	relBea()
	relCid()
	if len(s.users) != 0 {
		t.Errorf("slots left taken: %v", s.users)
	}
}

// TestStuckDownloadFreesItsSlot starts a bundle through a client that
// reads its status line and nothing more: the console gives up sending at
// the export's deadline, so the user's slot (one export per user) comes
// free again instead of staying taken for as long as the client likes.
func TestStuckDownloadFreesItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	// 1,000 items make a zip of about 50 KiB, far more than the 8 KiB of
	// socket buffers between the console and the client; the deadline
	// leaves room to stage them on a busy machine under the race detector.
	runID := recordRun(t, b.pool, b.q, "2026-10-20", 1000)
	const deadline = 6 * time.Second
	b.h = newHandler(t, Config{Pool: b.pool, Auth: htpasswd(t), Queue: b.q, ExportTimeout: deadline})
	ln := serveSmallBuffers(t, b.h)
	cookie := b.login(t, "bob")
	bundle := "/audit/bundle?run=" + runID.String()

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096)
	start := time.Now()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nCookie: %s=%s\r\n\r\n", bundle, ln.Addr(), sessionCookie, cookie)
	if line, err := bufio.NewReaderSize(conn, 64).ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("the stuck bundle: %q, %v", line, err)
	}
	get := func() int {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+bundle, nil)
		req.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := get(); code != http.StatusTooManyRequests {
		t.Fatalf("bob's second bundle while the first is stuck: %d, want 429", code)
	}
	for code := http.StatusTooManyRequests; code == http.StatusTooManyRequests; code = get() {
		if time.Since(start) > 10*deadline {
			t.Fatalf("bob's slot is still taken %s after the stuck bundle started (deadline %s)", time.Since(start), deadline)
		}
		time.Sleep(100 * time.Millisecond) // polling the slot: no event tells the client it came free
	}
	if took := time.Since(start); took < deadline {
		t.Errorf("the slot came free after %s, before the deadline %s: the stuck bundle was not sending", took, deadline)
	}
}
