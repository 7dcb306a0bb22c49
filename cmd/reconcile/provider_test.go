package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

func TestProviderProfiles(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	e := &env{getenv: func(string) string { return "" }, stdout: &out, stderr: &out}
	if err := cmdProvider(context.Background(), e, []string{"profiles"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"reconcile (default)", "stripe", "https://api.stripe.com", "oauth2_client_credentials",
		"RECONCILE_PROVIDER_CLIENT_ID,RECONCILE_PROVIDER_CLIENT_SECRET", "square"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("profiles output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestProviderCheckRedacts: `provider check` prints the request, the answer,
// the record and the decision, and never a secret: not the bearer token,
// not the OAuth2 client secret, not the access token.
func TestProviderCheckRedacts(t *testing.T) {
	t.Parallel()
	const token, secret = "sk_live_Bearer-s3cret", "cs_Client-s3cret"
	sim, err := providersim.New(providersim.Config{Records: []provider.Record{{ID: "tx_1", AmountMinor: 1099, Currency: "USD", Status: "succeeded"}},
		Token: token})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		shape providersim.Shape
		want  []string
	}{
		{providersim.ShapeStripe, []string{"/v1/payment_intents/tx_1", "Authorization: Bearer [redacted]", "Stripe-Version: 2024-06-20",
			`"status":"succeeded"`, `payment {"id":"tx_1","amount_minor":1099,"currency":"USD","status":"succeeded"} (provider status "succeeded"; status and amount by status_rules[3])`,
			"decision: ack mismatched (reason mismatched)", "amount_minor: expected 1000, provider 1099"}},
		{providersim.ShapePayPal, []string{"/v2/payments/captures/tx_1", "Authorization: Bearer [redacted]", `"value":"10.99"`,
			`(provider status "COMPLETED")`, "decision: ack mismatched"}},
	} {
		h, err := providersim.Shaped(sim, tc.shape, providersim.ShapeConfig{ClientID: "cid", ClientSecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		var out, errOut bytes.Buffer
		e := &env{getenv: func(k string) string {
			return map[string]string{"RECONCILE_PROVIDER_TOKEN": token, "RECONCILE_PROVIDER_CLIENT_ID": "cid",
				"RECONCILE_PROVIDER_CLIENT_SECRET": secret, "RECONCILE_PROVIDER_URL": srv.URL}[k]
		}, stdout: &out, stderr: &errOut}
		err = cmdProvider(context.Background(), e, []string{"check", "--profile", tc.shape.String(), "--id", "tx_1", "--expect-amount", "1000"})
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.shape, err)
		}
		all := out.String() + errOut.String()
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.shape, w, all)
			}
		}
		for _, s := range []string{token, secret, "A21AA"} {
			if strings.Contains(all, s) {
				t.Errorf("%s: secret %q printed:\n%s", tc.shape, s, all)
			}
		}
	}
}

func TestConsumeBadProfile(t *testing.T) {
	t.Parallel()
	e, _, _ := testEnv(t)
	bad := filepath.Join("..", "..", "testdata", "profiles", "bad", "unknown-auth.json")
	err := cmdConsume(context.Background(), e, []string{"--profile", bad, "--provider-url", "http://127.0.0.1:1", "--log-level", "error"})
	var msg bytes.Buffer
	if code := exitCode(err, &msg); code != 2 || !strings.Contains(msg.String(), bad+`:5: auth.type: unknown "api_key"`) {
		t.Errorf("exit %d: %s", code, msg.String())
	}
	// A profile needing a credential that is not set names the variable.
	if _, err := os.Stat(bad); err != nil {
		t.Fatal(err)
	}
	err = cmdConsume(context.Background(), e, []string{"--profile", "stripe", "--log-level", "error"})
	msg.Reset()
	if code := exitCode(err, &msg); code != 2 || !strings.Contains(msg.String(), "needs a bearer token: set RECONCILE_PROVIDER_TOKEN") {
		t.Errorf("exit %d: %s", code, msg.String())
	}
}

// TestProviderCheckKindsAndNotes: provider check asks for a row of the kind
// and account given, and says when an answer would stop a consumer: a 404
// the profile does not recognise as the provider's own, or a wrong mode.
func TestProviderCheckKindsAndNotes(t *testing.T) {
	t.Parallel()
	sim, err := providersim.New(providersim.Config{Records: []provider.Record{{ID: "re_1", AmountMinor: -500, Currency: "EUR", Status: "succeeded"}},
		Kinds: map[string]string{"re_1": "refund"}, Accounts: map[string]string{"re_1": "acct_1Nv0FGQ9RKHgCVdK"}})
	if err != nil {
		t.Fatal(err)
	}
	right, _ := providersim.Shaped(sim, providersim.ShapeStripe, providersim.ShapeConfig{})
	wrongMode, _ := providersim.Shaped(sim, providersim.ShapeStripe, providersim.ShapeConfig{WrongMode: true})
	for _, tc := range []struct {
		name    string
		handler http.Handler
		profile string
		args    []string
		want    []string
	}{
		{"a connected account's refund", right, "stripe", []string{"--id", "re_1", "--account", "acct_1Nv0FGQ9RKHgCVdK"},
			[]string{"/v1/refunds/re_1\n", "Stripe-Account: acct_1Nv0FGQ9RKHgCVdK", `refund {"id":"re_1","amount_minor":-500`, "decision: ack matched"}},
		{"a wrong mode", wrongMode, "stripe", []string{"--id", "re_1", "--kind", "refund"},
			[]string{"decision: retry (reason wrong_mode)", "another mode or account than the object; a consumer stops its calls at once"}},
		{"a wrong base path", sim, "reconcile", []string{"--id", "re_1", "--provider-url-suffix"},
			[]string{"decision: ack missing", "when the first 20 items of a run are all answered so, a consumer stops its calls"}},
	} {
		srv := httptest.NewServer(tc.handler)
		url := srv.URL
		args := tc.args
		if args[len(args)-1] == "--provider-url-suffix" {
			args, url = args[:len(args)-1], url+"/api"
		}
		var out, errOut bytes.Buffer
		e := &env{getenv: func(k string) string {
			return map[string]string{"RECONCILE_PROVIDER_TOKEN": "sk_test_x", "RECONCILE_PROVIDER_URL": url}[k]
		}, stdout: &out, stderr: &errOut}
		err := cmdProvider(context.Background(), e, append([]string{"check", "--profile", tc.profile, "--expect-amount", "-500",
			"--expect-currency", "EUR", "--expect-status", "succeeded"}, args...))
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out.String())
			}
		}
	}
	var out bytes.Buffer
	e := &env{getenv: func(string) string { return "" }, stdout: &out, stderr: &out}
	if err := cmdProvider(context.Background(), e, []string{"check", "--id", "x", "--kind", "chargeback"}); exitCode(err, &out) != 2 ||
		!strings.Contains(out.String(), "--kind \"chargeback\": want one of payment, refund, dispute") {
		t.Errorf("a bad --kind: %v\n%s", err, out.String())
	}
}
