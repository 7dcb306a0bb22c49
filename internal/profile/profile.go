// Package profile describes a payment provider as data: how to ask it for one
// transaction (method, path template, query, headers, auth strategy) and how
// to read its answer (where the id, amount, currency and status are, the
// amount's format, the status words and the rules that derive a status from
// several fields, which answers mean missing, throttled, retry, permanent,
// refused credentials or the wrong account). A provider that keeps refunds
// and disputes as objects of their own has a request and a reading for each
// kind ([Object]).
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
	// ClassWrongAccount: the answer says the credentials belong to another
	// mode or account than the object (Stripe's test key asking for a live
	// object): nothing can be found with them, so calls stop as for an
	// outage instead of recording the night as missing.
	ClassWrongAccount
)

var classNames = []string{"", "missing", "throttle", "locked", "retry", "permanent", "auth", "wrong_account"}

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
	// Payment is how a payment is asked for and read: the file's top-level
	// request, record, status_map and status_rules. It also serves every
	// kind of row the profile has no object of its own for.
	Payment Object
	// Kinds holds the other kinds of object the provider keeps (refunds,
	// disputes), each with its own request, by kind (payments.KindRefund,
	// payments.KindDispute). A kind not in it uses Payment.
	Kinds map[string]*Object
	// List is how the provider lists its payments by time, for list mode;
	// nil when the profile has no list request.
	List *List
	// Auth is the authentication strategy.
	Auth Auth
	// Account says what {account} in a request stands for.
	Account Account
	// Exponents is the number of decimal places of the provider's minor
	// units where they depart from ISO 4217 (Stripe's ISK is two-decimal),
	// applied to minor amounts.
	Exponents map[string]int
	// Rules classify answers, tried in order; the first that matches wins.
	Rules []Rule
	// Hints names the response headers that carry retry and rate-limit
	// hints.
	Hints Hints
	// StopAfterNotFound is how many distinct first items of a run must all
	// be answered "not found" in a shape that is not the provider's own
	// not-found body (no missing rule that looks into the body matched)
	// before calls stop as for an outage: a wrong base URL, not a night of
	// missing payments. 0 turns the rule off. Defaults to 20.
	StopAfterNotFound int
	// needsBody is true when a rule looks into the body of an answer.
	needsBody bool
}

// DefaultStopAfterNotFound is Profile.StopAfterNotFound's default: twenty
// distinct items all answered with a 404 that is not the provider's own
// not-found body. A real night's first twenty payments are never all
// unknown to the provider (its missing rate is a few percent at most), and
// twenty calls cost seconds at any provider's limit.
const DefaultStopAfterNotFound = 20

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
