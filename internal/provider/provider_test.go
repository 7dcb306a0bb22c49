package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

const testToken = "sk_test_s3cr3t-token-value"

func newClient(t *testing.T, url string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{BaseURL: url, Token: testToken}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func TestGetSendsContract(t *testing.T) {
	t.Parallel()
	type seen struct {
		rawPath, auth, key, accept, method string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.EscapedPath(), r.Header.Get("Authorization"), r.Header.Get("Idempotency-Key"), r.Header.Get("Accept"), r.Method}
		fmt.Fprintf(w, `{"id":"tx_1","amount_minor":1234,"currency":"EUR","status":"succeeded","extra":{"x":[1,2]}}`)
	}))
	t.Cleanup(srv.Close)

	c := newClient(t, srv.URL+"/api/", nil)
	resp, err := c.Get(t.Context(), Lookup{TransactionID: "tx_1", IdempotencyKey: "nightly-2026-10-24:tx_1"})
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	s := <-got
	want := seen{"/api/v1/transactions/tx_1", "Bearer " + testToken, "nightly-2026-10-24:tx_1", "application/json", "GET"}
	if s != want {
		t.Errorf("request = %+v, want %+v", s, want)
	}
	if resp.Status != 200 || resp.Record != (Record{"tx_1", 1234, "EUR", "succeeded"}) {
		t.Errorf("response = %d %+v", resp.Status, resp.Record)
	}

	// No token: no Authorization header at all.
	c = newClient(t, srv.URL, func(c *Config) { c.Token = "" })
	if _, err := c.Get(t.Context(), Lookup{TransactionID: "tx_1", IdempotencyKey: "k"}); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if s := <-got; s.auth != "" {
		t.Errorf("Authorization = %q without a token", s.auth)
	}
}

func TestGetEscapesIDs(t *testing.T) {
	t.Parallel()
	ids := []string{"a/b", "a?b=c", "100%", "päyment-✓", `quote"d'`, "sp ace", "..", ".", "#frag", "a;b"}
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			t.Errorf("query %q leaked from the id", r.URL.RawQuery)
		}
		got <- r.URL.EscapedPath()
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, nil)
	for _, id := range ids {
		resp, err := c.Get(t.Context(), Lookup{TransactionID: id, IdempotencyKey: "k"})
		if err != nil || resp.Status != 404 {
			t.Fatalf("Get(%q) = %d, %v", id, resp.Status, err)
		}
		p := <-got
		rest, ok := strings.CutPrefix(p, "/v1/transactions/")
		if !ok || strings.Contains(rest, "/") {
			t.Errorf("Get(%q) sent path %q: id not one escaped segment", id, p)
			continue
		}
		// A dot segment sent as it is would be resolved by the server or
		// a proxy on the way: /v1/transactions/.. is /v1/.
		if rest == "." || rest == ".." {
			t.Errorf("Get(%q) sent the dot segment %q", id, p)
		}
		r, err := url.PathUnescape(rest)
		if err != nil || r != id {
			t.Errorf("Get(%q) sent %q, unescapes to %q (%v)", id, rest, r, err)
		}
	}
}

