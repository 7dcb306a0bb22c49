package e2e

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/providersim"
)

// webhookSecret is the Standard Webhooks specification's test secret.
const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// webhook is a receiver as a careful team writes one from the Standard
// Webhooks specification (not with reconcile's code): it verifies each
// signature, refuses a stale timestamp, and keeps one event per webhook-id.
type webhook struct {
	t   *testing.T
	key []byte

	mu       sync.Mutex
	hangNext bool          // the next request gets no answer
	arrived  chan struct{} // closed when a request hangs
	requests int
	bad      []string          // what failed verification, and why
	events   map[string][]byte // webhook-id → body, the first of each id
	order    []string          // ids in the order first received
}

func newWebhook(t *testing.T) (*webhook, *httptest.Server) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(webhookSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	w := &webhook{t: t, key: key, events: map[string][]byte{}, arrived: make(chan struct{})}
	srv := httptest.NewServer(w)
	t.Cleanup(srv.Close)
	return w, srv
}

func (w *webhook) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, ts, sig := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature")
	mac := hmac.New(sha256.New, w.key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	sent, err := strconv.ParseInt(ts, 10, 64)

	w.mu.Lock()
	w.requests++
	switch {
	case id == "":
		w.bad = append(w.bad, "no webhook-id")
	case err != nil || time.Since(time.Unix(sent, 0)).Abs() > 5*time.Minute:
		w.bad = append(w.bad, fmt.Sprintf("%s: timestamp %q off by more than 5 minutes", id, ts))
	case !slices.Contains(strings.Fields(sig), want):
		w.bad = append(w.bad, fmt.Sprintf("%s: signature %q does not verify", id, sig))
	case w.events[id] != nil && string(w.events[id]) != string(body):
		w.bad = append(w.bad, fmt.Sprintf("%s: a repeat with another body", id))
	case w.events[id] == nil:
		w.events[id] = body
		w.order = append(w.order, id)
	}
	hang := w.hangNext
	w.hangNext = false
	w.mu.Unlock()
	if hang {
		close(w.arrived)
		<-r.Context().Done() // no answer: the sender dies waiting
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// received returns the distinct events so far, in order, with the count of
// requests and the verification failures.
func (w *webhook) received() (events [][]byte, requests int, bad []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range w.order {
		events = append(events, w.events[id])
	}
	return events, w.requests, slices.Clone(w.bad)
}

// TestOneSignedEventPerCompletionThroughACrash: the consumer completes a
// run and is SIGKILLed while it POSTs the announcement; a new consumer
// delivers it again under the same id. A redrive that completes the run a
// second time is announced too. The receiver ends with exactly one
// verified event per completion round, whatever it was sent.
func TestOneSignedEventPerCompletionThroughACrash(t *testing.T) {
	t.Parallel()
	dy := newDay(t, "2026-10-24", 150, 21)
	prov := startProvider(t, providersim.Config{Records: dy.records(), Seed: 5,
		Shares: providersim.Shares{Mismatch: 0.05, Missing: 0.03, BadRequest: 0.04}}, nil)
	hook, srv := newWebhook(t)
	hook.hangNext = true
	w := newWorld(t, prov)
	w.extraEnv = append(w.extraEnv, "RECONCILE_NOTIFY_URL="+srv.URL+"/hooks/reconcile", "RECONCILE_NOTIFY_SECRET="+webhookSecret)
	w.mustRun(t, "enqueue", "--date", dy.date, "--source", dy.path)

	// The announcement's first attempt gets no answer within its 2 s
	// timeout: the consumer is killed while it waits.
	args := consumeArgs("--rate", "200", "--notify-timeout", "2s", "--console-url", "https://reconcile.example.com")
	first := w.start(t, "consumer", args...)
	select {
	case <-hook.arrived:
	case <-first.done:
		t.Fatalf("the consumer exited %d before it announced:\n%s", first.code, tail(first.stderr.String(), 20))
	case <-time.After(2 * time.Minute):
		t.Fatalf("no announcement within 2 minutes:\n%s", tail(first.stderr.String(), 20))
	}
	first.kill()
	var pending string
	if err := w.pool.QueryRow(context.Background(), `SELECT state FROM notification_deliveries`).Scan(&pending); err != nil || pending != "pending" {
		t.Fatalf("after the kill the delivery is %q (%v), want pending", pending, err)
	}

	second := w.start(t, "consumer (restarted)", args...)
	waitFor(t, time.Minute, func() (bool, string) {
		events, requests, _ := hook.received()
		var delivered int
		_ = w.pool.QueryRow(context.Background(), `SELECT count(*) FROM notification_deliveries WHERE state = 'delivered'`).Scan(&delivered)
		return delivered == 1, fmt.Sprintf("%d events in %d requests, %d delivered", len(events), requests, delivered)
	})

	// A redrive completes the run again: its second round is announced.
	w.mustRun(t, "dlq", "redrive", "--all")
	waitFor(t, time.Minute, func() (bool, string) {
		var delivered int
		_ = w.pool.QueryRow(context.Background(), `SELECT count(*) FROM notification_deliveries WHERE state = 'delivered'`).Scan(&delivered)
		return delivered == 2, fmt.Sprintf("%d deliveries delivered", delivered)
	})
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := second.wait(t, time.Minute); code != 0 {
		t.Fatalf("the consumer exited %d:\n%s", code, tail(second.stderr.String(), 20))
	}

	events, requests, bad := hook.received()
	if len(bad) > 0 {
		t.Errorf("the receiver refused: %v", bad)
	}
	var rounds int
	if err := w.pool.QueryRow(context.Background(), `SELECT c.round FROM run_completions c`).Scan(&rounds); err != nil {
		t.Fatal(err)
	}
	if len(events) != rounds || rounds != 2 {
		t.Fatalf("%d distinct events in %d requests for %d completion rounds, want one per round", len(events), requests, rounds)
	}
	if requests < 3 {
		t.Errorf("%d requests: the killed attempt was not sent again", requests)
	}
	for i, b := range events {
		var ev struct {
			Type string
			Data struct {
				Round            int
				ReconciliationID string `json:"reconciliation_id"`
				Items            int
				Outcomes         map[string]int
				DeadLetters      map[string]int `json:"dead_letters_by_reason"`
				ConsoleURL       string         `json:"console_url"`
			}
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		d := ev.Data
		terminal := 0
		for _, n := range d.Outcomes {
			terminal += n
		}
		if ev.Type != "run.completed" || d.Round != i+1 || d.ReconciliationID != "nightly-"+dy.date || d.Items != 150 ||
			terminal != 150 || d.Outcomes["dead_lettered"] == 0 || d.DeadLetters["http_400"] != d.Outcomes["dead_lettered"] ||
			!strings.HasPrefix(d.ConsoleURL, "https://reconcile.example.com/runs/") {
			t.Errorf("event %d: %s", i+1, b)
		}
	}
	var attempts int
	if err := w.pool.QueryRow(context.Background(), `
		SELECT d.attempts FROM notification_deliveries d JOIN notifications n USING (event_id) WHERE n.round = 1`).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != 2 {
		t.Errorf("the first round's delivery took %d attempts, want 2 (the killed one and the next)", attempts)
	}
	for _, p := range []*proc{first, second} {
		if strings.Contains(p.stderr.String(), "/hooks/reconcile") || strings.Contains(p.stderr.String(), "MfKQ9r8G") {
			t.Errorf("%s logged the webhook's path or the secret", p.name)
		}
	}
	t.Logf("FIGURES notify: %d distinct events in %d requests for %d completion rounds, one SIGKILL mid-POST", len(events), requests, rounds)
}
