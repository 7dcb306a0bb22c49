package console

import (
	"context"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/limiter"
)

// providersDay is fixtureDay with a provider column: tx_b (mismatched),
// tx_c (missing) and tx_d (dead-lettered) are stripe's.
var providersDay = func() string {
	lines := strings.Split(strings.TrimSuffix(fixtureDay, "\n"), "\n")
	for i, l := range lines {
		switch {
		case i == 0:
			lines[i] += ",provider"
		case strings.HasPrefix(l, "tx_b,"), strings.HasPrefix(l, "tx_c,"), strings.HasPrefix(l, "tx_d,"):
			lines[i] += ",stripe"
		default:
			lines[i] += ","
		}
	}
	return strings.Join(lines, "\n") + "\n"
}()

func TestRunPageChartsTheLimiterHistory(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	ctx := context.Background()
	// The run's transitions span t0 to t0+4s. Before it: a limit set at
	// 50/s and a throttle to 45/s; during it: a throttle, an operator's
	// limit set at 40/s and a probe.
	if _, err := b.pool.Exec(ctx, `
		INSERT INTO rate_limiter_history (limiter, recorded_at, cause, rate, estimate, detail, actor, reason) VALUES
		  ('provider', $1::timestamptz - interval '1 hour', 'limit set', 50, NULL, 'rate 50/s, burst 10 set', 'ops@host', 'the contract'),
		  ('provider', $1::timestamptz - interval '30 minutes', 'throttle', 45, NULL, 'a 429 at start-up', NULL, NULL),
		  ('provider', $1::timestamptz + interval '1 second', 'throttle', 25, 30, 'a 429 at 30/s', NULL, NULL),
		  ('provider', $1::timestamptz + interval '2 seconds', 'limit set', 40, NULL, 'rate 40/s, burst 10 set', 'alice@console', 'provider asked'),
		  ('provider', $1::timestamptz + interval '3 seconds', 'probe', 28, 30, 'probe grew', NULL, NULL),
		  ('other', $1::timestamptz + interval '2 seconds', 'throttle', 1, NULL, 'not this limiter', NULL, NULL)`, t0); err != nil {
		t.Fatal(err)
	}
	if err := limiter.SaveSettings(ctx, b.pool, "provider", limiter.Settings{Rate: 40, Burst: 10},
		limiter.SetBy{Actor: "alice@console", Reason: "provider asked"}); err != nil {
		t.Fatal(err)
	}
	bob := b.login(t, "bob")
	// The run is open (tx_f is queued): its chart runs to now, 5 s after
	// its first transition, and leaves out the limit set of the real now.
	b.h.cfg.Now = func() time.Time { return t0.Add(5 * time.Second) }
	w := b.do(t, "GET", "/runs/"+b.runID.String(), bob, nil)
	wantStatus(t, w, http.StatusOK, "run page")
	body := w.Body.String()
	for _, want := range []string{
		"in force at the start (" + fmtTime(t0.Add(-30*time.Minute)) + ": throttle, effective 45/s — a 429 at start-up)",
		fmtTime(t0.Add(time.Second)) + ": throttle, effective 25/s, estimate 30/s — a 429 at 30/s",
		fmtTime(t0.Add(2*time.Second)) + ": limit set, effective 40/s — rate 40/s, burst 10 set",
		fmtTime(t0.Add(3*time.Second)) + ": probe, effective 28/s, estimate 30/s — probe grew",
	} {
		if !strings.Contains(body, "<title>"+want+"</title>") {
			t.Errorf("the chart has no hover title %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "not this limiter") {
		t.Errorf("the chart shows another limiter's change")
	}
	// The configured line: 50/s from the limit set before the run, 40/s
	// from the one during it. The effective line: 45, 25, 40, 28; the
	// estimate: 30 where known.
	levels := func(class string) []string {
		m := regexp.MustCompile(`<path class="` + class + `" d="([^"]*)"`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no %s path in the chart:\n%s", class, body)
		}
		var ys []string
		for _, c := range regexp.MustCompile(`(?:M[\d.]+,|V)([\d.]+)`).FindAllStringSubmatch(m[1], -1) {
			if len(ys) == 0 || ys[len(ys)-1] != c[1] {
				ys = append(ys, c[1])
			}
		}
		return ys
	}
	if ys := levels("configured"); len(ys) != 2 {
		t.Errorf("configured line at levels %v, want 50/s then 40/s", ys)
	}
	if ys := levels("effective"); len(ys) != 4 {
		t.Errorf("effective line at levels %v, want 45, 25, 40, 28", ys)
	}
	if ys := levels("estimate"); len(ys) != 1 {
		t.Errorf("estimate line at levels %v, want 30/s only", ys)
	}
	if d := regexp.MustCompile(`<path class="estimate" d="([^"]*)"`).FindStringSubmatch(body); d == nil || strings.Count(d[1], "M") != 2 {
		t.Errorf("estimate line %q, want two segments (it is unknown at the limit set)", d)
	}
	if q, _ := strconv.Atoi(w.Header().Get("X-Console-Queries")); q == 0 || q > 15 {
		t.Errorf("the run page made %s queries, want a few", w.Header().Get("X-Console-Queries"))
	}

	w = b.do(t, "GET", "/limits", bob, nil)
	wantStatus(t, w, http.StatusOK, "limits page")
	for _, want := range []string{"alice@console", "provider asked", "ops@host", "the contract", "a 429 at 30/s", "not this limiter"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the limits page does not show %q:\n%s", want, w.Body)
		}
	}
	w = b.do(t, "GET", "/limits?limiter=other", bob, nil)
	wantStatus(t, w, http.StatusOK, "limits page of one limiter")
	if strings.Contains(w.Body.String(), "the contract") || !strings.Contains(w.Body.String(), "not this limiter") {
		t.Errorf("the history of limiter other shows another's rows or not its own:\n%s", w.Body)
	}
}

func TestLimitsHistoryPages(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	b.h.cfg.PageSize = 2
	if _, err := b.pool.Exec(context.Background(), `
		INSERT INTO rate_limiter_history (limiter, recorded_at, cause, rate, detail)
		SELECT 'provider', $1::timestamptz + n * interval '1 second', 'probe', n, 'change ' || n
		  FROM generate_series(1, 5) n`, t0); err != nil {
		t.Fatal(err)
	}
	bob := b.login(t, "bob")
	var seen []string
	next := regexp.MustCompile(`href="(/limits\?[^"]*before=[^"]*)"`)
	target := "/limits"
	for range 5 {
		w := b.do(t, "GET", target, bob, nil)
		wantStatus(t, w, http.StatusOK, target)
		seen = append(seen, regexp.MustCompile(`change \d`).FindAllString(w.Body.String(), -1)...)
		m := next.FindStringSubmatch(w.Body.String())
		if m == nil {
			break
		}
		target, _, _ = strings.Cut(strings.ReplaceAll(m[1], "&amp;", "&"), "#")
	}
	if got := strings.Join(seen, ","); got != "change 5,change 4,change 3,change 2,change 1" {
		t.Errorf("history pages show %s, want the five changes newest first", got)
	}
}

func TestRunPageBreaksDownByProvider(t *testing.T) {
	t.Parallel()
	b := setupDay(t, htpasswd(t), providersDay)
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	w := b.do(t, "GET", run, bob, nil)
	wantStatus(t, w, http.StatusOK, "run page")
	body := w.Body.String()
	table := regexp.MustCompile(`(?s)<table class="providers">.*?</table>`).FindString(body)
	rows := regexp.MustCompile(`(?s)<tr><td>([^<]*)</td>(.*?)</tr>`).FindAllStringSubmatch(table, -1)
	cells := func(s string) string {
		return strings.Join(regexp.MustCompile(`>(\d+)<`).FindAllString(s, -1), "")
	}
	got := map[string]string{}
	for _, r := range rows {
		got[r[1]] = cells(r[2])
	}
	// Items, matched or open, mismatched, missing, dead-lettered,
	// cancelled, unexpected: the default provider listed tx_u, which the
	// file lacks.
	want := map[string]string{
		"(default)": ">4<>2<>1<>0<>0<>0<>1<",
		"stripe":    ">3<>0<>1<>1<>1<>0<>0<",
	}
	for p, cs := range want {
		if got[p] != cs {
			t.Errorf("provider %s: cells %s, want %s\n%s", p, got[p], cs, table)
		}
	}
	stake := regexp.MustCompile(`(?s)<table class="at-stake">.*?</table>`).FindString(body)
	// In major units: the ledger's 1500 EUR cents are 15.00 EUR; the
	// provider's 33.00 EUR of tx_u is at stake too.
	for _, want := range []string{"<td>EUR</td>", "15.00 EUR (1)", "9.90 EUR (1)", "33.00 EUR (1)", "57.90 EUR", "<td>GBP</td>", "42.00 GBP", "<td>USD</td>", "2.50 USD (1)"} {
		if !strings.Contains(stake, want) {
			t.Errorf("amounts at stake do not show %q:\n%s", want, stake)
		}
	}
	if !strings.Contains(table, "Matched or open") {
		t.Errorf("the providers of an open run do not say their matched items include the open ones:\n%s", table)
	}
	w = b.do(t, "GET", "/", bob, nil)
	wantStatus(t, w, http.StatusOK, "runs page")
	for _, want := range []string{"57.90 EUR", "42.00 GBP", "2.50 USD"} {
		if !strings.Contains(w.Body.String(), want) {
			t.Errorf("the runs page does not show %s at stake:\n%s", want, w.Body)
		}
	}

	// The provider filters.
	w = b.do(t, "GET", run+"/discrepancies?outcome=all&provider=stripe", bob, nil)
	wantStatus(t, w, http.StatusOK, "discrepancies of stripe")
	if s := w.Body.String(); !strings.Contains(s, "tx_b") || !strings.Contains(s, "tx_c") || strings.Contains(s, "alert(1)") {
		t.Errorf("stripe's discrepancies are not tx_b and tx_c:\n%s", s)
	}
	w = b.do(t, "GET", run+"/discrepancies?outcome=all&provider=(default)", bob, nil)
	if s := w.Body.String(); strings.Contains(s, ">tx_b<") || !strings.Contains(s, "alert(1)") {
		t.Errorf("the default provider's discrepancies are not the evil id alone:\n%s", s)
	}
	w = b.do(t, "GET", run+"/dead-letters?provider=stripe", bob, nil)
	if s := w.Body.String(); !strings.Contains(s, ">tx_d<") {
		t.Errorf("stripe's dead letters do not show tx_d:\n%s", s)
	}
	w = b.do(t, "GET", run+"/dead-letters?provider=paypal", bob, nil)
	if s := w.Body.String(); strings.Contains(s, ">tx_d<") || !strings.Contains(s, `value="paypal"`) {
		t.Errorf("paypal's dead letters show tx_d, or the filter is not kept:\n%s", s)
	}
}

func TestChartMergesCloseLimitMarks(t *testing.T) {
	t.Parallel()
	tr := traffic{Start: t0, End: t0.Add(1000 * time.Second),
		Points: []trafficPoint{{At: t0, Calls: 10}, {At: t0.Add(1000 * time.Second), Calls: 10}}}
	var lim limits
	for i := range 1000 {
		lim.Points = append(lim.Points, limitPoint{At: t0.Add(time.Duration(i) * time.Second), Effective: float64(i % 7),
			Estimate: math.NaN(), Configured: 10, Cause: "change " + strconv.Itoa(i)})
	}
	c := newSVGChart(tr, lim)
	if n, most := len(c.Marks), int(float64(c.Width)/markSpacing); n == 0 || n > most {
		t.Fatalf("%d hover marks for 1,000 changes, want 1 to %d", n, most)
	}
	if !strings.HasPrefix(c.Marks[0].Title, "change 0 (and ") {
		t.Errorf("first mark %q, want change 0 and the count of the changes it stands for", c.Marks[0].Title)
	}
	if got := strings.Count(c.Effective, "V"); got != 999 {
		t.Errorf("the effective line has %d steps, want every one of the 999 changes", got)
	}
}

func TestFmtDifference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ field, value, currency, want string }{
		{"amount_minor", "164858", "EUR", "1,648.58 EUR"},
		{"amount_minor", "-1499", "USD", "-14.99 USD"},
		{"amount_minor", "1500", "JPY", "1,500 JPY"},
		{"amount_minor", "<i>1499</i>", "EUR", "<i>1499</i>"},
		{"currency", "EUR", "EUR", "EUR"},
		{"status", "1500", "EUR", "1500"},
	} {
		if got := fmtDifference(tc.field, tc.value, tc.currency); got != tc.want {
			t.Errorf("fmtDifference(%s, %s, %s) = %q, want %q", tc.field, tc.value, tc.currency, got, tc.want)
		}
	}
}

