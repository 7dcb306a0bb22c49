package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/reconcile/reconcile/internal/profile"
)

const (
	testClientSecret = "cs_live_v3ry-s3cret-client"
	testAccessToken  = "A21AAtoken-never-printed"
)

func loadProfile(t *testing.T, nameOrFile string) *profile.Profile {
	t.Helper()
	p, err := profile.Load(nameOrFile)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "profiles", "fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// paypalServer serves the PayPal token endpoint and captures from their
// documented bodies. Each token it issues is new; revoke makes the current
// one answer 401 once.
type paypalServer struct {
	*httptest.Server
	tokens, lookups atomic.Int64
	mu              sync.Mutex
	valid           string
	seenAuth        []string
}

func newPayPal(t *testing.T) *paypalServer {
	t.Helper()
	s := &paypalServer{}
	capture := fixture(t, "paypal-capture.json")
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/oauth2/token":
			id, secret, ok := r.BasicAuth()
			if r.Method != http.MethodPost || !ok || id != "client-1" || secret != testClientSecret || r.FormValue("grant_type") != "client_credentials" {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write(fixture(t, "paypal-401.json"))
				return
			}
			n := s.tokens.Add(1)
			tok := fmt.Sprintf("%s-%d", testAccessToken, n)
			s.mu.Lock()
			s.valid = tok
			s.mu.Unlock()
			_ = json.NewEncoder(w).Encode(map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 32400, "app_id": "APP-1"})
		case strings.HasPrefix(r.URL.Path, "/v2/payments/captures/"):
			s.lookups.Add(1)
			s.mu.Lock()
			valid := s.valid
			s.seenAuth = append(s.seenAuth, r.Header.Get("Authorization"))
			s.mu.Unlock()
			if r.Header.Get("Authorization") != "Bearer "+valid {
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"name":"AUTHENTICATION_FAILURE","message":"Authentication failed due to invalid authentication credentials or a missing Authorization header."}`))
				return
			}
			switch id := strings.TrimPrefix(r.URL.Path, "/v2/payments/captures/"); id {
			case "2GG279541U471931P":
				_, _ = w.Write(capture)
			case "RATE":
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write(fixture(t, "paypal-429.json"))
			default:
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write(fixture(t, "paypal-404.json"))
			}
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *paypalServer) revoke() {
	s.mu.Lock()
	s.valid = "revoked"
	s.mu.Unlock()
}

func TestPayPalOAuth2(t *testing.T) {
	t.Parallel()
	srv := newPayPal(t)
	var logs bytes.Buffer
	c := newClient(t, srv.URL, func(c *Config) {
		c.Profile, c.Token = loadProfile(t, "paypal"), ""
		c.ClientID, c.ClientSecret = "client-1", testClientSecret
	})
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	resp, err := c.Get(t.Context(), Lookup{TransactionID: "2GG279541U471931P", IdempotencyKey: "k1"})
	if err != nil || resp.Status != 200 || resp.Record != (Record{"2GG279541U471931P", 1099, "USD", "succeeded"}) || resp.ProviderStatus != "COMPLETED" {
		t.Fatalf("Get = %+v, %v", resp, err)
	}
	// The token is cached: more calls, one token.
	for _, id := range []string{"2GG279541U471931P", "MISSING", "RATE"} {
		resp, err = c.Get(t.Context(), Lookup{TransactionID: id, IdempotencyKey: "k"})
		logger.Info("call", "resp", resp, "err", err, "config", c.cfg)
		if err != nil {
			t.Fatal(err)
		}
	}
	if resp.Status != 429 || resp.Class != profile.ClassThrottle {
		t.Errorf("RATE: %d %v", resp.Status, resp.Class)
	}
	if n := srv.tokens.Load(); n != 1 {
		t.Errorf("%d tokens fetched for 4 calls, want 1", n)
	}
	if resp, _ := c.Get(t.Context(), Lookup{TransactionID: "MISSING", IdempotencyKey: "k"}); resp.Class != profile.ClassMissing {
		t.Errorf("MISSING: class %v", resp.Class)
	}

	// A revoked token: one refresh, one retry, success.
	srv.revoke()
	before := srv.lookups.Load()
	resp, err = c.Get(t.Context(), Lookup{TransactionID: "2GG279541U471931P", IdempotencyKey: "k"})
	if err != nil || resp.Status != 200 {
		t.Fatalf("after revoke: %+v, %v", resp, err)
	}
	if n, calls := srv.tokens.Load(), srv.lookups.Load()-before; n != 2 || calls != 2 {
		t.Errorf("after revoke: %d tokens, %d lookups; want 2 and 2", n, calls)
	}

	// Wrong client secret: the token endpoint's refusal is an auth answer.
	bad := newClient(t, srv.URL, func(c *Config) {
		c.Profile, c.ClientID, c.ClientSecret = loadProfile(t, "paypal"), "client-1", "wrong-"+testClientSecret
	})
	resp, err = bad.Get(t.Context(), Lookup{TransactionID: "2GG279541U471931P", IdempotencyKey: "k"})
	if err != nil || resp.Status != 401 || resp.Class != profile.ClassAuth || !strings.Contains(resp.BodyExcerpt, "invalid_client") {
		t.Errorf("wrong secret: %+v, %v", resp, err)
	}
	logger.Info("refused", "resp", resp, "config", bad.cfg)
	ex, _, _ := c.Check(t.Context(), Lookup{TransactionID: "2GG279541U471931P", IdempotencyKey: "k"})
	out := fmt.Sprintf("%v %+v %#v %s", ex, ex, ex.RequestHeader, logs.String())
	for _, secret := range []string{testClientSecret, testAccessToken} {
		if strings.Contains(out, secret) {
			t.Errorf("secret %q leaked:\n%s", secret, out)
		}
	}
	if got := ex.RequestHeader.Get("Authorization"); got != "Bearer [redacted]" {
		t.Errorf("Check Authorization = %q", got)
	}
}

func TestCredentialsRequired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"stripe", Config{Profile: loadProfile(t, "stripe")}, "provider config: profile stripe (auth bearer) needs a bearer token: set RECONCILE_PROVIDER_TOKEN"},
		{"paypal", Config{Profile: loadProfile(t, "paypal"), ClientID: "x"}, "provider config: profile paypal (auth oauth2_client_credentials) needs a client secret: set RECONCILE_PROVIDER_CLIENT_SECRET"},
		{"reconcile", Config{}, "provider config: BaseURL is required (profile reconcile has no default)"},
	} {
		_, err := New(tc.cfg)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: New = %v, want %s", tc.name, err, tc.want)
		}
	}
	c, err := New(Config{Profile: loadProfile(t, "stripe"), Token: testToken})
	if err != nil || c.BaseURL() != "https://api.stripe.com" {
		t.Errorf("stripe default base URL: %v, %v", c, err)
	}
}

// TestProfileRequest: method, path, query, headers, body and basic auth
// follow the profile; the idempotency header only when it names one.
func TestProfileRequest(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, query, version, key, ctype, body string
		user, pass                                     string
		basic                                          bool
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		u, p, ok := r.BasicAuth()
		got <- seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Acme-Version"), r.Header.Get("Idempotency-Key"),
			r.Header.Get("Content-Type"), b.String(), u, p, ok}
		w.Header().Set("Acme-Remaining", "7")
		_, _ = w.Write([]byte(`{"data":{"node":{"id":"a\"b/c","value":{"units":"10","nanos":990000000},"cur":"eur","state":"OK"}}}`))
	}))
	t.Cleanup(srv.Close)
	p, err := profile.Parse("acme.json", []byte(`{"name":"acme","request":{"method":"POST","path":"/graphql/{id}",
		"query":{"expand":"node","id":"{id}"},"headers":{"Acme-Version":"7"},"body":"{\"id\":\"{id}\"}"},
		"auth":{"type":"basic","username_env":"ACME_USER","password_env":"ACME_PASS"},
		"record":{"id":"data.node.id","amount":"data.node.value","amount_format":"units_nanos","currency":"data.node.cur","upper_currency":true,"status":"data.node.state"},
		"status_map":{"OK":"succeeded"},"hints":{"rate_limit_remaining":"Acme-Remaining"}}`))
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, srv.URL, func(c *Config) { c.Profile, c.Token, c.Username, c.Password = p, "", "user", "p4ss" })
	resp, err := c.Get(t.Context(), Lookup{TransactionID: `a"b/c`, IdempotencyKey: "key-1"})
	if err != nil || resp.Record != (Record{`a"b/c`, 1099, "EUR", "succeeded"}) {
		t.Fatalf("Get = %+v, %v", resp, err)
	}
	s := <-got
	want := seen{"POST", "/graphql/a%22b%2Fc", "expand=node&id=a%22b%2Fc", "7", "", "application/json", `{"id":"a\"b/c"}`, "user", "p4ss", true}
	if s != want {
		t.Errorf("request\n got %+v\nwant %+v", s, want)
	}
	if resp.Header.Get("X-RateLimit-Remaining") != "7" {
		t.Errorf("hint not renamed: %v", resp.Header)
	}
}

