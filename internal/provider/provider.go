// Package provider is the HTTP client of the payment provider's transaction
// lookup, shaped by a [profile.Profile]: by default the built-in contract
// (GET {base}/v1/transactions/{id} with a bearer token and an
// Idempotency-Key), or Stripe's, PayPal's, Square's or a profile file's. It
// carries out the profile's auth strategy (bearer, basic, OAuth2 client
// credentials with a cached token), a connect and an overall timeout and a
// response size limit.
//
// The client reports what the provider said (status, record in the ledger's
// terms, the class of a matching error rule, Retry-After, Stripe-Should-Retry,
// rate-limit headers, a body excerpt) and classifies failures into
// [ErrorKind]s; deciding what to do about an answer belongs to package
// decision.
package provider

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/reconcile/reconcile/internal/profile"
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
	// BaseURL is the provider's base URL, e.g. https://provider.example/api;
	// must be http or https. Defaults to the profile's base URL; required
	// when the profile has none.
	BaseURL string
	// Profile says how to ask and how to read the answer. Defaults to the
	// built-in reconcile contract.
	Profile *profile.Profile
	// Token is the bearer token of the bearer strategy. Required unless the
	// profile's bearer auth is optional, where empty sends no Authorization
	// header (the built-in contract's default).
	Token Secret
	// Username and Password are the basic strategy's credentials; an empty
	// Password is sent as such.
	Username, Password Secret
	// ClientID and ClientSecret are the OAuth2 client credentials; both are
	// required by that strategy.
	ClientID, ClientSecret Secret
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
		return nil, fmt.Errorf("provider config: BaseURL is required (profile %s has no default)", c.Profile.Name)
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
	if err := checkCredentials(c); err != nil {
		return nil, err
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
	cfg     Config
	profile *profile.Profile
	base    string // BaseURL without a trailing slash
	client  *http.Client
	oauth   *oauthSource // nil unless the profile's auth is OAuth2
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if cfg.Profile == nil {
		cfg.Profile, _ = profile.Builtin(profile.DefaultName)
	}
	cfg.BaseURL = cmp.Or(cfg.BaseURL, cfg.Profile.BaseURL)
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
	c := &Client{cfg: cfg, profile: cfg.Profile, base: strings.TrimRight(u.String(), "/"), client: hc}
	if cfg.Profile.Auth.Type == profile.AuthOAuth2ClientCredentials {
		if c.oauth, err = newOAuthSource(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// BaseURL returns the configured base URL (it never carries credentials).
func (c *Client) BaseURL() string { return c.base }

// Profile returns the client's profile.
func (c *Client) Profile() *profile.Profile { return c.profile }

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
	// Record is the parsed body in the ledger's terms; set only for a 2xx
	// answer with a valid body that no error rule matched.
	Record Record
	// ProviderStatus is the provider's own status word of Record (the same
	// as Record.Status for a profile without a status map); also set with
	// an error of kind [KindUnmappedStatus].
	ProviderStatus string
	// Kind is the kind of object asked for (payment, refund, dispute): the
	// item's, or the payment object's when the profile has none of its
	// own for the item's kind.
	Kind string
	// Rule names the profile's status rule that decided Record's status or
	// amount (status_rules[0]); empty when none held.
	Rule string
	// Class is the class of the profile's first error rule that matched the
	// answer; 0 when none did and the status alone decides. Reason is the
	// rule's reason word (empty for the default).
	Class  profile.Class
	Reason string
	// OwnNotFound is true when the rule that matched is a missing rule
	// that looks into the body (its path or text): the provider itself
	// said it has no such object, in its own words. A 404 that no such
	// rule recognises could as well be a wrong base URL's route-not-found
	// page.
	OwnNotFound bool
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
	// KindUnmappedStatus: a valid record whose status word the profile's
	// status map does not know (Response.ProviderStatus).
	KindUnmappedStatus
	// KindUnmappedAccount: the item's account is not in the profile's
	// account map; nothing was asked.
	KindUnmappedAccount
)

// String returns the kind as a short machine word (connection, timeout,
// canceled, body_too_large, bad_body, unmapped_status, unmapped_account).
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
	case KindUnmappedStatus:
		return "unmapped_status"
	case KindUnmappedAccount:
		return "unmapped_account"
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

// Lookup is one item to ask the provider about.
type Lookup struct {
	// TransactionID is the id asked for.
	TransactionID string
	// IdempotencyKey goes in the profile's idempotency header, when it has
	// one; use the same key on every retry of an item.
	IdempotencyKey string
	// Kind is the row's kind as its file states it (payment, refund,
	// dispute); empty: the profile decides by the id (see
	// [profile.Profile.KindOf]).
	Kind string
	// AccountID is the item's account, for {account} in the request.
	AccountID string
}

// Get looks up one transaction: the profile's object of the item's kind,
// asked with its request (a refund at the refund endpoint), read in the
// ledger's terms.
//
// A non-2xx answer is not an error: it is returned in Response.Status (and
// Response.Class when an error rule matched) for the caller to decide; so is
// a 2xx answer that a rule classifies (a GraphQL error). The error is
// non-nil, an [*Error], when no answer came (connection, timeout, canceled)
// or a 2xx body was unreadable (bad body, body too large) or its status
// unmapped; in the latter cases Response still carries the status and
// headers. With OAuth2, a 401 makes the client fetch a new access token and
// call once more before it answers the 401. An item whose account the
// profile's account map lacks is not asked about: the error is of kind
// [KindUnmappedAccount].
func (c *Client) Get(ctx context.Context, l Lookup) (Response, error) {
	resp, _, err := c.call(ctx, l, nil)
	return resp, err
}

// call makes the lookup, retrying once after a 401 with a fresh OAuth2
// token. ex, when not nil, receives the request and the whole body.
func (c *Client) call(ctx context.Context, l Lookup, ex *Exchange) (Response, []byte, error) {
	o := c.profile.ObjectFor(c.profile.KindOf(l.TransactionID, l.Kind))
	resp, body, used, err := c.once(ctx, o, l, ex)
	if err == nil && resp.Status == http.StatusUnauthorized && c.oauth != nil && used != "" {
		c.oauth.invalidate(used)
		resp, body, _, err = c.once(ctx, o, l, ex)
	}
	return resp, body, err
}

// once makes one lookup of object o. used is the OAuth2 access token sent,
// if any.
func (c *Client) once(ctx context.Context, o *profile.Object, l Lookup, ex *Exchange) (resp Response, body []byte, used string, err error) {
	transactionID := l.TransactionID
	fail := func(kind ErrorKind, err error) error {
		return &Error{Kind: kind, TransactionID: transactionID, Err: err}
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := c.newRequest(ctx, &o.Request, l)
	var unmapped *profile.UnmappedAccountError
	switch {
	case errors.As(err, &unmapped):
		return Response{Kind: o.Kind}, nil, "", fail(KindUnmappedAccount, err)
	case err != nil:
		return Response{Kind: o.Kind}, nil, "", fail(KindConnection, errors.New("build request"))
	}
	used, tokResp, err := c.authorize(ctx, req)
	if ex != nil {
		ex.record(req, o.Request.Body != "")
	}
	if err != nil {
		if parent.Err() != nil {
			return Response{}, nil, "", fail(KindCanceled, err)
		}
		return Response{}, nil, "", fail(KindConnection, err)
	}
	if tokResp != nil {
		// The token endpoint refused the client credentials.
		return *tokResp, []byte(tokResp.BodyExcerpt), "", nil
	}

	hresp, err := c.client.Do(req)
	if err != nil {
		return Response{}, nil, used, fail(c.classify(parent, ctx, err), stripURL(err))
	}
	defer hresp.Body.Close()

	h := c.profile.Hints
	out := Response{Status: hresp.StatusCode, Header: hresp.Header, Kind: o.Kind}
	out.RetryAfter, out.HasRetryAfter = ParseRetryAfter(hresp.Header.Get(h.RetryAfter), time.Now())
	if d, ok := ParseRetryAfterMs(hresp.Header.Get("Retry-After-Ms")); ok {
		// The exact wait, where the provider gives one, wins over the
		// whole seconds of Retry-After.
		out.RetryAfter, out.HasRetryAfter = d, true
	}
	if h.ShouldRetry != "" {
		switch strings.ToLower(strings.TrimSpace(hresp.Header.Get(h.ShouldRetry))) {
		case "true":
			out.ShouldRetry = new(true)
		case "false":
			out.ShouldRetry = new(false)
		}
	}
	if h.Remaining != "" || h.Reset != "" || h.Limit != "" {
		out.Header = renameHints(hresp.Header, h)
	}

	ok := hresp.StatusCode >= 200 && hresp.StatusCode < 300
	if !ok && !c.profile.NeedsBody() && ex == nil {
		// Only an excerpt matters; drain a bounded amount so that the
		// connection can be reused, then let Close drop the rest.
		buf := make([]byte, ExcerptSize)
		n, err := io.ReadFull(hresp.Body, buf)
		out.BodyExcerpt = excerpt(buf[:n])
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(hresp.Body, c.cfg.MaxBody))
		}
		c.classifyAnswer(&out, buf[:n])
		return out, buf[:n], used, nil
	}

	body, err = io.ReadAll(io.LimitReader(hresp.Body, c.cfg.MaxBody+1))
	out.BodyExcerpt = excerpt(body)
	if err != nil {
		if !ok {
			return out, body, used, nil
		}
		return out, body, used, fail(c.classify(parent, ctx, err), fmt.Errorf("read body: %w", stripURL(err)))
	}
	if int64(len(body)) > c.cfg.MaxBody {
		body = body[:c.cfg.MaxBody]
		if !ok {
			c.classifyAnswer(&out, body)
			return out, body, used, nil
		}
		return out, body, used, fail(KindBodyTooLarge, fmt.Errorf("body exceeds %d bytes", c.cfg.MaxBody))
	}
	if c.classifyAnswer(&out, body); !ok || out.Class != 0 {
		return out, body, used, nil
	}
	rec, err := c.profile.Extract(o, body)
	var unmappedStatus *profile.UnmappedStatusError
	switch {
	case errors.As(err, &unmappedStatus):
		out.ProviderStatus = rec.ProviderStatus
		out.Record = Record{ID: rec.ID, AmountMinor: rec.AmountMinor, Currency: rec.Currency}
		return out, body, used, fail(KindUnmappedStatus, err)
	case err != nil:
		return out, body, used, fail(KindBadBody, fmt.Errorf("decode body: %w", err))
	case rec.ID != transactionID:
		return out, body, used, fail(KindBadBody, fmt.Errorf("body is for transaction %q", rec.ID))
	}
	out.Record = Record{ID: rec.ID, AmountMinor: rec.AmountMinor, Currency: rec.Currency, Status: rec.Status}
	out.ProviderStatus, out.Rule = rec.ProviderStatus, rec.Rule
	return out, body, used, nil
}

// classifyAnswer applies the profile's error rules.
func (c *Client) classifyAnswer(out *Response, body []byte) {
	if r := c.profile.Classify(out.Status, body); r != nil {
		out.Class, out.Reason = r.Class, r.Reason
		out.OwnNotFound = r.Class == profile.ClassMissing && r.LooksAtBody()
	}
}

// renameHints returns a copy of h with the profile's rate-limit headers
// also under the names the limiter reads (X-RateLimit-*).
func renameHints(h http.Header, hints profile.Hints) http.Header {
	out := h.Clone()
	for _, m := range []struct{ from, to string }{{hints.Remaining, "X-RateLimit-Remaining"}, {hints.Reset, "X-RateLimit-Reset"},
		{hints.Limit, "X-RateLimit-Limit"}} {
		if v := h.Values(m.from); m.from != "" && len(v) > 0 {
			out[http.CanonicalHeaderKey(m.to)] = v
		}
	}
	return out
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

// ParseRetryAfterMs parses Retry-After-Ms, the wait in milliseconds with
// decimals that the OpenAI and Anthropic APIs send beside Retry-After (and
// their client libraries read first): a non-negative decimal, clamped to
// MaxRetryAfter. ok is false when v is empty or malformed.
func ParseRetryAfterMs(v string) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 32 || strings.ContainsAny(v, "+-eExXpP_") {
		return 0, false
	}
	ms, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(ms) || math.IsInf(ms, 0) {
		return 0, false
	}
	if ms >= float64(MaxRetryAfter/time.Millisecond) {
		return MaxRetryAfter, true
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
