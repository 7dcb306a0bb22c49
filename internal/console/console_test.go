package console

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/queue"
	"github.com/reconcile/reconcile/internal/report"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// evilID is a transaction id that would run script if it were not escaped.
const evilID = `tx_<script>alert(1)</script>`

const fixtureDay = "transaction_id,account_id,amount_minor,currency,status,occurred_at\n" +
	"tx_a,acc_1,1000,EUR,succeeded,2026-10-24T08:00:00Z\n" +
	"tx_b,acc_1,1500,EUR,succeeded,2026-10-24T09:00:00Z\n" +
	"tx_c,acc_2,250,USD,succeeded,2026-10-24T10:00:00Z\n" +
	"tx_d,acc_2,990,EUR,refunded,2026-10-24T11:00:00Z\n" +
	"\"" + evilID + "\",\"acc_<b>3</b>\",4200,GBP,succeeded,2026-10-24T12:00:00Z\n" +
	"tx_f,acc_3,75,EUR,failed,2026-10-24T13:00:00Z\n"

// testBundle is a console on a database holding one run of 2026-10-24: one
// item of each outcome (the evil id mismatched, tx_d dead-lettered, tx_u
// listed by the provider and unexpected) and tx_f still queued.
type testBundle struct {
	pool  *pgxpool.Pool
	h     *Handler
	runID uuid.UUID
	q     *queue.Queue
}

var t0 = time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)

func setup(t *testing.T, auth Auth) *testBundle {
	t.Helper()
	return setupDay(t, auth, fixtureDay)
}

// setupDay is setup with the payment file day, which must hold the six
// transactions of fixtureDay (it may add columns such as provider).
func setupDay(t *testing.T, auth Auth, day string) *testBundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.New(t)
	q := queue.New(pool, queue.Config{})
	enq, err := enqueue.New(pool, enqueue.Config{Queue: q, Actor: "ops@batch-1"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := payments.ParseDate("2026-10-24")
	res, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: "/data/payments-2026-10-24.csv",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(day)), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := q.Claim(ctx, 100)
	if err != nil || len(ds) != 6 {
		t.Fatalf("claimed %d messages (%v), want 6", len(ds), err)
	}
	var release []queue.Delivery
	for i, dl := range ds {
		c := ledger.Change{RunID: dl.RunID, TransactionID: dl.TransactionID, From: ledger.Queued, Called: true,
			Attempt: 1, Actor: "worker-1:42", At: t0.Add(time.Duration(i) * time.Second)}
		settle := func(tx pgx.Tx) error { return q.Ack(ctx, tx, dl) }
		switch dl.TransactionID {
		case "tx_a":
			c.To, c.HTTPStatus, c.Reason = ledger.Matched, 200, "matched"
		case "tx_b", evilID:
			c.To, c.HTTPStatus, c.Reason = ledger.Mismatched, 200, "mismatched"
			c.Provider = &ledger.Provider{AmountMinor: 1499, Currency: "EUR", Status: "succeeded"}
			c.Differences = []ledger.Difference{{Field: "amount_minor", Expected: "1500", Provider: "<i>1499</i>"}}
		case "tx_c":
			c.To, c.HTTPStatus, c.Reason = ledger.Missing, 404, "missing"
		case "tx_d":
			c.To, c.HTTPStatus, c.Reason = ledger.DeadLettered, 400, "http_400"
			c.Details = map[string]any{"detail": "HTTP 400: invalid id"}
			settle = func(tx pgx.Tx) error { return q.DeadLetter(ctx, tx, dl, "http_400", "HTTP 400") }
		default:
			release = append(release, dl)
			continue
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := ledger.Record(ctx, tx, c); err != nil {
				return err
			}
			return settle(tx)
		})
		if err != nil {
			t.Fatalf("settle %s: %v", dl.TransactionID, err)
		}
	}
	if err := q.Release(ctx, release); err != nil {
		t.Fatal(err)
	}
	// The provider's list of the day holds a payment the file lacks.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := ledger.StoreListed(ctx, tx, res.RunID, "", 1,
			[]ledger.Listed{{ID: "tx_u", AmountMinor: 3300, Currency: "EUR", Status: "succeeded", Kind: "payment"}}); err != nil {
			return err
		}
		_, err := ledger.RecordUnexpected(ctx, tx, res.RunID, "", "worker-1:42", t0.Add(time.Minute))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h := newHandler(t, Config{Pool: pool, Auth: auth, Queue: q})
	return &testBundle{pool: pool, h: h, runID: res.RunID, q: q}
}

