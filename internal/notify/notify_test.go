package notify_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/notify"
	"github.com/reconcile/reconcile/internal/outbox"
	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testSecret is the Standard Webhooks test vector's secret.
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestSignMatchesTheStandardWebhooksVector signs the specification's own
// test vector (its reference libraries' TestWebhookSign).
func TestSignMatchesTheStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	key, err := notify.ParseSecret(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	got := notify.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("signature %s, want %s", got, want)
	}
}

func TestParseSecretNeverRepeatsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ secret, want string }{
		{"whsec_not*base64*at-all", "want whsec_ followed by the key in base64"},
		{"whsec_" + base64.StdEncoding.EncodeToString([]byte("short")), "the key is 5 bytes; want 24 to 64"},
		{base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 65)), "the key is 65 bytes; want 24 to 64"},
	} {
		_, err := notify.ParseSecret(tc.secret)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSecret(%q) = %v, want %q", tc.secret, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), strings.TrimPrefix(tc.secret, "whsec_")) {
			t.Errorf("the error repeats the secret: %v", err)
		}
	}
	// Without the prefix, as some receivers show it.
	if _, err := notify.ParseSecret(strings.TrimPrefix(testSecret, "whsec_")); err != nil {
		t.Errorf("a secret without its prefix: %v", err)
	}
}

func TestWebhookURLsAreRedacted(t *testing.T) {
	t.Parallel()
	for url, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXXSECRET": "https://hooks.slack.com/…",
		"https://hooks.example.com/":                            "https://hooks.example.com",
		"http://127.0.0.1:8080?token=abc":                       "http://127.0.0.1:8080/…",
		"not a url":                                             "(a URL not shown)",
	} {
		if got := notify.Redact(url); got != want {
			t.Errorf("Redact(%q) = %q, want %q", url, got, want)
		}
	}
	for _, tc := range []struct{ url, format, want string }{
		{"ftp://hooks.example.com/SECRET", "standard", "webhook ftp://hooks.example.com/…: want an absolute http or https URL"},
		{"/relative/SECRET", "standard", "webhook (a URL not shown): want an absolute http or https URL"},
		{"https://user:SECRET@hooks.example.com/x", "standard", "credentials in the URL are not sent"},
		{"https://user:pa55@hooks.example.com/x", "standard", "https://hooks.example.com/…: credentials"},
		{"https://hooks.example.com/x", "teams", `format "teams": want standard or slack`},
	} {
		_, err := notify.ParseWebhook(tc.url, tc.format)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRET@") ||
			strings.Contains(err.Error(), "pa55") || strings.Contains(err.Error(), "/SECRET") {
			t.Errorf("ParseWebhook(%q, %q) = %v, want %q without the secret", tc.url, tc.format, err, tc.want)
		}
	}
}

// event is a completion announcement with something to look at.
func event() outbox.Event {
	completed := time.Date(2026, 10, 25, 3, 12, 0, 0, time.UTC)
	return outbox.Event{ID: uuid.MustParse("0b5c6a0e-1d2c-4f5e-8a9b-0c1d2e3f4a5b"), Type: outbox.Completed,
		CreatedAt: completed, Run: outbox.Run{
			RunID: uuid.MustParse("8cf1d2e3-0000-4000-8000-000000000001"), ReconciliationID: "nightly-2026-10-24",
			BusinessDate: "2026-10-24", Generation: 1, Round: 2, Trigger: "cron", Items: 18000,
			Outcomes:    map[string]int{"matched": 17950, "mismatched": 30, "missing": 15, "dead_lettered": 5, "cancelled": 0},
			AtStake:     []outbox.Amount{{Currency: "EUR", MismatchedMinor: 12345, MissingMinor: 100}, {Currency: "JPY", DeadLetteredMinor: 5000}},
			DeadLetters: map[string]int{"max_attempts": 3, "http_400": 2}, ProviderCalls: 18420, Throttles: 12,
			EnqueuedAt: completed.Add(-72 * time.Minute), CompletedAt: &completed, DurationSeconds: 72 * 60,
		}}
}