func TestGetStatusAndHeaders(t *testing.T) {
	t.Parallel()
	now := time.Now()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/transactions/throttled":
			w.Header().Set("Retry-After", "7")
			w.Header().Set("RateLimit", `"default";r=0;t=7`)
			w.WriteHeader(429)
		case "/v1/transactions/dated":
			w.Header().Set("Retry-After", now.Add(90*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(503)
		case "/v1/transactions/malformed":
			w.Header().Set("Retry-After", "soon")
			w.Header().Set("Stripe-Should-Retry", "false")
			w.WriteHeader(503)
		case "/v1/transactions/huge":
			w.Header().Set("Retry-After", "999999999999999999999")
			w.Header().Set("Stripe-Should-Retry", "true")
			w.WriteHeader(429)
		case "/v1/transactions/bad":
			w.WriteHeader(400)
			fmt.Fprint(w, strings.Repeat("é", 1000))
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, nil)
	get := func(id string) Response {
		t.Helper()
		r, err := c.Get(t.Context(), Lookup{TransactionID: id, IdempotencyKey: "k"})
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		return r
	}

	r := get("throttled")
	if r.Status != 429 || !r.HasRetryAfter || r.RetryAfter != 7*time.Second || r.ShouldRetry != nil {
		t.Errorf("throttled: %+v", r)
	}
	if r.Header.Get("RateLimit") != `"default";r=0;t=7` {
		t.Errorf("RateLimit header not passed through: %v", r.Header)
	}
	r = get("dated")
	if !r.HasRetryAfter || r.RetryAfter < 80*time.Second || r.RetryAfter > 91*time.Second {
		t.Errorf("dated Retry-After = %v, %v; want about 90s", r.RetryAfter, r.HasRetryAfter)
	}
	r = get("malformed")
	if r.HasRetryAfter || r.RetryAfter != 0 || r.ShouldRetry == nil || *r.ShouldRetry {
		t.Errorf("malformed: %+v", r)
	}
	r = get("huge")
	if !r.HasRetryAfter || r.RetryAfter != MaxRetryAfter || r.ShouldRetry == nil || !*r.ShouldRetry {
		t.Errorf("huge: %+v", r)
	}
	r = get("bad")
	if r.Status != 400 || len(r.BodyExcerpt) > ExcerptSize || !strings.HasPrefix(r.BodyExcerpt, "éé") || strings.ContainsRune(r.BodyExcerpt, '\uFFFD') {
		t.Errorf("bad: excerpt %q (%d bytes)", r.BodyExcerpt, len(r.BodyExcerpt))
	}
}

func TestGetErrors(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch strings.TrimPrefix(r.URL.Path, "/v1/transactions/") {
		case "slow":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "slowbody":
			w.WriteHeader(200)
			fmt.Fprint(w, `{"id":`)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "huge":
			chunk := bytes.Repeat([]byte(" "), 64<<10)
			fmt.Fprint(w, `{"id":"huge","pad":"`)
			for range 160 { // 10 MiB
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "garbage":
			fmt.Fprint(w, `{"id": "garbage", "amount_minor": 12`)
		case "incomplete":
			fmt.Fprint(w, `{"id":"incomplete","currency":"EUR"}`)
		case "fraction":
			fmt.Fprint(w, `{"id":"fraction","amount_minor":12.5,"currency":"EUR","status":"succeeded"}`)
		case "other":
			fmt.Fprint(w, `{"id":"someone-else","amount_minor":1,"currency":"EUR","status":"succeeded"}`)
		case "hugeerror":
			w.WriteHeader(502)
			for range 1000 {
				if _, err := w.Write(bytes.Repeat([]byte("x"), 64<<10)); err != nil {
					return
				}
			}
		}
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, func(c *Config) { c.Timeout = 300 * time.Millisecond })

	cases := []struct {
		id   string
		kind ErrorKind
	}{
		{"slow", KindTimeout},
		{"slowbody", KindTimeout},
		{"huge", KindBodyTooLarge},
		{"garbage", KindBadBody},
		{"incomplete", KindBadBody},
		{"fraction", KindBadBody},
		{"other", KindBadBody},
	}
	for _, tc := range cases {
		_, err := c.Get(t.Context(), Lookup{TransactionID: tc.id, IdempotencyKey: "k"})
		if KindOf(err) != tc.kind {
			t.Errorf("Get(%s) error = %v (kind %v), want kind %v", tc.id, err, KindOf(err), tc.kind)
		}
		if err != nil && strings.Contains(err.Error(), testToken) {
			t.Errorf("Get(%s) error contains the token: %v", tc.id, err)
		}
	}

	// A huge error body is not an error: the status decides.
	resp, err := c.Get(t.Context(), Lookup{TransactionID: "hugeerror", IdempotencyKey: "k"})
	if err != nil || resp.Status != 502 || len(resp.BodyExcerpt) != ExcerptSize {
		t.Errorf("hugeerror: %d %d-byte excerpt, %v", resp.Status, len(resp.BodyExcerpt), err)
	}

	// The caller's own cancellation is not the provider's fault.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Get(ctx, Lookup{TransactionID: "slow", IdempotencyKey: "k"}); KindOf(err) != KindCanceled || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v (kind %v)", err, KindOf(err))
	}
}