// newHandler is New for a test: the console is closed when the test ends.
func newHandler(t *testing.T, cfg Config) *Handler {
	t.Helper()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// htpasswd returns users alice and bob with passwords "alice-pw" and
// "bob-pw"; alice is the operator.
func htpasswd(t *testing.T) Auth {
	t.Helper()
	var file strings.Builder
	for _, u := range []string{"alice", "bob"} {
		hash, err := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		file.WriteString(u + ":" + strings.Replace(string(hash), "$2a$", "$2y$", 1) + "\n")
	}
	users, err := ParseHtpasswd(strings.NewReader(file.String()), "htpasswd")
	if err != nil {
		t.Fatal(err)
	}
	return Auth{Users: users, Operators: []string{"alice"}}
}

// do serves one request; form, when not nil, is posted.
func (b *testBundle) do(t *testing.T, method, target, cookie string, form url.Values, header ...string) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequest(method, "http://console.test"+target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	return w
}

// login logs user in and returns the session cookie's value.
func (b *testBundle) login(t *testing.T, user string) string {
	t.Helper()
	w := b.do(t, "POST", "/login", "", url.Values{"user": {user}, "password": {user + "-pw"}, "next": {"/"}},
		"Origin", "http://console.test")
	if w.Code != http.StatusSeeOther {
		t.Fatalf("login %s: status %d: %s", user, w.Code, w.Body)
	}
	for _, c := range w.Result().Cookies() {
		if c.Name == sessionCookie {
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Errorf("session cookie %+v: want Secure, HttpOnly, SameSite=Lax", c)
			}
			return c.Value
		}
	}
	t.Fatalf("login %s: no session cookie", user)
	return ""
}

