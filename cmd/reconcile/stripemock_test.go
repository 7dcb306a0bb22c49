package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pgtest"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// stripeMockVersion is the stripe-mock release the tests run. It is a tool,
// built from source with `go install`, never a dependency in go.mod.
const stripeMockVersion = "v0.203.0"

var stripeMockBuild struct {
	once sync.Once
	path string
	err  error
}

// stripeMockBinary builds stripe-mock once per test binary (the Go build
// cache makes a rebuild quick) into a directory of the system's temporary
// directory named after the version, so that runs share one binary.
func stripeMockBinary(t *testing.T) string {
	t.Helper()
	b := &stripeMockBuild
	b.once.Do(func() {
		dir := filepath.Join(os.TempDir(), "reconcile-stripe-mock-"+stripeMockVersion)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.err = err
			return
		}
		cmd := exec.Command("go", "install", "github.com/stripe/stripe-mock@"+stripeMockVersion)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go install stripe-mock@%s: %v\n%s", stripeMockVersion, err, out)
			return
		}
		b.path = filepath.Join(dir, "stripe-mock")
	})
	if b.err != nil {
		t.Fatalf("stripe-mock cannot be had: %v", b.err)
	}
	return b.path
}

// startStripeMock runs stripe-mock on loopback ports it picks and returns
// its HTTP base URL; it is stopped when t ends.
func startStripeMock(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(stripeMockBinary(t), "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start stripe-mock: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(time.Minute):
		t.Fatal("stripe-mock did not start listening within a minute")
		return ""
	}
}