// TestRunPageShowsAnnouncements: the run page lists each announcement's
// deliveries, their state and last answer (escaped).
func TestRunPageShowsAnnouncements(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	if _, err := b.pool.Exec(context.Background(), `
		INSERT INTO notifications (event_id, run_id, type, round, payload, created_at)
		VALUES ('6d1f0c2e-0000-4000-8000-000000000001', $1, 'run.completed', 1, '{}', now()),
		       ('6d1f0c2e-0000-4000-8000-000000000002', $1, 'run.deadline_missed', NULL, '{}', now())`, b.runID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(context.Background(), `
		INSERT INTO notification_deliveries (event_id, destination, target, format, state, attempts, next_attempt_at, last_status,
		                                     last_error, created_at)
		VALUES ('6d1f0c2e-0000-4000-8000-000000000001', 'a1b2c3d4e5f60718', 'https://hooks.example.com/…', 'slack', 'pending', 3,
		        now() + interval '1 minute', 503, 'http 503: <b>busy</b>', now())`); err != nil {
		t.Fatal(err)
	}
	w := b.do(t, "GET", "/runs/"+b.runID.String(), b.login(t, "bob"), nil)
	wantStatus(t, w, http.StatusOK, "run page")
	body := w.Body.String()
	for _, want := range []string{"<h2>Announcements</h2>", "run.completed round 1", "https://hooks.example.com/…", "(slack)",
		`state-pending">pending`, "http 503: &lt;b&gt;busy&lt;/b&gt;", "run.deadline_missed",
		"No process with a webhook (--notify) has taken it up."} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page lacks %q", want)
		}
	}
}