func TestStandardBody(t *testing.T) {
	t.Parallel()
	body, err := notify.Body(event(), notify.Standard, "https://console.example.com/")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Type      string
		Timestamp time.Time
		Data      map[string]any
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "run.completed" || !got.Timestamp.Equal(event().CreatedAt) ||
		got.Data["console_url"] != "https://console.example.com/runs/8cf1d2e3-0000-4000-8000-000000000001" ||
		got.Data["reconciliation_id"] != "nightly-2026-10-24" || got.Data["round"] != 2.0 ||
		got.Data["outcomes"].(map[string]any)["dead_lettered"] != 5.0 ||
		got.Data["dead_letters_by_reason"].(map[string]any)["max_attempts"] != 3.0 {
		t.Errorf("body = %s", body)
	}
	again, _ := notify.Body(event(), notify.Standard, "https://console.example.com/")
	if !bytes.Equal(body, again) {
		t.Errorf("the same event gave two bodies:\n%s\n%s", body, again)
	}
}

func TestSlackBody(t *testing.T) {
	t.Parallel()
	body, err := notify.Body(event(), notify.Slack, "https://console.example.com")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Text   string
		Blocks []struct {
			Type string
			Text struct{ Type, Text string }
		}
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if want := "nightly-2026-10-24 complete (round 2): 18000 items, 50 to look at, in 1h12m0s"; got.Text != want {
		t.Errorf("text %q, want %q", got.Text, want)
	}
	var all []string
	for _, b := range got.Blocks {
		all = append(all, b.Text.Text)
	}
	for _, want := range []string{
		"17950 matched, 30 mismatched, 15 missing, 5 dead-lettered; 18420 provider calls, 12 throttled",
		"At stake: EUR 124.45, JPY 5000",
		"Dead letters: 3 max_attempts, 2 http_400",
		"<https://console.example.com/runs/8cf1d2e3-0000-4000-8000-000000000001|Open the run in the console>",
	} {
		if !strings.Contains(strings.Join(all, "\n"), want) {
			t.Errorf("blocks lack %q:\n%s", want, strings.Join(all, "\n"))
		}
	}
}

// receiver is a webhook that verifies signatures as a receiver following
// Standard Webhooks would (written from the specification, not with the
// package under test) and records what it got.
type receiver struct {
	t      *testing.T
	key    []byte
	mu     sync.Mutex
	status []int // answers, in turn; the last one repeats
	got    []received
	hang   bool // when true, requests get no answer
}

type received struct {
	id, timestamp string
	body          []byte
	verified      bool
}

func newReceiver(t *testing.T, status ...int) (*receiver, *httptest.Server) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(testSecret, "whsec_"))
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{t: t, key: key, status: status}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body) // the server notices a closed connection only once the body is read
	r.mu.Lock()
	hang := r.hang
	r.mu.Unlock()
	if hang {
		<-req.Context().Done() // until the sender gives up
		return
	}
	id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
	mac := hmac.New(sha256.New, r.key)
	mac.Write([]byte(id + "." + ts + "." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, received{id: id, timestamp: ts, body: body, verified: hmac.Equal([]byte(want), []byte(req.Header.Get("webhook-signature")))})
	status := r.status[min(len(r.got), len(r.status))-1]
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "120")
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte("answer " + strconv.Itoa(status)))
}