func (b *testBundle) state(t *testing.T, id string) string {
	t.Helper()
	var s string
	if err := b.pool.QueryRow(context.Background(), `SELECT state FROM items WHERE run_id = $1 AND transaction_id = $2`,
		b.runID, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func (b *testBundle) deadMessage(t *testing.T) string {
	t.Helper()
	var id int64
	if err := b.pool.QueryRow(context.Background(), `SELECT message_id FROM queue_messages WHERE state = 'dead' AND run_id = $1`,
		b.runID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return strconv.FormatInt(id, 10)
}

func wantStatus(t *testing.T, w *httptest.ResponseRecorder, code int, what string) {
	t.Helper()
	if w.Code != code {
		t.Fatalf("%s: status %d, want %d: %s", what, w.Code, code, w.Body)
	}
}

func TestAuditorReadsEverythingAndActsOnNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	for _, page := range []string{"/", run, run + "/discrepancies?outcome=all", run + "/dead-letters",
		run + "/tx/tx_b", "/limits", "/audit", "/audit?run=" + b.runID.String()} {
		w := b.do(t, "GET", page, bob, nil)
		wantStatus(t, w, http.StatusOK, page)
		if strings.Contains(w.Body.String(), "/redrive") || strings.Contains(w.Body.String(), "/rerun") {
			t.Errorf("%s shows an auditor an action:\n%s", page, w.Body)
		}
	}
	msg := b.deadMessage(t)
	same := []string{"Origin", "http://console.test", "Sec-Fetch-Site", "same-origin"}
	for _, target := range []string{run + "/redrive", run + "/rerun", run + "/cancel", "/limits/provider"} {
		w := b.do(t, "POST", target, bob, url.Values{"id": {msg}, "mode": {"failed"}, "note": {"try"}, "rate": {"99"}}, same...)
		wantStatus(t, w, http.StatusForbidden, "auditor POST "+target)
	}
	wantStatus(t, b.do(t, "GET", run+"/redrive?id="+msg, bob, nil), http.StatusForbidden, "auditor redrive preview")
	if s := b.state(t, "tx_d"); s != "dead_lettered" {
		t.Errorf("tx_d is %s after the auditor's POST, want dead_lettered", s)
	}
}

func TestOperatorRedrivesADeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	alice := b.login(t, "alice")
	run := "/runs/" + b.runID.String()
	msg := b.deadMessage(t)

	w := b.do(t, "GET", run+"/redrive?id="+msg, alice, nil)
	wantStatus(t, w, http.StatusOK, "preview")
	if !strings.Contains(w.Body.String(), "<strong>1</strong> item(s) will be redriven") {
		t.Errorf("preview does not count one item:\n%s", w.Body)
	}
	same := []string{"Origin", "http://console.test", "Sec-Fetch-Site", "same-origin"}
	w = b.do(t, "POST", run+"/redrive", alice, url.Values{"id": {msg}}, same...)
	wantStatus(t, w, http.StatusBadRequest, "redrive without a reason")
	w = b.do(t, "POST", run+"/redrive", alice, url.Values{"id": {msg}, "note": {"provider fixed the id"}}, same...)
	wantStatus(t, w, http.StatusOK, "redrive")
	if s := b.state(t, "tx_d"); s != "queued" {
		t.Fatalf("tx_d is %s after the redrive, want queued", s)
	}
	w = b.do(t, "GET", run+"/tx/tx_d", alice, nil)
	wantStatus(t, w, http.StatusOK, "transaction page")
	body := w.Body.String()
	for _, want := range []string{"Hash chain verified: 2 transitions", "alice@console (provider fixed the id)", "<td>redrive</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("transaction page lacks %q:\n%s", want, body)
		}
	}
}

// TestOperatorCancelsARun withdraws the run's last open item, tx_f, through
// the same path as `reconcile cancel`: recorded with the acting user and
// the reason, and the run's completion is written.
func TestOperatorCancelsARun(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	alice := b.login(t, "alice")
	run := "/runs/" + b.runID.String()

	w := b.do(t, "GET", run+"/cancel", alice, nil)
	wantStatus(t, w, http.StatusOK, "preview")
	if !strings.Contains(w.Body.String(), "<strong>1</strong>") {
		t.Errorf("preview does not count one open item:\n%s", w.Body)
	}
	same := []string{"Origin", "http://console.test", "Sec-Fetch-Site", "same-origin"}
	w = b.do(t, "POST", run+"/cancel", alice, url.Values{}, same...)
	wantStatus(t, w, http.StatusBadRequest, "cancel without a reason")
	w = b.do(t, "POST", run+"/cancel", alice, url.Values{"note": {"wrong export"}}, same...)
	wantStatus(t, w, http.StatusOK, "cancel")
	if s := b.state(t, "tx_f"); s != "cancelled" {
		t.Fatalf("tx_f is %s after the cancel, want cancelled", s)
	}
	var actor, detail string
	var completed bool
	if err := b.pool.QueryRow(context.Background(), `
		SELECT t.actor, t.details ->> 'detail', r.completed_at IS NOT NULL
		  FROM transitions t JOIN runs r USING (run_id)
		 WHERE t.run_id = $1 AND t.transaction_id = 'tx_f' AND t.to_state = 'cancelled'`, b.runID).Scan(&actor, &detail, &completed); err != nil {
		t.Fatal(err)
	}
	if actor != "alice@console" || detail != "wrong export" || !completed {
		t.Errorf("cancel recorded by %q with detail %q, run completed %v; want alice@console, the reason, completed", actor, detail, completed)
	}
	// Every page says the run was cancelled, by whom and why, not that it
	// is complete.
	runs := b.do(t, "GET", "/", alice, nil).Body.String()
	if !strings.Contains(runs, `<span class="state state-cancelled">cancelled</span> <span class="muted">by alice@console: wrong export</span>`) {
		t.Errorf("the runs page does not show the run cancelled by alice for her reason:\n%s", runs)
	}
	page := b.do(t, "GET", run, alice, nil).Body.String()
	if !strings.Contains(page, "Progress: <span class=\"state state-cancelled\">cancelled</span>") ||
		!regexp.MustCompile(`Cancelled by <strong>alice@console</strong> at [^:]+:\d\d:\d\dZ: wrong export\. 1 item\(s\) were withdrawn`).MatchString(page) {
		t.Errorf("the run page does not say who cancelled the run and why:\n%s", page)
	}
}

