// Package profile describes a payment provider as data: how to ask it for one
// transaction (method, path template, query, headers, auth strategy) and how
// to read its answer (where the id, amount, currency and status are, the
// amount's format, the status words, which answers mean missing, throttled,
// retry, permanent or refused credentials).
//
// A profile is parsed strictly from JSON ([Parse], [Load]): an unknown key, a
// wrong type or an unknown strategy name is an [*Error] naming the file, the
// key and the line. The built-in profiles ([Builtin]) are such files,
// embedded. What a profile means is decided here and in package provider,
// never by the file: auth flows, amount arithmetic and error classes are Go.
//
// A [Profile] is immutable once parsed and safe for concurrent use. It holds
// no URL credentials and no secrets, only the names of the environment
// variables that carry them, so one profile can serve several providers
// (each with its own base URL and credentials).
package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// Class is what an error rule says an answer means.
type Class int

// Classes of [Rule]. The zero value means no rule matched: the answer is
// classified by its HTTP status alone.
const (
	// ClassMissing: the provider has no such transaction (an outcome).
	ClassMissing Class = iota + 1
	// ClassThrottle: a rate limit; retry after Retry-After or a backoff,
	// lower the shared rate, use no attempt.
	ClassThrottle
	// ClassLocked: the object is busy (Stripe's lock_timeout); retry after
	// a backoff, use no attempt, leave the shared rate alone.
	ClassLocked
	// ClassRetry: a transient failure; retry with backoff, using an attempt.
	ClassRetry
	// ClassPermanent: this item cannot be looked up; dead-letter it.
	ClassPermanent
	// ClassAuth: the credentials are refused; stop consuming.
	ClassAuth
)

var classNames = []string{"", "missing", "throttle", "locked", "retry", "permanent", "auth"}