func (r *receiver) setHang(hang bool) {
	r.mu.Lock()
	r.hang = hang
	r.mu.Unlock()
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// clock is a settable clock for the Notifier and the outbox.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// completeRun creates a run of one item, enqueued at enqueued, and records
// its match at completed: the ledger announces the completion.
func completeRun(t *testing.T, pool *pgxpool.Pool, enqueued, completed time.Time) uuid.UUID {
	t.Helper()
	runID := openRun(t, pool, enqueued)
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		res, err := ledger.Record(context.Background(), tx, ledger.Change{RunID: runID, TransactionID: "tx1", From: ledger.Queued,
			To: ledger.Matched, Called: true, Attempt: 1, HTTPStatus: 200, Reason: "matched", Actor: "test", At: completed})
		if err == nil && len(res.RunsCompleted) != 1 {
			t.Errorf("the run did not complete: %+v", res)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return runID
}

// openRun creates a run of one open item, enqueued at enqueued.
func openRun(t *testing.T, pool *pgxpool.Pool, enqueued time.Time) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	runID := uuid.New()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO runs (run_id, reconciliation_id, business_date, generation, trigger, triggered_by, source, source_sha256,
			                  time_zone, item_count, created_at)
			VALUES ($1::uuid, 'nightly-' || $1::uuid::text, '2026-10-24'::date - (random() * 3000)::int, 1, 'cron', 'test', 'test', '',
			        'UTC', 1, $2)`, runID, enqueued); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO items (run_id, transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, shard)
			VALUES ($1, 'tx1', 'acc', $2, 100, 'EUR', 'succeeded', $3, $4)`, runID, "k:"+runID.String(), enqueued, ledger.ShardOf("tx1")); err != nil {
			return err
		}
		return ledger.InitCounters(ctx, tx, runID)
	})
	if err != nil {
		t.Fatal(err)
	}
	return runID
}

type bundle struct {
	pool  *pgxpool.Pool
	clock *clock
	logs  *bytes.Buffer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	pool := pgtest.New(t)
	var now time.Time
	if err := pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return &bundle{pool: pool, clock: &clock{t: now}, logs: &bytes.Buffer{}}
}