// TestOperatorSetsALimitForAWhile previews and sets a limit for an hour: the
// preview says so, the limiter keeps the settings to return to, and the
// history names the user and the reason.
func TestOperatorSetsALimitForAWhile(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	alice := b.login(t, "alice")
	w := b.do(t, "GET", "/limits/provider/set?rate=7&burst=2&for=1h", alice, nil)
	wantStatus(t, w, http.StatusOK, "preview")
	if !strings.Contains(w.Body.String(), "For 1h0m0s only") {
		t.Errorf("preview does not say the limit lasts an hour:\n%s", w.Body)
	}
	w = b.do(t, "GET", "/limits/provider/set?rate=7&for=-1h", alice, nil)
	wantStatus(t, w, http.StatusBadRequest, "preview with a negative for")
	same := []string{"Origin", "http://console.test", "Sec-Fetch-Site", "same-origin"}
	w = b.do(t, "POST", "/limits/provider", alice, url.Values{"rate": {"7"}, "burst": {"2"}, "for": {"1h"},
		"note": {"provider incident"}}, same...)
	wantStatus(t, w, http.StatusOK, "limit set")
	st, err := limiter.LoadState(context.Background(), b.pool, "provider")
	if err != nil {
		t.Fatal(err)
	}
	if st.Settings != (limiter.Settings{Rate: 7, Burst: 2}) || st.ExpiresAt.IsZero() {
		t.Fatalf("after the console's limit set: %+v", st)
	}
	var actor, reason string
	if err := b.pool.QueryRow(context.Background(), `SELECT actor, reason FROM rate_limiter_history
		WHERE limiter = 'provider' ORDER BY id DESC LIMIT 1`).Scan(&actor, &reason); err != nil {
		t.Fatal(err)
	}
	if actor != "alice@console" || reason != "provider incident" {
		t.Errorf("history names %q for %q", actor, reason)
	}
}

func TestCrossOriginPostIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	alice := b.login(t, "alice")
	run := "/runs/" + b.runID.String()
	form := url.Values{"id": {b.deadMessage(t)}, "note": {"csrf"}}
	for name, header := range map[string][]string{
		"Sec-Fetch-Site": {"Sec-Fetch-Site", "cross-site"},
		"Origin":         {"Origin", "http://evil.example"},
	} {
		w := b.do(t, "POST", run+"/redrive", alice, form, header...)
		wantStatus(t, w, http.StatusForbidden, "cross-origin POST by "+name)
	}
	w := b.do(t, "POST", "/login", "", url.Values{"user": {"alice"}, "password": {"alice-pw"}}, "Sec-Fetch-Site", "cross-site")
	wantStatus(t, w, http.StatusForbidden, "cross-origin login")
	if s := b.state(t, "tx_d"); s != "dead_lettered" {
		t.Errorf("tx_d is %s after cross-origin POSTs, want dead_lettered", s)
	}
}

