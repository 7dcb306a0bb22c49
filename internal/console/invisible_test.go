package console

import (
	"context"
	"encoding/csv"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/enqueue"
	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/queue"
)

func TestShowInvisible(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"<p>plain – ascii · text</p>", "<p>plain – ascii · text</p>"},
		{"<td>tx_\u202Egnp.exe</td>", `<td>tx_<span class="cf" title="RIGHT-TO-LEFT OVERRIDE">U+202E</span>gnp.exe</td>`},
		{`<a title="a` + "\u200B" + `b">x` + "\u2066" + `</a>`,
			`<a title="a&lt;U+200B&gt;b">x<span class="cf" title="LEFT-TO-RIGHT ISOLATE">U+2066</span></a>`},
		{"<b>\U000E0041</b>", `<b><span class="cf" title="invisible formatting character">U+E0041</span></b>`},
		{"<b>\u00AD</b>", `<b><span class="cf" title="SOFT HYPHEN">U+00AD</span></b>`},
	} {
		if got := string(showInvisible([]byte(tc.in))); got != tc.want {
			t.Errorf("showInvisible(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// hostileIDs are transaction ids that are legal in a payment file and
// treacherous on a page: dot segments, a right-to-left override, a zero
// width space.
var hostileIDs = []string{".", "..", "tx_\u202Egnp.exe", "tx_a\u200Bb"}

// setupDeadLetters is a console on a run of ids, every one dead-lettered.
func setupDeadLetters(t *testing.T, ids []string) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := setup(t, htpasswd(t))
	var file strings.Builder
	cw := csv.NewWriter(&file)
	_ = cw.Write([]string{"transaction_id", "account_id", "amount_minor", "currency", "status", "occurred_at"})
	for _, id := range ids {
		_ = cw.Write([]string{id, "acc_" + id, "100", "EUR", "succeeded", "2026-10-23T08:00:00Z"})
	}
	cw.Flush()
	enq, err := enqueue.New(b.pool, enqueue.Config{Queue: b.q, Actor: "ops@batch-1"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := payments.ParseDate("2026-10-23")
	res, err := enq.Enqueue(ctx, enqueue.Request{Date: d, Source: "/data/hostile.csv",
		Open: func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(file.String())), nil }})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := b.q.Claim(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var release []queue.Delivery
	for _, dl := range ds {
		if dl.RunID != res.RunID {
			release = append(release, dl)
			continue
		}
		c := ledger.Change{RunID: dl.RunID, TransactionID: dl.TransactionID, From: ledger.Queued, To: ledger.DeadLettered,
			Called: true, Attempt: 1, HTTPStatus: 400, Reason: "http_400", Actor: "worker-1:42", At: t0}
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := ledger.Record(ctx, tx, c); err != nil {
				return err
			}
			return b.q.DeadLetter(ctx, tx, dl, "http_400", "HTTP 400")
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.q.Release(ctx, release); err != nil {
		t.Fatal(err)
	}
	b.runID = res.RunID
	return b
}

// TestHostileIDsAreShownAndOpenable lists dead letters with hostile ids:
// the page shows no formatting character raw, and every link to a
// transaction opens it, the dot segments included.
func TestHostileIDsAreShownAndOpenable(t *testing.T) {
	t.Parallel()
	b := setupDeadLetters(t, hostileIDs)
	bob := b.login(t, "bob")
	w := b.do(t, "GET", "/runs/"+b.runID.String()+"/dead-letters", bob, nil)
	wantStatus(t, w, http.StatusOK, "dead letters")
	body := w.Body.String()
	if strings.ContainsFunc(body, invisible) {
		t.Errorf("the page shows a formatting character raw:\n%s", body)
	}
	for _, want := range []string{`tx_<span class="cf" title="RIGHT-TO-LEFT OVERRIDE">U+202E</span>gnp.exe`,
		`tx_a<span class="cf" title="ZERO WIDTH SPACE">U+200B</span>b`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page does not show %s", want)
		}
	}
	links := regexp.MustCompile(`href="(/runs/[^"]+/tx[/?][^"]*)"`).FindAllStringSubmatch(body, -1)
	opened := map[string]bool{}
	for _, m := range links {
		target := html.UnescapeString(m[1])
		w := b.do(t, "GET", target, bob, nil)
		wantStatus(t, w, http.StatusOK, "the link "+target)
		for _, id := range hostileIDs {
			if strings.Contains(w.Body.String(), "nightly-2026-10-23:"+html.EscapeString(id)+"</code>") {
				opened[id] = true
			}
		}
		if strings.ContainsFunc(w.Body.String(), invisible) {
			t.Errorf("%s shows a formatting character raw", target)
		}
	}
	for _, id := range hostileIDs {
		if id != "." && id != ".." {
			continue // the others' keys are shown escaped, checked above
		}
		if !opened[id] {
			t.Errorf("no link of the dead-letter page opens the transaction %q (links: %v)", id, links)
		}
	}
	// The search finds them too.
	for _, id := range []string{".", ".."} {
		w := b.do(t, "GET", "/tx?id="+url.QueryEscape(id), bob, nil)
		wantStatus(t, w, http.StatusSeeOther, "search "+id)
		loc := w.Header().Get("Location")
		page := b.do(t, "GET", loc, bob, nil)
		wantStatus(t, page, http.StatusOK, "the search's "+loc)
		if !strings.Contains(page.Body.String(), "nightly-2026-10-23:"+id+"</code>") {
			t.Errorf("%s does not show the transaction %q", loc, id)
		}
	}
}
