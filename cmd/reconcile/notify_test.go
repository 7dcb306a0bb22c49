package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

// TestNotifyFlagsAreCheckedFirst: bad --notify flags and a bad secret are
// refused before anything connects, and the error never repeats the secret
// or a webhook's path.
func TestNotifyFlagsAreCheckedFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"consume", "--notify", "ftp://hooks.example.com/T0/SECRETPATH"}, nil, "--notify: webhook ftp://hooks.example.com/…: want an absolute http or https URL"},
		{[]string{"consume", "--notify-format", "teams"}, nil, `--notify-format "teams": want standard or slack`},
		{[]string{"schedule", "--cron", "@daily", "--source-template", "x", "--console-url", "console.example.com/SECRETPATH"}, nil, "--console-url (a URL not shown): want an absolute http or https URL"},
		{[]string{"consume", "--deadline", "-1h"}, nil, "--deadline -1h0m0s: want a positive duration"},
		{[]string{"consume"}, map[string]string{"RECONCILE_NOTIFY_URL": "https://hooks.example.com/x", "RECONCILE_NOTIFY_SECRET": "whsec_SECRETPATH!!"},
			"RECONCILE_NOTIFY_SECRET: want whsec_ followed by the key in base64"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), tc.args, func(k string) string { return tc.env[k] }, strings.NewReader(""), io.Discard, &stderr)
		if err == nil || !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "SECRETPATH") {
			t.Errorf("%v: %v, want a usage error %q without the secret", tc.args, err, tc.want)
		}
	}
}

// TestConsumeUntilDoneAnnouncesBeforeItExits: a consumer that completes the
// run with --until-done delivers the signed announcement before it exits.
func TestConsumeUntilDoneAnnouncesBeforeItExits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, stderr := testEnv(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "payments.csv")
	if err := os.WriteFile(src, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+
		"tx1,acc,100,EUR,succeeded,2026-10-24T10:00:00Z\ntx2,acc,250,EUR,succeeded,2026-10-24T11:00:00Z\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sim, err := providersim.New(providersim.Config{Records: []provider.Record{
		{ID: "tx1", AmountMinor: 100, Currency: "EUR", Status: "succeeded"},
		{ID: "tx2", AmountMinor: 999, Currency: "EUR", Status: "succeeded"}}})
	if err != nil {
		t.Fatal(err)
	}
	psrv := httptest.NewServer(sim)
	defer psrv.Close()
	var mu sync.Mutex
	var got []http.Header
	var bodies [][]byte
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r.Header.Clone()), append(bodies, b)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	base := e.getenv
	e.getenv = func(k string) string {
		switch k {
		case "RECONCILE_PROVIDER_URL":
			return psrv.URL
		case "RECONCILE_NOTIFY_URL":
			return hook.URL + "/hooks/night"
		case "RECONCILE_NOTIFY_SECRET":
			return "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		}
		return base(k)
	}
	if err := run(ctx, []string{"enqueue", "--date", "2026-10-24", "--source", src}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatalf("enqueue: %v\n%s", err, stderr)
	}
	if err := run(ctx, []string{"consume", "--until-done", "--progress", "off", "--console-url", "https://reconcile.example.com"},
		e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatalf("consume: %v\n%s", err, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Get("webhook-id") == "" || !strings.HasPrefix(got[0].Get("webhook-signature"), "v1,") {
		t.Fatalf("the webhook received %d events (%v); want one, signed\n%s\n%s", len(got), got, stdout, stderr)
	}
	var ev struct {
		Type string
		Data struct {
			ReconciliationID string `json:"reconciliation_id"`
			Outcomes         map[string]int
			ConsoleURL       string `json:"console_url"`
		}
	}
	if err := json.Unmarshal(bodies[0], &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "run.completed" || ev.Data.ReconciliationID != "nightly-2026-10-24" || ev.Data.Outcomes["mismatched"] != 1 ||
		!strings.HasPrefix(ev.Data.ConsoleURL, "https://reconcile.example.com/runs/") {
		t.Errorf("event %s", bodies[0])
	}
	if strings.Contains(stderr.String(), "/hooks/night") || strings.Contains(stderr.String(), "MfKQ9r8G") {
		t.Errorf("the logs name the webhook's path or the secret:\n%s", stderr)
	}

	// status shows the delivery, without the webhook's path.
	stdout.Reset()
	if err := run(ctx, []string{"status", "--date", "2026-10-24"}, e.getenv, e.stdin, e.stdout, e.stderr); err != nil {
		t.Fatal(err)
	}
	want := "announced run.completed round 1 to " + hook.URL + "/…: delivered "
	if !strings.Contains(stdout.String(), want) || !strings.Contains(stdout.String(), "(1 attempt)") ||
		strings.Contains(stdout.String(), "/hooks/night") {
		t.Errorf("status does not show the delivery %q:\n%s", want, stdout)
	}
}