func TestGetConnectionError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	c := newClient(t, "http://"+addr, nil)
	_, err = c.Get(t.Context(), Lookup{TransactionID: "tx", IdempotencyKey: "k"})
	if KindOf(err) != KindConnection {
		t.Fatalf("error = %v (kind %v), want connection", err, KindOf(err))
	}
	if strings.Contains(err.Error(), testToken) {
		t.Errorf("error contains the token: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "ftp://x", "/relative", "http://user:" + testToken + "@host"} {
		_, err := New(Config{BaseURL: base, Token: testToken})
		if err == nil {
			t.Errorf("New(%q) succeeded", base)
			continue
		}
		if strings.Contains(err.Error(), testToken) {
			t.Errorf("New(%q) error leaks the secret: %v", base, err)
		}
	}
}

func TestSecretRedacted(t *testing.T) {
	t.Parallel()
	cfg := Config{BaseURL: "http://x", Token: testToken}
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, nil))
	logger.Info("config", "token", cfg.Token, "cfg", cfg)
	for _, s := range []string{buf.String(), fmt.Sprint(cfg), fmt.Sprintf("%+v %#v %v %s %q", cfg, cfg, cfg.Token, cfg.Token, cfg.Token)} {
		if strings.Contains(s, testToken) {
			t.Errorf("token leaked: %s", s)
		}
	}
	if cfg.Token.Reveal() != testToken {
		t.Error("Reveal lost the value")
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"  5 ", 5 * time.Second, true},
		{"3600", time.Hour, true},
		{"3601", MaxRetryAfter, true},
		{"99999999999999999999999", MaxRetryAfter, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"+3", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"Sat, 24 Oct 2026 12:00:30 GMT", 30 * time.Second, true},
		{"Saturday, 24-Oct-26 12:01:00 GMT", time.Minute, true},
		{"Sat Oct 24 12:00:10 2026", 10 * time.Second, true},
		{"Sat, 24 Oct 2026 11:00:00 GMT", 0, true},
		{"Sun, 25 Oct 2026 12:00:00 GMT", MaxRetryAfter, true},
		{"Sat, 24 Oct 2026 25:00:00 GMT", 0, false},
	}
	for _, tc := range cases {
		got, ok := ParseRetryAfter(tc.in, now)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}

func TestParseRetryAfterMs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"", 0, false},
		{"0", 0, true},
		{"40", 40 * time.Millisecond, true},
		{" 12.5 ", 12500 * time.Microsecond, true},
		{"3600000", MaxRetryAfter, true},
		{"1e9", 0, false},
		{"-1", 0, false},
		{"+3", 0, false},
		{"NaN", 0, false},
		{"Inf", 0, false},
		{"0x10", 0, false},
		{"soon", 0, false},
	} {
		got, ok := ParseRetryAfterMs(tc.in)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("ParseRetryAfterMs(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "Sat, 24 Oct 2026 12:00:30 GMT", "Saturday, 24-Oct-26 12:01:00 GMT", "Sat Oct 24 12:00:10 2026", "-5", "1e9", "\x00"} {
		f.Add(s, int64(1792843200))
	}
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		d, ok := ParseRetryAfter(v, time.Unix(unix, 0))
		if d < 0 || d > MaxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v outside [0, %v]", v, d, MaxRetryAfter)
		}
		if !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v with ok false", v, d)
		}
	})
}
