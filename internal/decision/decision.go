// Package decision decides what happens to an item after a provider call:
// ack it with an outcome, retry it later, dead-letter it, or stop consuming.
//
// It is pure: no I/O, no clock (the time is an input) and no hidden
// randomness (the random source is a parameter), so every row of the policy
// is table-tested.
package decision

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// Jitter is how a backoff delay is randomised.
type Jitter int

const (
	// JitterFull draws the delay uniformly from [0, d).
	JitterFull Jitter = iota
	// JitterEqual draws it from [d/2, d).
	JitterEqual
)

// String returns "full" or "equal".
func (j Jitter) String() string {
	switch j {
	case JitterFull:
		return "full"
	case JitterEqual:
		return "equal"
	default:
		return "Jitter(" + strconv.Itoa(int(j)) + ")"
	}
}

// ParseJitter parses "full" or "equal".
func ParseJitter(s string) (Jitter, error) {
	switch strings.ToLower(s) {
	case "full":
		return JitterFull, nil
	case "equal":
		return JitterEqual, nil
	}
	return 0, fmt.Errorf("parse jitter %q: want full or equal", s)
}

// Defaults of [Policy].
const (
	DefaultMaxAttempts      = 8
	DefaultBackoffBase      = time.Second
	DefaultBackoffCap       = 5 * time.Minute
	DefaultThrottleDeadline = 24 * time.Hour
)

// Policy is the retry policy. The zero value, after [Policy.WithDefaults], is
// the documented default.
type Policy struct {
	// MaxAttempts is the number of failing calls (5xx, timeouts, connection
	// errors, unreadable bodies) after which an item is dead-lettered; 429s do
	// not count. Defaults to 8.
	MaxAttempts int
	// BackoffBase is the backoff before the second attempt; it doubles per
	// failed attempt. Defaults to 1s.
	BackoffBase time.Duration
	// BackoffCap caps the backoff. Defaults to 5m.
	BackoffCap time.Duration
	// Jitter randomises the backoff. Defaults to JitterFull.
	Jitter Jitter
	// ThrottleDeadline bounds how long an item may keep being throttled,
	// measured from its first attempt; a 429 past it dead-letters the item.
	// Defaults to 24h.
	ThrottleDeadline time.Duration
}

// WithDefaults returns p with zero fields set to their defaults.
func (p Policy) WithDefaults() Policy {
	p.MaxAttempts = cmp.Or(p.MaxAttempts, DefaultMaxAttempts)
	p.BackoffBase = cmp.Or(p.BackoffBase, DefaultBackoffBase)
	p.BackoffCap = cmp.Or(p.BackoffCap, DefaultBackoffCap)
	p.ThrottleDeadline = cmp.Or(p.ThrottleDeadline, DefaultThrottleDeadline)
	return p
}

// Validate reports the first invalid field.
func (p Policy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("policy: MaxAttempts %d: want at least 1", p.MaxAttempts)
	case p.BackoffBase <= 0:
		return fmt.Errorf("policy: BackoffBase %v: want more than 0", p.BackoffBase)
	case p.BackoffCap < p.BackoffBase:
		return fmt.Errorf("policy: BackoffCap %v: want at least BackoffBase %v", p.BackoffCap, p.BackoffBase)
	case p.Jitter != JitterFull && p.Jitter != JitterEqual:
		return fmt.Errorf("policy: Jitter %v: want full or equal", p.Jitter)
	case p.ThrottleDeadline <= 0:
		return fmt.Errorf("policy: ThrottleDeadline %v: want more than 0", p.ThrottleDeadline)
	}
	return nil
}

// Rand returns a uniform number in [0, 1), like math/rand/v2's Float64.
// Pass rand.Float64 (safe for concurrent use) in production and a seeded
// generator's Float64 in tests.
type Rand func() float64

