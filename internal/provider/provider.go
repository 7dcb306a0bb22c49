// Package provider is the HTTP client of the payment provider's transaction
// lookup: GET {base}/v1/transactions/{id} with a bearer token, an
// Idempotency-Key, a connect and an overall timeout and a response size limit.
//
// The client reports what the provider said (status, record, Retry-After,
// Stripe-Should-Retry, rate-limit headers, a body excerpt) and classifies
// failures into [ErrorKind]s; deciding what to do about an answer belongs to
// package decision.
package provider

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Secret is a credential. Its String, GoString, Format and LogValue forms are
// redacted, so it can be logged or printed by mistake without leaking.
type Secret string

const redacted = "[redacted]"

// String returns "[redacted]", or "" when the secret is empty.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return strconv.Quote(s.String()) }

// LogValue redacts the secret in slog output.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText redacts the secret in JSON and other text encodings.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the secret itself; call it only where the value is sent.
func (s Secret) Reveal() string { return string(s) }

// Defaults of [Config].
const (
	DefaultConnectTimeout = 5 * time.Second
	DefaultTimeout        = 10 * time.Second
	DefaultMaxBody        = 1 << 20
	DefaultUserAgent      = "reconcile"
	// MaxRetryAfter is the longest Retry-After honoured; longer values are
	// clamped to it.
	MaxRetryAfter = time.Hour
	// ExcerptSize is the largest body excerpt kept in a [Response].
	ExcerptSize = 256
)

// Config configures a [Client].
type Config struct {
	// BaseURL is the provider's base URL, e.g. https://provider.example/api.
	// Required; must be http or https.
	BaseURL string
	// Token is sent as "Authorization: Bearer <token>" when not empty. It never
	// appears in logs or errors. Defaults to no Authorization header.
	Token Secret
	// HTTPClient sends the requests. When set, ConnectTimeout and
	// InsecureSkipVerify are ignored (they configure the transport of the
	// client built otherwise). Defaults to a client of its own.
	HTTPClient *http.Client
	// ConnectTimeout bounds dialling and the TLS handshake. Defaults to 5s.
	ConnectTimeout time.Duration
	// Timeout bounds a whole call, from dialling to the end of the body.
	// Defaults to 10s.
	Timeout time.Duration
	// MaxBody is the largest response body read, in bytes; a longer body is an
	// error of kind [KindBodyTooLarge]. Defaults to 1 MiB.
	MaxBody int64
	// InsecureSkipVerify turns off TLS certificate verification (for trials
	// against a self-signed simulator only). Defaults to false: verify.
	InsecureSkipVerify bool
	// UserAgent is the User-Agent header. Defaults to "reconcile".
	UserAgent string
}

func (c Config) withDefaults() Config {
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.MaxBody = cmp.Or(c.MaxBody, DefaultMaxBody)
	c.UserAgent = cmp.Or(c.UserAgent, DefaultUserAgent)
	return c
}