// TestCheckoutProfileFromDocs: a profile file written from docs/providers.md
// alone, for Checkout.com's GET /payments/{id}, works without code changes.
func TestCheckoutProfileFromDocs(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/payments/pay_mbabizu24mvu3mela5njyhpit4":
			w.Header().Set("Cko-Request-Id", "0120e756-6d00-453c-a398-ff1643f9a873")
			_, _ = w.Write(fixture(t, "checkout-payment.json"))
		case "/payments/pay_busy":
			w.WriteHeader(http.StatusTooManyRequests)
		case "/payments/pay_partial":
			_, _ = w.Write([]byte(`{"id":"pay_partial","amount":6540,"currency":"USD","status":"Partially Captured",
				"balances":{"total_authorized":6540,"total_captured":4000,"total_refunded":0}}`))
		default:
			if word, ok := strings.CutPrefix(r.URL.Path, "/payments/pay_status_"); ok {
				_, _ = fmt.Fprintf(w, `{"id":"pay_status_%s","amount":100,"currency":"EUR","status":%q}`, word, strings.ReplaceAll(word, "_", " "))
				return
			}
			w.WriteHeader(http.StatusNotFound) // Checkout.com answers an empty body
		}
	}))
	t.Cleanup(srv.Close)
	checkout := loadProfile(t, filepath.Join("..", "..", "testdata", "profiles", "checkout.json"))
	if _, err := New(Config{Profile: checkout, Token: testToken}); err == nil {
		t.Error("a client without the account's base URL was built")
	}
	c := newClient(t, srv.URL, func(c *Config) { c.Profile = checkout })
	// Every status the API reference and the SDKs list is mapped.
	for word, want := range map[string]string{"Pending": "pending", "Requested": "pending", "Active": "pending",
		"Authentication_Requested": "pending", "Retry_Scheduled": "pending", "Authorized": "pending", "Card_Verified": "pending",
		"Partially_Captured": "succeeded", "Captured": "succeeded", "Paid": "succeeded", "Partially_Refunded": "partially_refunded",
		"Refunded": "refunded", "Chargeback": "disputed", "Declined": "failed", "Voided": "canceled", "Canceled": "canceled",
		"Expired": "canceled"} {
		resp, err := c.Get(t.Context(), Lookup{TransactionID: "pay_status_" + word})
		if err != nil || resp.Record.Status != want {
			t.Errorf("%s: %+v, %v; want %s", word, resp.Record, err, want)
		}
	}
	// A partial capture reads what was captured.
	if resp, err := c.Get(t.Context(), Lookup{TransactionID: "pay_partial"}); err != nil || resp.Record.AmountMinor != 4000 || resp.Record.Status != "succeeded" {
		t.Errorf("partial capture: %+v, %v", resp.Record, err)
	}
	resp, err := c.Get(t.Context(), Lookup{TransactionID: "pay_mbabizu24mvu3mela5njyhpit4", IdempotencyKey: "k"})
	if err != nil || resp.Record != (Record{"pay_mbabizu24mvu3mela5njyhpit4", 6540, "USD", "succeeded"}) || resp.ProviderStatus != "Captured" {
		t.Errorf("Get = %+v, %v", resp, err)
	}
	if resp, err := c.Get(t.Context(), Lookup{TransactionID: "pay_nope", IdempotencyKey: "k"}); err != nil || resp.Status != 404 || resp.Class != profile.ClassMissing {
		t.Errorf("missing: %+v, %v", resp, err)
	}
	if resp, err := c.Get(t.Context(), Lookup{TransactionID: "pay_busy", IdempotencyKey: "k"}); err != nil || resp.Class != profile.ClassThrottle {
		t.Errorf("throttle: %+v, %v", resp, err)
	}
}

func TestUnmappedStatus(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"id":"pi_1","amount":500,"currency":"eur","status":"requires_reauthorization"}`))
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, func(c *Config) { c.Profile = loadProfile(t, "stripe") })
	resp, err := c.Get(t.Context(), Lookup{TransactionID: "pi_1", IdempotencyKey: "k"})
	var ue *profile.UnmappedStatusError
	if KindOf(err) != KindUnmappedStatus || !errors.As(err, &ue) || resp.ProviderStatus != "requires_reauthorization" || resp.Record.AmountMinor != 500 {
		t.Errorf("Get = %+v, %v", resp, err)
	}
}