// Backoff returns the delay after the given failed attempt (1-based):
// min(BackoffCap, BackoffBase × 2^(attempt-1)), jittered. Attempts below 1
// count as 1.
func (p Policy) Backoff(attempt int, rnd Rand) time.Duration {
	d := p.ceiling(attempt)
	switch p.Jitter {
	case JitterEqual:
		half := d / 2
		return half + time.Duration(rnd()*float64(d-half))
	default:
		return time.Duration(rnd() * float64(d))
	}
}

// ceiling is the un-jittered backoff.
func (p Policy) ceiling(attempt int) time.Duration {
	attempt = max(attempt, 1)
	d := p.BackoffBase
	for i := 1; i < attempt && d < p.BackoffCap; i++ {
		d *= 2
	}
	return min(d, p.BackoffCap)
}

// Action is what to do with the item and its message.
type Action int

// Actions.
const (
	// Ack: the item reached its outcome; ack the message.
	Ack Action = iota + 1
	// Retry: reschedule the message after Delay.
	Retry
	// DeadLetter: give up on the item; Reason says why.
	DeadLetter
	// Stop: a configuration error (401/403); stop consuming, leave the
	// message and every other one queued, exit non-zero.
	Stop
)

// String returns ack, retry, dead_letter or stop.
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead_letter"
	case Stop:
		return "stop"
	default:
		return "Action(" + strconv.Itoa(int(a)) + ")"
	}
}

// Fields compared by [Compare].
const (
	FieldAmountMinor = "amount_minor"
	FieldCurrency    = "currency"
	FieldStatus      = "status"
)

// Difference is one field on which the provider disagrees with the expected
// record, with both values as text.
type Difference struct {
	Field    string `json:"field"`
	Expected string `json:"expected"`
	Provider string `json:"provider"`
}

// Compare returns the fields of expected and got that differ, in the order
// amount_minor, currency, status; nil when they agree. Comparison is exact.
func Compare(expected, got provider.Record) []Difference {
	var d []Difference
	if expected.AmountMinor != got.AmountMinor {
		d = append(d, Difference{FieldAmountMinor, strconv.FormatInt(expected.AmountMinor, 10), strconv.FormatInt(got.AmountMinor, 10)})
	}
	if expected.Currency != got.Currency {
		d = append(d, Difference{FieldCurrency, expected.Currency, got.Currency})
	}
	if expected.Status != got.Status {
		d = append(d, Difference{FieldStatus, expected.Status, got.Status})
	}
	return d
}

// Reasons, short machine words recorded with transitions. HTTP statuses
// without a name of their own are "http_<code>" (see [StatusReason]).
const (
	ReasonMatched          = "matched"
	ReasonMismatched       = "mismatched"
	ReasonMissing          = "missing"
	ReasonThrottled        = "throttled"
	ReasonThrottleDeadline = "throttle_deadline"
	ReasonMaxAttempts      = "max_attempts"
	ReasonTimeout          = "timeout"
	ReasonConnection       = "connection"
	ReasonBadBody          = "bad_body"
	ReasonBodyTooLarge     = "body_too_large"
	ReasonCanceled         = "canceled"
	// ReasonUnmappedStatus: the provider's status word is not in the
	// profile's status map; Detail starts with the word.
	ReasonUnmappedStatus = "unmapped_status"
	// ReasonLocked: the provider's object is busy (a profile's locked
	// class, such as Stripe's lock_timeout).
	ReasonLocked = "locked"
	// ReasonUnmappedAccount: the item's account is not in the profile's
	// account map; nothing was asked. Detail names the account.
	ReasonUnmappedAccount = "unmapped_account"
	// ReasonWrongAccount: the provider answered that the credentials are
	// for another mode or account than the object (a profile's
	// wrong_account class).
	ReasonWrongAccount = "wrong_account"
)

// StatusReason returns "http_<code>", e.g. http_503.
func StatusReason(status int) string { return "http_" + strconv.Itoa(status) }