func (b *bundle) notifier(t *testing.T, cfg notify.Config) *notify.Notifier {
	t.Helper()
	cfg.Pool, cfg.Now, cfg.Rand = b.pool, b.clock.Now, func() float64 { return 0.5 }
	cfg.Logger = slog.New(slog.NewTextHandler(b.logs, nil))
	if cfg.Secret == "" {
		key, err := notify.ParseSecret(testSecret)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Secret = key
	}
	n, err := notify.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func webhook(t *testing.T, url, format string) notify.Webhook {
	t.Helper()
	w, err := notify.ParseWebhook(url, format)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// deliveries reads the delivery rows of a run's announcements.
func deliveries(t *testing.T, pool *pgxpool.Pool, runID uuid.UUID) []outbox.DeliveryState {
	t.Helper()
	as, err := outbox.ForRuns(context.Background(), pool, []uuid.UUID{runID})
	if err != nil {
		t.Fatal(err)
	}
	var out []outbox.DeliveryState
	for _, a := range as {
		out = append(out, a.Deliveries...)
	}
	return out
}

func round(t *testing.T, n *notify.Notifier) {
	t.Helper()
	if err := n.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestACompletionIsDeliveredOnceSigned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv, srv := newReceiver(t, http.StatusNoContent)
	slackRcv, slackSrv := newReceiver(t, http.StatusOK)
	runID := completeRun(t, b.pool, b.clock.Now().Add(-time.Hour), b.clock.Now())
	n := b.notifier(t, notify.Config{Webhooks: []notify.Webhook{webhook(t, srv.URL+"/hooks/SECRET", notify.Standard),
		webhook(t, slackSrv.URL, notify.Slack)}, ConsoleURL: "https://console.example.com"})

	round(t, n)
	round(t, n) // nothing left to do
	got := rcv.received()
	if len(got) != 1 || !got[0].verified || got[0].timestamp != strconv.FormatInt(b.clock.Now().Unix(), 10) {
		t.Fatalf("standard webhook received %+v, want one verified event", got)
	}
	var body struct {
		Type string
		Data outbox.Run
	}
	if err := json.Unmarshal(got[0].body, &body); err != nil || body.Type != outbox.Completed || body.Data.RunID != runID ||
		body.Data.Outcomes["matched"] != 1 || body.Data.Round != 1 {
		t.Fatalf("body %s (%v)", got[0].body, err)
	}
	if s := slackRcv.received(); len(s) != 1 || s[0].id != got[0].id || !strings.Contains(string(s[0].body), `"blocks"`) {
		t.Fatalf("slack webhook received %+v, want the same event as a Slack message", s)
	}
	ds := deliveries(t, b.pool, runID)
	if len(ds) != 2 {
		t.Fatalf("deliveries %+v, want two", ds)
	}
	for _, d := range ds {
		if d.State != outbox.Delivered || d.Attempts != 1 || d.FinishedAt.IsZero() || strings.Contains(d.Target, "SECRET") {
			t.Errorf("delivery %+v, want delivered in one attempt, its target without the path", d)
		}
	}
}

func TestAFailingWebhookIsRetriedUnderOneIDThenGivenUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv, srv := newReceiver(t, http.StatusServiceUnavailable)
	runID := completeRun(t, b.pool, b.clock.Now().Add(-time.Hour), b.clock.Now())
	n := b.notifier(t, notify.Config{Webhooks: []notify.Webhook{webhook(t, srv.URL+"/SECRET", notify.Standard)},
		MaxAttempts: 3, BackoffBase: 10 * time.Second, BackoffCap: time.Hour})

	round(t, n)
	d := deliveries(t, b.pool, runID)[0]
	// Retry-After 120 s is longer than the backoff (7.5 s with this jitter).
	if d.State != outbox.Pending || d.Attempts != 1 || d.LastStatus != 503 || d.LastError != "http 503: answer 503" ||
		!d.NextAttemptAt.Equal(b.clock.Now().Add(120*time.Second)) {
		t.Fatalf("after a 503: %+v, due at %v", d, b.clock.Now().Add(120*time.Second))
	}
	b.clock.Advance(119 * time.Second)
	round(t, n)
	if len(rcv.received()) != 1 {
		t.Fatalf("retried before its time: %d attempts", len(rcv.received()))
	}
	for range 2 {
		b.clock.Advance(121 * time.Second)
		round(t, n)
	}
	got := rcv.received()
	if len(got) != 3 || got[0].id != got[1].id || got[1].id != got[2].id {
		t.Fatalf("attempts %+v, want three under one id", got)
	}
	d = deliveries(t, b.pool, runID)[0]
	if d.State != outbox.Failed || d.Attempts != 3 || d.FinishedAt.IsZero() {
		t.Fatalf("after the last attempt: %+v, want failed", d)
	}
	b.clock.Advance(time.Hour)
	round(t, n)
	if len(rcv.received()) != 3 {
		t.Fatal("a failed delivery was attempted again")
	}
	if strings.Contains(b.logs.String(), "SECRET") || !strings.Contains(b.logs.String(), "announcement given up") {
		t.Errorf("logs name the webhook's path or miss the failure:\n%s", b.logs)
	}
}

func TestGoneWebhookIsGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, srv := newReceiver(t, http.StatusGone)
	runID := completeRun(t, b.pool, b.clock.Now().Add(-time.Hour), b.clock.Now())
	round(t, b.notifier(t, notify.Config{Webhooks: []notify.Webhook{webhook(t, srv.URL, notify.Standard)}}))
	if d := deliveries(t, b.pool, runID)[0]; d.State != outbox.Failed || d.Attempts != 1 || d.LastStatus != 410 {
		t.Fatalf("after 410 Gone: %+v, want failed at once", d)
	}
}