func (c Config) validate() (*url.URL, error) {
	if c.BaseURL == "" {
		return nil, errors.New("provider config: BaseURL is required")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider config: BaseURL %q: want an absolute http or https URL", redactURL(c.BaseURL))
	}
	if u.User != nil {
		return nil, fmt.Errorf("provider config: BaseURL %q: credentials belong in Token, not in the URL", u.Redacted())
	}
	if c.ConnectTimeout < 0 || c.Timeout < 0 || c.MaxBody < 0 {
		return nil, errors.New("provider config: ConnectTimeout, Timeout and MaxBody must not be negative")
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

// Client calls the provider. It is safe for concurrent use.
type Client struct {
	cfg    Config
	base   string // BaseURL without a trailing slash
	client *http.Client
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	u, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	hc := cfg.HTTPClient
	if hc == nil {
		dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
		hc = &http.Client{
			Transport: &http.Transport{
				Proxy:                 http.ProxyFromEnvironment,
				DialContext:           dialer.DialContext,
				TLSHandshakeTimeout:   cfg.ConnectTimeout,
				TLSClientConfig:       &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify}, //nolint:gosec // opt-in, off by default
				MaxIdleConns:          256,
				MaxIdleConnsPerHost:   256,
				IdleConnTimeout:       90 * time.Second,
				ExpectContinueTimeout: time.Second,
				ForceAttemptHTTP2:     true,
			},
			// An API that redirects is misconfigured; following would also drop
			// the Authorization header on another host.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{cfg: cfg, base: strings.TrimRight(u.String(), "/"), client: hc}, nil
}

// BaseURL returns the configured base URL (it never carries credentials).
func (c *Client) BaseURL() string { return c.base }

// Record is the provider's view of a transaction.
type Record struct {
	ID          string `json:"id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	Status      string `json:"status"`
}

// Response is what the provider answered. Fields not applicable to a call are
// zero.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Record is the parsed body; set only for a 2xx answer with a valid body.
	Record Record
	// RetryAfter is the parsed Retry-After header, clamped to
	// [0, MaxRetryAfter]; HasRetryAfter reports whether the header was present
	// and well-formed.
	RetryAfter    time.Duration
	HasRetryAfter bool
	// ShouldRetry is the Stripe-Should-Retry header: nil when absent or not
	// "true"/"false".
	ShouldRetry *bool
	// Header is the full response header (rate-limit hints live there).
	Header http.Header
	// BodyExcerpt is the start of the body, at most ExcerptSize bytes, cut at
	// a UTF-8 boundary, for dead-letter reasons.
	BodyExcerpt string
}

// ErrorKind classifies a failed call so that the decision policy can tell
// transient from permanent failures.
type ErrorKind int

// Kinds of [Error].
const (
	// KindConnection: the request could not be sent or the answer not read
	// (DNS, refused, reset, TLS, protocol errors). Transient.
	KindConnection ErrorKind = iota + 1
	// KindTimeout: Config.Timeout or ConnectTimeout expired. Transient.
	KindTimeout
	// KindCanceled: the caller's context ended; says nothing about the
	// provider.
	KindCanceled
	// KindBodyTooLarge: the body exceeded Config.MaxBody.
	KindBodyTooLarge
	// KindBadBody: a 2xx answer whose body is not a valid record.
	KindBadBody
)

// String returns the kind as a short machine word (connection, timeout,
// canceled, body_too_large, bad_body).
func (k ErrorKind) String() string {
	switch k {
	case KindConnection:
		return "connection"
	case KindTimeout:
		return "timeout"
	case KindCanceled:
		return "canceled"
	case KindBodyTooLarge:
		return "body_too_large"
	case KindBadBody:
		return "bad_body"
	default:
		return "unknown"
	}
}

// Error is a failed call. The token never appears in it.
type Error struct {
	Kind          ErrorKind
	TransactionID string
	Err           error
}

func (e *Error) Error() string {
	return fmt.Sprintf("get transaction %q: %s: %v", e.TransactionID, e.Kind, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err when it is (or wraps) an [*Error], else 0.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// Get looks up one transaction. Every call carries idempotencyKey (use the
// same key on every retry of an item).
//
// A non-2xx answer is not an error: it is returned in Response.Status for the
// caller to decide. The error is non-nil, an [*Error], when no answer came
// (connection, timeout, canceled) or a 2xx body was unreadable (bad body, body
// too large); in the latter cases Response still carries the status and
// headers.
func (c *Client) Get(ctx context.Context, transactionID, idempotencyKey string) (Response, error) {
	fail := func(kind ErrorKind, err error) error {
		return &Error{Kind: kind, TransactionID: transactionID, Err: err}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/transactions/"+url.PathEscape(transactionID), nil)
	if err != nil {
		return Response{}, fail(KindConnection, errors.New("build request"))
	}
	if c.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token.Reveal())
	}
	req.Header.Set("Idempotency-Key", idempotencyKey)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)

	resp, err := c.client.Do(req)
	if err != nil {
		return Response{}, fail(c.classify(parent, ctx, err), stripURL(err))
	}
	defer resp.Body.Close()

	out := Response{Status: resp.StatusCode, Header: resp.Header}
	out.RetryAfter, out.HasRetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("Stripe-Should-Retry"))) {
	case "true":
		out.ShouldRetry = new(true)
	case "false":
		out.ShouldRetry = new(false)
	}

	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if !ok {
		// Only an excerpt matters; drain a bounded amount so that the
		// connection can be reused, then let Close drop the rest.
		buf := make([]byte, ExcerptSize)
		n, err := io.ReadFull(resp.Body, buf)
		out.BodyExcerpt = excerpt(buf[:n])
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, c.cfg.MaxBody))
		}
		return out, nil
	}

	body, err := io.ReadAll(io.LimitReader(resp.Body, c.cfg.MaxBody+1))
	out.BodyExcerpt = excerpt(body)
	if err != nil {
		return out, fail(c.classify(parent, ctx, err), fmt.Errorf("read body: %w", stripURL(err)))
	}
	if int64(len(body)) > c.cfg.MaxBody {
		return out, fail(KindBodyTooLarge, fmt.Errorf("body exceeds %d bytes", c.cfg.MaxBody))
	}
	rec, err := parseRecord(body)
	if err != nil {
		return out, fail(KindBadBody, err)
	}
	if rec.ID != transactionID {
		return out, fail(KindBadBody, fmt.Errorf("body is for transaction %q", rec.ID))
	}
	out.Record = rec
	return out, nil
}

// classify tells a timeout of the call from the caller giving up and from
// connection failures.
func (c *Client) classify(parent, ctx context.Context, err error) ErrorKind {
	switch {
	case parent.Err() != nil:
		return KindCanceled
	case ctx.Err() != nil:
		return KindTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return KindTimeout
	}
	return KindConnection
}

// stripURL drops the *url.Error wrapper (its message repeats the method and
// URL) and keeps the cause.
func stripURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// parseRecord decodes a record, requiring all four fields; unknown fields are
// ignored.
func parseRecord(body []byte) (Record, error) {
	var raw struct {
		ID          *string      `json:"id"`
		AmountMinor *json.Number `json:"amount_minor"`
		Currency    *string      `json:"currency"`
		Status      *string      `json:"status"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Record{}, fmt.Errorf("decode body: %w", err)
	}
	if dec.More() {
		return Record{}, errors.New("decode body: trailing data after the record")
	}
	var missing []string
	if raw.ID == nil || *raw.ID == "" {
		missing = append(missing, "id")
	}
	if raw.AmountMinor == nil {
		missing = append(missing, "amount_minor")
	}
	if raw.Currency == nil || *raw.Currency == "" {
		missing = append(missing, "currency")
	}
	if raw.Status == nil || *raw.Status == "" {
		missing = append(missing, "status")
	}
	if len(missing) > 0 {
		return Record{}, fmt.Errorf("decode body: missing %s", strings.Join(missing, ", "))
	}
	amount, err := strconv.ParseInt(raw.AmountMinor.String(), 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("decode body: amount_minor %s is not an integer", raw.AmountMinor.String())
	}
	return Record{ID: *raw.ID, AmountMinor: amount, Currency: *raw.Currency, Status: *raw.Status}, nil
}

// excerpt returns up to ExcerptSize bytes of b, cut at a rune boundary, with
// invalid UTF-8 replaced.
func excerpt(b []byte) string {
	if len(b) > ExcerptSize {
		b = b[:ExcerptSize]
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// ParseRetryAfter parses a Retry-After value in either RFC 9110 form:
// delay-seconds ("120") or an HTTP-date ("Fri, 31 Dec 1999 23:59:59 GMT",
// and the obsolete RFC 850 and asctime forms), relative to now. The result is
// clamped to [0, MaxRetryAfter]: a date in the past is 0, a huge delay is
// MaxRetryAfter. ok is false when v is empty or malformed (negative numbers,
// fractions, junk), which callers treat as no Retry-After.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseUint(v, 10, 64)
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true // all digits, only too large
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now)
	return min(max(d, 0), MaxRetryAfter), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