// Input is everything the policy looks at.
type Input struct {
	// Expected is the payment as the payment file records it.
	Expected provider.Record
	// Response and Err are what provider.Client.Get returned.
	Response provider.Response
	Err      error
	// Attempt is the number of this call among the item's failure-counting
	// attempts, 1-based: 1 + the failures (not throttles) before it.
	Attempt int
	// Throttles is the number of 429s the item got before this call; it
	// drives the backoff of repeated 429s without Retry-After.
	Throttles int
	// FirstAttempt is when the item was first tried; the throttle deadline is
	// measured from it. Zero means Now.
	FirstAttempt time.Time
	// Now is the time of the decision.
	Now time.Time
}

// Decision is what to do after a call.
type Decision struct {
	Action Action
	// Outcome is the item's terminal state, set for Ack: ledger.Matched,
	// ledger.Mismatched or ledger.Missing.
	Outcome ledger.State
	// Delay is how long from Now to retry; set for Retry.
	Delay time.Duration
	// Penalty is how long the limiter should stop every worker (the
	// provider's Retry-After on a 429); 0 otherwise.
	Penalty time.Duration
	// Throttled is true for a 429 that is retried: lower the adaptive rate
	// and count a throttle, not an attempt.
	Throttled bool
	// CountsThrottle is true when the answer counts as a throttle of the
	// item (a 429, or an answer a profile classifies as throttle or
	// locked), whatever is done about it.
	CountsThrottle bool
	// CountsAttempt is true when the retry uses up one of MaxAttempts: carry
	// Attempt+1 with the retried message.
	CountsAttempt bool
	// Status is the HTTP status, 0 when no answer came.
	Status int
	// Reason is a short machine word: matched, mismatched, missing, throttled,
	// throttle_deadline, max_attempts, timeout, connection, bad_body,
	// body_too_large, canceled, http_<code>.
	Reason string
	// Detail is free text for humans: the last cause after max_attempts, a
	// body excerpt for permanent 4xx, the error for transport failures.
	Detail string
	// Differences lists the differing fields of a mismatch.
	Differences []Difference
}