func TestPagesEscapeLedgerValues(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	for _, page := range []string{run + "/discrepancies", run + "/tx/" + url.PathEscape(evilID), run} {
		w := b.do(t, "GET", page, bob, nil)
		wantStatus(t, w, http.StatusOK, page)
		body := w.Body.String()
		for _, raw := range []string{"<script>alert", "<b>3</b>", "<i>1499</i>"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s contains %q unescaped", page, raw)
			}
		}
		if strings.Count(body, "<script") != 1 || !strings.Contains(body, `<script src="/static/refresh.js" defer></script>`) {
			t.Errorf("%s has a script other than refresh.js", page)
		}
	}
	w := b.do(t, "GET", run+"/discrepancies", bob, nil)
	if !strings.Contains(w.Body.String(), "tx_&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Errorf("discrepancies page does not show the escaped id:\n%s", w.Body)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
}

func TestLoginIsRequired(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	w := b.do(t, "GET", "/runs/"+b.runID.String(), "", nil)
	wantStatus(t, w, http.StatusSeeOther, "anonymous GET")
	if loc := w.Header().Get("Location"); !strings.HasPrefix(loc, "/login?next=") {
		t.Errorf("redirect to %q, want the login page", loc)
	}
	wantStatus(t, b.do(t, "POST", "/runs/"+b.runID.String()+"/redrive", "", url.Values{"all": {"1"}, "note": {"x"}}),
		http.StatusUnauthorized, "anonymous POST")
	wantStatus(t, b.do(t, "POST", "/login", "", url.Values{"user": {"alice"}, "password": {"bob-pw"}}),
		http.StatusUnauthorized, "wrong password")
	wantStatus(t, b.do(t, "GET", "/", "forged.0.c2ln", nil), http.StatusSeeOther, "forged cookie")
	wantStatus(t, b.do(t, "GET", "/healthz", "", nil), http.StatusOK, "healthz")
	wantStatus(t, b.do(t, "GET", "/readyz", "", nil), http.StatusOK, "readyz")
}

func TestTrustedProxyHeader(t *testing.T) {
	t.Parallel()
	b := setup(t, Auth{Header: "X-Forwarded-User", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		Operators: []string{"alice"}})
	// httptest requests come from 192.0.2.1.
	w := b.do(t, "GET", "/", "", nil, "X-Forwarded-User", "carol")
	wantStatus(t, w, http.StatusOK, "proxied auditor")
	same := []string{"X-Forwarded-User", "carol", "Origin", "http://console.test"}
	wantStatus(t, b.do(t, "POST", "/runs/"+b.runID.String()+"/redrive", "", url.Values{"all": {"1"}, "note": {"x"}}, same...),
		http.StatusForbidden, "proxied auditor POST")
	wantStatus(t, b.do(t, "GET", "/", "", nil), http.StatusUnauthorized, "proxy without the header")

	r := httptest.NewRequest("GET", "http://console.test/", nil)
	r.RemoteAddr = "203.0.113.9:4000"
	r.Header.Set("X-Forwarded-User", "alice")
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, r)
	wantStatus(t, rec, http.StatusForbidden, "header from an untrusted address")
}

func TestExportIsTheReportFormat(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	d, _ := payments.ParseDate("2026-10-24")
	rep, err := report.Load(context.Background(), b.pool, report.Options{Date: d})
	if err != nil {
		t.Fatal(err)
	}
	dead := rep.DeadLetters
	rep.DeadLetters = []report.DeadLetter{}
	var want bytes.Buffer
	if err := rep.WriteCSV(&want); err != nil {
		t.Fatal(err)
	}
	w := b.do(t, "GET", "/runs/"+b.runID.String()+"/discrepancies?outcome=all&format=csv", bob, nil)
	wantStatus(t, w, http.StatusOK, "export")
	if w.Body.String() != want.String() {
		t.Errorf("CSV export:\n%s\nwant report's:\n%s", w.Body, want.String())
	}

	if len(rep.Unexpected) != 1 {
		t.Errorf("the report has %d unexpected records, want tx_u", len(rep.Unexpected))
	}
	rep.Discrepancies, rep.Missing, rep.DeadLetters, rep.Unexpected = []report.Discrepancy{}, []report.Item{}, dead, []report.Unexpected{}
	want.Reset()
	if err := rep.WriteJSON(&want); err != nil {
		t.Fatal(err)
	}
	w = b.do(t, "GET", "/runs/"+b.runID.String()+"/dead-letters?format=json", bob, nil)
	if w.Body.String() != want.String() {
		t.Errorf("JSON export of dead letters:\n%s\nwant report's:\n%s", w.Body, want.String())
	}
}