// String returns the class's name in a profile file.
func (c Class) String() string {
	if c > 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// AmountFormat is how the provider writes an amount.
type AmountFormat int

// Amount formats.
const (
	// AmountMinor: an integer in minor units (cents): 1099 is 10.99 EUR.
	AmountMinor AmountFormat = iota + 1
	// AmountDecimal: a decimal in major units, "10.99"; converted with the
	// currency's exponent, exactly.
	AmountDecimal
	// AmountMilli: an integer in thousandths of the major unit: 10990 is
	// 10.99 EUR.
	AmountMilli
	// AmountUnitsNanos: an object {"units": "10", "nanos": 990000000}
	// (google.type.Money).
	AmountUnitsNanos
)

var amountFormatNames = []string{"", "minor", "decimal", "milli", "units_nanos"}

// String returns the format's name in a profile file.
func (f AmountFormat) String() string {
	if f > 0 && int(f) < len(amountFormatNames) {
		return amountFormatNames[f]
	}
	return "AmountFormat(" + strconv.Itoa(int(f)) + ")"
}

// AuthType is an authentication strategy.
type AuthType int

// Auth strategies.
const (
	// AuthNone sends no credentials.
	AuthNone AuthType = iota + 1
	// AuthBearer sends "Authorization: Bearer <token>".
	AuthBearer
	// AuthBasic sends HTTP basic authentication.
	AuthBasic
	// AuthOAuth2ClientCredentials gets an access token from TokenURL with
	// the client credentials grant, caches it until shortly before it
	// expires, and sends it as a bearer token.
	AuthOAuth2ClientCredentials
)

var authTypeNames = []string{"", "none", "bearer", "basic", "oauth2_client_credentials"}

// String returns the strategy's name in a profile file.
func (a AuthType) String() string {
	if a > 0 && int(a) < len(authTypeNames) {
		return authTypeNames[a]
	}
	return "AuthType(" + strconv.Itoa(int(a)) + ")"
}

// Profile is a parsed provider profile. Build one with [Parse], [Load] or
// [Builtin]; the zero value is not usable.
type Profile struct {
	// Name is the profile's name: lower-case letters, digits, _ and -.
	Name string
	// Description is one line for `reconcile provider profiles`.
	Description string
	// Source is where the profile came from: "built-in" or a file name.
	Source string
	// BaseURL is the provider's base URL when none is configured; empty
	// when the profile has no default.
	BaseURL string
	// Request is how one transaction is asked for.
	Request Request
	// Auth is the authentication strategy.
	Auth Auth
	// Record says where the fields of the answer are.
	Record RecordPaths
	// StatusMap maps the provider's status words to the ledger's
	// vocabulary. Nil means the provider speaks the vocabulary itself and
	// its words are taken as they are (the built-in reconcile contract).
	StatusMap map[string]string
	// Exponents overrides the ISO 4217 exponent of currencies, for decimal,
	// milli and units_nanos amounts.
	Exponents map[string]int
	// Rules classify answers, tried in order; the first that matches wins.
	Rules []Rule
	// Hints names the response headers that carry retry and rate-limit
	// hints.
	Hints Hints
	// needsBody is true when a rule looks into the body of an answer.
	needsBody bool
}

// Request is the lookup request of a profile.
type Request struct {
	// Method is GET or POST.
	Method string
	// Path is the path template below the base URL; "{id}" is replaced by
	// the path-escaped transaction id.
	Path string
	// Query are query parameters, sorted by name; "{id}" in a value is
	// replaced by the id.
	Query []Pair
	// Headers are extra request headers, sorted by name.
	Headers []Pair
	// Body, when not empty, is sent as a JSON body; "{id}" is replaced by
	// the JSON-escaped id (without quotes).
	Body string
	// IdempotencyHeader is the header that carries the item's idempotency
	// key; empty sends none.
	IdempotencyHeader string
}

// Pair is a name and a value.
type Pair struct{ Name, Value string }

// Auth is an authentication strategy and the environment variables its
// secrets come from (read by the command, never by this package).
type Auth struct {
	Type AuthType
	// TokenEnv holds the bearer token (bearer).
	TokenEnv string
	// Optional, for bearer, sends no Authorization header when the token is
	// empty instead of refusing to start.
	Optional bool
	// UsernameEnv and PasswordEnv hold the basic credentials; an empty
	// PasswordEnv sends an empty password (Stripe's key-as-username form).
	UsernameEnv, PasswordEnv string
	// ClientIDEnv and ClientSecretEnv hold the OAuth2 client credentials.
	ClientIDEnv, ClientSecretEnv string
	// TokenURL is the OAuth2 token endpoint, absolute or relative to the
	// base URL.
	TokenURL string
	// Scopes are requested with the token.
	Scopes []string
	// InParams sends the client credentials in the form body instead of
	// basic authentication.
	InParams bool
}

// Env returns the names of the environment variables the strategy reads.
func (a Auth) Env() []string {
	var out []string
	for _, v := range []string{a.TokenEnv, a.UsernameEnv, a.PasswordEnv, a.ClientIDEnv, a.ClientSecretEnv} {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}

// RecordPaths locate the fields of a transaction in an answer. A path is
// dot-separated keys; a number selects an array element (errors.0.code).
type RecordPaths struct {
	ID, Amount, Currency, Status string
	// AmountFormat is how the amount is written.
	AmountFormat AmountFormat
	// UpperCurrency upper-cases the currency (Stripe answers "usd").
	UpperCurrency bool
}

// Rule classifies an answer: it matches when the HTTP status matches and,
// when set, the body condition holds.
type Rule struct {
	// Status is the HTTP status to match: an exact code (404), a class
	// (400, 500 with StatusClass set: "4xx", "5xx"), or 0 for any.
	Status int
	// StatusClass makes Status match its whole hundred.
	StatusClass bool
	// Path, when set, must be present in the JSON body and not null; with
	// Value, it must equal Value.
	Path string
	// Value is the JSON text the value at Path must equal (a string's
	// quotes included); empty means any value.
	Value string
	// Contains, when set, must occur in the body (for answers that are not
	// JSON, such as "too many requests").
	Contains string
	// Class is what a matching answer means.
	Class Class
	// Reason is the reason word recorded for the answer; empty means the
	// default (http_<code>, missing, throttled).
	Reason string
	// Line is the rule's line in its file.
	Line int
}

// Hints are the response headers that carry hints.
type Hints struct {
	// RetryAfter carries the delay before retrying (seconds or an
	// HTTP-date). Defaults to Retry-After.
	RetryAfter string
	// ShouldRetry carries "true" or "false" overriding the status's class
	// (Stripe-Should-Retry); empty: none.
	ShouldRetry string
	// Remaining, Reset and Limit carry rate-limit counters under
	// provider-specific names; they are handed to the limiter as
	// X-RateLimit-Remaining, -Reset and -Limit. Empty: none.
	Remaining, Reset, Limit string
}

// NeedsBody reports whether a rule looks into the body of an answer, so the
// client must read error bodies whole, not only an excerpt.
func (p *Profile) NeedsBody() bool { return p.needsBody }

// Error is a problem in a profile file: the file, the line and the key at
// fault (a dotted path such as request.method; empty for the file as a
// whole).
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}