// Decide applies the policy to one call's result. p must be valid (see
// [Policy.Validate]); rnd supplies the jitter.
//
//	2xx, valid body        → Ack matched | mismatched (with Differences)
//	404                    → Ack missing
//	429                    → Retry at max(Retry-After, backoff) + jitter, Penalty = Retry-After,
//	                         no attempt used; past ThrottleDeadline → DeadLetter throttle_deadline
//	5xx, timeout, connection error, unreadable or oversized 2xx body
//	                       → Retry with backoff, counting an attempt; at MaxAttempts →
//	                         DeadLetter max_attempts (Detail names the last cause)
//	401, 403               → Stop
//	other status           → DeadLetter http_<code> with a body excerpt
//	2xx, unmapped status   → DeadLetter unmapped_status, Detail the provider's word
//
// When one of the profile's error rules matched (Response.Class), its class
// decides instead of the status: missing → Ack missing; throttle → as a
// 429; locked → retried as a 429 (no attempt used, the throttle deadline
// applies) but without lowering the rate or a Penalty; retry → as a 5xx;
// permanent → DeadLetter; auth → Stop; wrong_account → Retry after a
// backoff without using an attempt (the answer is about the credentials,
// not the item; the consumer's circuit stops the calls). The rule's reason
// word, when it has one, replaces the default reason.
//
// An item whose account the profile's account map lacks was not asked
// about: DeadLetter unmapped_account, Detail naming the account.
//
// Stripe-Should-Retry, when present on an answer that is not 2xx, 401 or
// 403, overrides the status: "false" makes it permanent (DeadLetter with its
// own reason, or Ack missing for a 404), "true" makes it transient (Retry
// with backoff, counting an attempt; a 429 stays a throttle). A canceled
// call (the consumer shutting down) is retried at once without using an
// attempt.
func Decide(p Policy, in Input, rnd Rand) Decision {
	resp := in.Response
	d := Decision{Status: resp.Status, CountsThrottle: resp.Status == http.StatusTooManyRequests}
	if in.Err != nil {
		kind := provider.KindOf(in.Err)
		switch kind {
		case provider.KindUnmappedStatus:
			detail := resp.ProviderStatus
			var ue *profile.UnmappedStatusError
			if errors.As(in.Err, &ue) {
				detail = fmt.Sprintf("%s: not in the status map of profile %s; map it and redrive", ue.Status, ue.Profile)
			}
			return permanent(d, ReasonUnmappedStatus, detail)
		case provider.KindUnmappedAccount:
			var ue *profile.UnmappedAccountError
			detail := errDetail(in.Err)
			if errors.As(in.Err, &ue) && ue.MapFile != "" {
				detail = fmt.Sprintf("%s: add it to the map and redrive", ue.Error())
			}
			return permanent(d, ReasonUnmappedAccount, detail)
		case provider.KindCanceled:
			d.Action, d.Reason, d.Detail = Retry, ReasonCanceled, errDetail(in.Err)
			return d
		case provider.KindTimeout, provider.KindConnection, provider.KindBadBody, provider.KindBodyTooLarge:
			if kind == provider.KindBadBody || kind == provider.KindBodyTooLarge {
				if resp.ShouldRetry != nil && !*resp.ShouldRetry {
					return permanent(d, kind.String(), detailWithExcerpt(errDetail(in.Err), resp.BodyExcerpt))
				}
			}
			return transient(p, in, d, kind.String(), errDetail(in.Err), rnd)
		default:
			// Not from the client: treat as a connection failure.
			return transient(p, in, d, ReasonConnection, in.Err.Error(), rnd)
		}
	}

	if resp.Class != 0 {
		return decideClass(p, in, d, rnd)
	}
	status := resp.Status
	switch {
	case status >= 200 && status < 300:
		d.Action = Ack
		d.Differences = Compare(in.Expected, resp.Record)
		if len(d.Differences) == 0 {
			d.Outcome, d.Reason = ledger.Matched, ReasonMatched
		} else {
			d.Outcome, d.Reason = ledger.Mismatched, ReasonMismatched
		}
		return d
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		d.Action, d.Reason = Stop, StatusReason(status)
		d.Detail = detailWithExcerpt("the provider refused the credentials", resp.BodyExcerpt)
		return d
	}

	reason := StatusReason(status)
	if sr := resp.ShouldRetry; sr != nil {
		switch {
		case *sr && status != http.StatusTooManyRequests:
			return transient(p, in, d, reason, detailWithExcerpt("Stripe-Should-Retry: true", resp.BodyExcerpt), rnd)
		case !*sr && status != http.StatusNotFound:
			return permanent(d, reason, detailWithExcerpt("Stripe-Should-Retry: false", resp.BodyExcerpt))
		}
	}

	switch {
	case status == http.StatusNotFound:
		d.Action, d.Outcome, d.Reason = Ack, ledger.Missing, ReasonMissing
		return d
	case status == http.StatusTooManyRequests:
		return throttle(p, in, d, rnd)
	case status >= 500 && status < 600:
		return transient(p, in, d, reason, resp.BodyExcerpt, rnd)
	default:
		return permanent(d, reason, resp.BodyExcerpt)
	}
}