func TestParseHtpasswd(t *testing.T) {
	t.Parallel()
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	for _, tc := range []struct{ name, file, err string }{
		{"ok", "# users\n\nalice:" + string(hash) + "\n", ""},
		{"md5", "alice:$apr1$abc$def\n", `users:1: user "alice": not a bcrypt hash (create it with htpasswd -B)`},
		{"no colon", "alice\n", "users:1: want name:bcrypt-hash"},
		{"duplicate", "a:" + string(hash) + "\na:" + string(hash) + "\n", `users:2: user "a" appears twice`},
		{"empty", "# nobody\n", "users: no users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHtpasswd(strings.NewReader(tc.file), "users")
			if got := errString(err); got != tc.err {
				t.Errorf("error %q, want %q", got, tc.err)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestTransactionPageShowsABrokenLink(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	page := "/runs/" + b.runID.String() + "/tx/tx_b"
	if body := b.do(t, "GET", page, bob, nil).Body.String(); !strings.Contains(body, "Hash chain verified: 1 transitions") {
		t.Fatalf("untouched chain not verified:\n%s", body)
	}
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `ALTER TABLE transitions DISABLE TRIGGER USER`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE transitions SET reason = 'matched' WHERE run_id = $1 AND transaction_id = 'tx_b'`, b.runID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `ALTER TABLE transitions ENABLE TRIGGER USER`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	body := b.do(t, "GET", page, bob, nil).Body.String()
	if !strings.Contains(body, "Hash chain broken at seq 1 (hash)") || !strings.Contains(body, `<tr class="broken">`) {
		t.Errorf("tampered chain not shown as broken:\n%s", body)
	}
}

// TestDiscrepanciesListUnexpectedRecords shows the records the provider
// listed that the file lacks, with the provider's values, on their own and
// among all discrepancies, and counts them on the run page.
func TestDiscrepanciesListUnexpectedRecords(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	for _, page := range []string{run + "/discrepancies?outcome=unexpected", run + "/discrepancies?outcome=all"} {
		w := b.do(t, "GET", page, bob, nil)
		wantStatus(t, w, http.StatusOK, page)
		if body := w.Body.String(); !strings.Contains(body, `/tx/tx_u"`) || !strings.Contains(body, "not in the file") ||
			!strings.Contains(body, "33.00 EUR succeeded") {
			t.Errorf("%s does not show tx_u with the provider's 33.00 EUR succeeded:\n%s", page, body)
		}
	}
	w := b.do(t, "GET", run+"/discrepancies", bob, nil)
	if strings.Contains(w.Body.String(), `/tx/tx_u"`) {
		t.Errorf("the mismatched items list the unexpected tx_u:\n%s", w.Body)
	}
	w = b.do(t, "GET", run, bob, nil)
	if !strings.Contains(w.Body.String(), `discrepancies?outcome=unexpected">1</a>`) {
		t.Errorf("the run page does not count one unexpected record:\n%s", w.Body)
	}
	// The provider's 33.00 EUR is at stake: the file has no amount.
	stake := regexp.MustCompile(`(?s)<table class="at-stake">.*?</table>`).FindString(w.Body.String())
	if !strings.Contains(stake, "33.00 EUR (1)") {
		t.Errorf("amounts at stake do not show the unexpected record's 33.00 EUR:\n%s", stake)
	}
	providers := regexp.MustCompile(`(?s)<table class="providers">.*?</table>`).FindString(w.Body.String())
	if !strings.Contains(providers, `outcome=unexpected&amp;provider=%28default%29">1</a>`) {
		t.Errorf("the provider's row does not count the unexpected record:\n%s", providers)
	}
}