func TestAnUnreachableWebhookTimesOutAndIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv, srv := newReceiver(t, http.StatusOK)
	rcv.setHang(true)
	runID := completeRun(t, b.pool, b.clock.Now().Add(-time.Hour), b.clock.Now())
	n := b.notifier(t, notify.Config{Webhooks: []notify.Webhook{webhook(t, srv.URL, notify.Standard)}, Timeout: 200 * time.Millisecond})
	start := time.Now()
	round(t, n)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a round took %s with a 200ms timeout", took)
	}
	rcv.setHang(false)
	d := deliveries(t, b.pool, runID)[0]
	if d.State != outbox.Pending || d.LastStatus != 0 || d.LastError != "no answer within 200ms" {
		t.Fatalf("after a timeout: %+v", d)
	}
	// The next attempt succeeds under the same id.
	b.clock.Advance(time.Minute)
	round(t, n)
	if got := rcv.received(); len(got) != 1 || deliveries(t, b.pool, runID)[0].State != outbox.Delivered {
		t.Fatalf("after the retry: %d received, %+v", len(got), deliveries(t, b.pool, runID)[0])
	}
}

// TestACrashedAttemptIsClaimedAgainAfterItsLease claims a delivery and
// leaves it, as a process killed mid-POST does.
func TestACrashedAttemptIsClaimedAgainAfterItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv, srv := newReceiver(t, http.StatusOK)
	runID := completeRun(t, b.pool, b.clock.Now().Add(-time.Hour), b.clock.Now())
	w := webhook(t, srv.URL, notify.Standard)
	dead := outbox.NewDeliveries(b.pool, b.clock.Now)
	dest := w.Destination()
	if _, err := dead.TakeUp(context.Background(), []outbox.Destination{dest}, time.Hour); err != nil {
		t.Fatal(err)
	}
	claimed, err := dead.Claim(context.Background(), []string{dest.ID}, 1, notify.DefaultTimeout+5*time.Second)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	n := b.notifier(t, notify.Config{Webhooks: []notify.Webhook{w}})
	b.clock.Advance(14 * time.Second)
	round(t, n)
	if len(rcv.received()) != 0 {
		t.Fatal("a delivery was taken over while its lease ran")
	}
	b.clock.Advance(2 * time.Second)
	round(t, n)
	got := rcv.received()
	if len(got) != 1 || got[0].id != claimed[0].Event.ID.String() {
		t.Fatalf("received %+v, want the claimed event %s", got, claimed[0].Event.ID)
	}
	if d := deliveries(t, b.pool, runID)[0]; d.State != outbox.Delivered || d.Attempts != 2 {
		t.Fatalf("delivery %+v, want delivered at the second attempt", d)
	}
	if err := dead.Delivered(context.Background(), claimed[0], 200); err == nil {
		t.Fatal("the crashed attempt settled under its stale lease")
	}
}

func TestAMissedDeadlineIsAnnouncedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rcv, srv := newReceiver(t, http.StatusOK)
	runID := openRun(t, b.pool, b.clock.Now().Add(-7*time.Hour))
	n := b.notifier(t, notify.Config{Webhooks: []notify.Webhook{webhook(t, srv.URL, notify.Standard)}, Deadline: 6 * time.Hour})
	round(t, n)
	round(t, n)
	got := rcv.received()
	if len(got) != 1 {
		t.Fatalf("received %d announcements, want one", len(got))
	}
	var body struct {
		Type string
		Data outbox.Run
	}
	if err := json.Unmarshal(got[0].body, &body); err != nil || body.Type != outbox.DeadlineMissed || body.Data.RunID != runID ||
		body.Data.Open != 1 {
		t.Fatalf("body %s (%v)", got[0].body, err)
	}
	if !strings.Contains(b.logs.String(), "a run is still open at its deadline") {
		t.Errorf("no warning logged:\n%s", b.logs)
	}

	// Deadlines are kept every 10 s, not every round.
	openRun(t, b.pool, b.clock.Now().Add(-8*time.Hour))
	b.clock.Advance(9 * time.Second)
	round(t, n)
	if got := len(rcv.received()); got != 1 {
		t.Fatalf("%d announcements 9 s later, want still 1", got)
	}
	b.clock.Advance(time.Second)
	round(t, n)
	if got := len(rcv.received()); got != 2 {
		t.Fatalf("%d announcements 10 s later, want the second run's too", got)
	}
}