// decideClass follows the class of the profile's rule that matched.
func decideClass(p Policy, in Input, d Decision, rnd Rand) Decision {
	resp := in.Response
	reason := cmp.Or(resp.Reason, StatusReason(resp.Status))
	d.CountsThrottle = resp.Class == profile.ClassThrottle || resp.Class == profile.ClassLocked
	switch resp.Class {
	case profile.ClassMissing:
		d.Action, d.Outcome, d.Reason = Ack, ledger.Missing, ReasonMissing
		return d
	case profile.ClassThrottle, profile.ClassLocked:
		d = throttle(p, in, d, rnd)
		if d.Action == Retry {
			if resp.Class == profile.ClassLocked {
				d.Throttled, d.Penalty, d.Reason = false, 0, ReasonLocked
			}
			d.Reason = cmp.Or(resp.Reason, d.Reason)
		}
		return d
	case profile.ClassRetry:
		return transient(p, in, d, reason, resp.BodyExcerpt, rnd)
	case profile.ClassAuth:
		d.Action, d.Reason = Stop, reason
		d.Detail = detailWithExcerpt("the provider refused the credentials", resp.BodyExcerpt)
		return d
	case profile.ClassWrongAccount:
		d.Action, d.Reason = Retry, cmp.Or(resp.Reason, ReasonWrongAccount)
		d.Delay = p.Backoff(max(in.Attempt, 1), rnd)
		d.Detail = detailWithExcerpt("the credentials are for another mode or account than the object", resp.BodyExcerpt)
		return d
	default: // profile.ClassPermanent
		return permanent(d, reason, resp.BodyExcerpt)
	}
}

func permanent(d Decision, reason, detail string) Decision {
	d.Action, d.Reason, d.Detail = DeadLetter, reason, detail
	return d
}

// transient retries with backoff, or dead-letters at MaxAttempts.
func transient(p Policy, in Input, d Decision, cause, detail string, rnd Rand) Decision {
	attempt := max(in.Attempt, 1)
	if attempt >= p.MaxAttempts {
		d.Action, d.Reason = DeadLetter, ReasonMaxAttempts
		noun := "attempts"
		if attempt == 1 {
			noun = "attempt"
		}
		d.Detail = fmt.Sprintf("%d %s, last: %s", attempt, noun, cause)
		if detail != "" {
			d.Detail += ": " + detail
		}
		return d
	}
	d.Action, d.Reason, d.Detail = Retry, cause, detail
	d.CountsAttempt = true
	d.Delay = p.Backoff(attempt, rnd)
	return d
}

// throttle handles a 429.
func throttle(p Policy, in Input, d Decision, rnd Rand) Decision {
	resp := in.Response
	first := in.FirstAttempt
	if first.IsZero() {
		first = in.Now
	}
	if elapsed := in.Now.Sub(first); elapsed >= p.ThrottleDeadline {
		d.Action, d.Reason = DeadLetter, ReasonThrottleDeadline
		d.Detail = fmt.Sprintf("still throttled %v after the first attempt (deadline %v, %d throttles)",
			elapsed.Round(time.Second), p.ThrottleDeadline, in.Throttles+1)
		return d
	}
	// The backoff grows with the throttles, so that a provider that never
	// says Retry-After is still backed away from; the added jitter (up to one
	// BackoffBase) keeps the workers released by one Retry-After from all
	// arriving in the same instant.
	var retryAfter time.Duration
	if resp.HasRetryAfter {
		retryAfter = resp.RetryAfter
		d.Penalty = resp.RetryAfter
	}
	d.Action, d.Reason, d.Throttled = Retry, ReasonThrottled, true
	d.Delay = max(retryAfter, p.Backoff(in.Throttles+1, rnd)) + time.Duration(rnd()*float64(p.BackoffBase))
	if resp.HasRetryAfter {
		d.Detail = "Retry-After " + resp.RetryAfter.String()
	}
	return d
}

// errDetail is the text of a failed call for a transition's detail: the
// client's cause alone, since the reason already names the kind and the
// transition its transaction ("decode body: ...", not "get transaction
// \"tx\": bad_body: decode body: ..." after a reason bad_body).
func errDetail(err error) string {
	var e *provider.Error
	if errors.As(err, &e) && e.Err != nil {
		return e.Err.Error()
	}
	return err.Error()
}

func detailWithExcerpt(msg, excerpt string) string {
	if excerpt == "" {
		return msg
	}
	return msg + ": " + excerpt
}