// TestConsumeStripeProfileAgainstStripeMock reconciles a day of
// PaymentIntents, refunds and disputes, some of connected accounts, with
// `consume --profile stripe` against stripe-mock, which answers every
// object of a kind with one fixture (a PaymentIntent of 1099 usd
// requires_payment_method, a refund of 100 usd succeeded, a dispute of
// 1000 usd warning_needs_response, each with the id asked for), and checks
// every outcome and differing field: refund and dispute ids are asked at
// their own endpoints, never missing.
func TestConsumeStripeProfileAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := startStripeMock(t)
	conn := pgtest.ConnString(t)
	e, _, stderr := testEnv(t)
	e.getenv = func(k string) string {
		switch k {
		case "DATABASE_URL":
			return conn
		case "RECONCILE_PROVIDER_TOKEN":
			return "sk_test_4eC39HqLyjWDarjtT1zdp7dc"
		case "RECONCILE_PROVIDER_PROFILE":
			return "stripe"
		}
		return ""
	}
	type want struct{ state, fields string }
	type answer struct {
		amount int64
		status string
	}
	expect := map[string]want{}
	answers := map[string]answer{}
	var csv strings.Builder
	csv.WriteString("transaction_id,account_id,amount_minor,currency,status,occurred_at,kind\n")
	for i := range 300 {
		id := fmt.Sprintf("pi_3Q%06dLkdIwHu7ix", i)
		kind := ""
		amount, currency, status, got := int64(1099), "USD", "failed", answer{1099, "failed"}
		switch i % 3 {
		case 1: // Stripe's refund ids; every third one stated in the kind column
			id, amount, status, got = fmt.Sprintf("re_3Q%06dLkdIwHu7ix", i), -100, "succeeded", answer{-100, "succeeded"}
			if i%9 == 1 {
				id, kind = fmt.Sprintf("pyr_3Q%06dLkdIwHu7", i), "refund"
			}
		case 2: // disputes
			id, amount, status, got = fmt.Sprintf("dp_3Q%06dLkdIwHu7ix", i), -1000, "disputed", answer{-1000, "disputed"}
			if i%9 == 2 {
				id, kind = fmt.Sprintf("ch_3Q%06dLkdIwHu7ix", i), "dispute"
			}
		}
		w := want{"matched", ""}
		switch i / 3 % 8 {
		case 1:
			amount, w = amount+101, want{"mismatched", "amount_minor"}
		case 2:
			currency, w = "EUR", want{"mismatched", "currency"}
		case 3:
			status, w = "pending", want{"mismatched", "status"}
		case 4:
			amount, currency, status, w = 5, "JPY", "canceled", want{"mismatched", "amount_minor,currency,status"}
		}
		// Every fourth row belongs to a connected account: the
		// Stripe-Account header goes with it.
		account := fmt.Sprintf("player_%d", i%17)
		if i%4 == 0 {
			account = fmt.Sprintf("acct_1Nv0FGQ9RKHgC%03d", i%17)
		}
		if i == 299 {
			// Stripe ids never hold a slash; stripe-mock answers 404 without
			// resource_missing, which the profile makes permanent.
			id, kind, w = "pi_with/slash", "", want{"dead_lettered", "http_404"}
		}
		expect[id], answers[id] = w, got
		fmt.Fprintf(&csv, "%s,%s,%d,%s,%s,2026-10-24T%02d:%02d:00Z,%s\n", id, account, amount, currency, status, i/60%24, i%60, kind)
	}
	src := filepath.Join(t.TempDir(), "payments-2026-10-24.csv")
	if err := os.WriteFile(src, []byte(csv.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-24", "--source", src, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	if err := cmdConsume(ctx, e, []string{"--until-done", "--provider-url", url, "--rate", "400", "--burst", "50",
		"--concurrency", "8", "--progress", "off", "--log-level", "error"}); err != nil {
		t.Fatalf("consume: %v\n%s", err, stderr)
	}

	conf, err := pgx.ParseConfig(conn)
	if err != nil {
		t.Fatal(err)
	}
	db, err := pgx.ConnectConfig(ctx, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	rows, err := db.Query(ctx, `
		SELECT transaction_id, state, coalesce(last_reason, ''), coalesce(provider_status, ''), coalesce(provider_amount_minor, 0),
		       coalesce((SELECT string_agg(d ->> 'field', ',' ORDER BY d ->> 'field')
		                   FROM jsonb_array_elements(CASE WHEN jsonb_typeof(differences) = 'array' THEN differences ELSE '[]' END) d), '')
		  FROM items ORDER BY transaction_id`)
	if err != nil {
		t.Fatal(err)
	}
	var id, state, reason, provStatus, fields string
	var provAmount int64
	seen := 0
	_, err = pgx.ForEachRow(rows, []any{&id, &state, &reason, &provStatus, &provAmount, &fields}, func() error {
		seen++
		w, ok := expect[id]
		got := want{state, fields}
		if state == "dead_lettered" {
			got.fields = reason
		}
		if !ok || got != w {
			t.Errorf("%s: %+v, want %+v", id, got, w)
		}
		if p := answers[id]; state != "dead_lettered" && (provStatus != p.status || provAmount != p.amount) {
			t.Errorf("%s: provider record %s %d, want %s %d", id, provStatus, provAmount, p.status, p.amount)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen != len(expect) {
		t.Errorf("%d items, want %d", seen, len(expect))
	}
}

// TestStripeListAgainstStripeMock reads a page of the stripe profile's list
// (PaymentIntents of a window, expanded charges, has_more paging) from
// stripe-mock, which validates the request against Stripe's OpenAPI
// specification and answers its fixture: one PaymentIntent of 1099 usd
// requires_payment_method, and no further page.
func TestStripeListAgainstStripeMock(t *testing.T) {
	t.Parallel()
	url := startStripeMock(t)
	prof, ok := profile.Builtin("stripe")
	if !ok {
		t.Fatal("no built-in stripe profile")
	}
	client, err := provider.New(provider.Config{BaseURL: url, Profile: prof, Token: "sk_test_4eC39HqLyjWDarjtT1zdp7dc"})
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)
	resp, page, err := client.ListPage(context.Background(), provider.PageRequest{From: from, To: from.Add(24 * time.Hour)})
	if err != nil || resp.Status != 200 {
		t.Fatalf("list page: status %d, err %v: %s", resp.Status, err, resp.BodyExcerpt)
	}
	if len(page.Records) != 1 || page.Next != "" {
		t.Fatalf("page = %+v, want stripe-mock's one PaymentIntent and no next page", page)
	}
	r := page.Records[0]
	if !strings.HasPrefix(r.ID, "pi_") || r.AmountMinor != 1099 || r.Currency != "USD" || r.Status != "failed" {
		t.Errorf("record = %+v, want pi_… 1099 USD failed (requires_payment_method)", r)
	}
}
