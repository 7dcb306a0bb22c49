package decision

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// TestDecideProfileClasses: a matching error rule's class decides, not the
// HTTP status.
func TestDecideProfileClasses(t *testing.T) {
	t.Parallel()
	p := Policy{}.WithDefaults()
	cls := func(code int, c profile.Class, reason string) provider.Response {
		return provider.Response{Status: code, Class: c, Reason: reason, BodyExcerpt: "body", RetryAfter: 2 * time.Second, HasRetryAfter: true}
	}
	for _, tc := range []struct {
		name string
		in   Input
		want Decision
	}{
		{"200 with errors is missing", Input{Response: cls(200, profile.ClassMissing, "")},
			Decision{Action: Ack, Outcome: ledger.Missing, Status: 200, Reason: "missing"}},
		{"500 that is a throttle", Input{Response: cls(500, profile.ClassThrottle, ""), Attempt: 7, Now: t0},
			Decision{Action: Retry, Status: 500, Reason: "throttled", Throttled: true, CountsThrottle: true, Penalty: 2 * time.Second,
				Delay: 2*time.Second + 500*time.Millisecond, Detail: "Retry-After 2s"}},
		{"429 lock_timeout leaves the rate alone", Input{Response: cls(429, profile.ClassLocked, "lock_timeout"), Attempt: 8, Throttles: 2, Now: t0},
			Decision{Action: Retry, Status: 429, Reason: "lock_timeout", CountsThrottle: true,
				Delay: 2*time.Second + 500*time.Millisecond, Detail: "Retry-After 2s"}},
		{"locked without a reason word", Input{Response: provider.Response{Status: 409, Class: profile.ClassLocked}, Now: t0},
			Decision{Action: Retry, Status: 409, Reason: "locked", CountsThrottle: true, Delay: time.Second}},
		{"locked past the throttle deadline", Input{Response: cls(429, profile.ClassLocked, "lock_timeout"), Now: t0, FirstAttempt: t0.Add(-25 * time.Hour), Throttles: 3},
			Decision{Action: DeadLetter, Status: 429, Reason: "throttle_deadline", CountsThrottle: true,
				Detail: "still throttled 25h0m0s after the first attempt (deadline 24h0m0s, 4 throttles)"}},
		{"200 graphql error retried", Input{Response: cls(200, profile.ClassRetry, "graphql_error"), Attempt: 1},
			Decision{Action: Retry, Status: 200, Reason: "graphql_error", CountsAttempt: true, Delay: 500 * time.Millisecond, Detail: "body"}},
		{"404 that is permanent", Input{Response: cls(404, profile.ClassPermanent, "")},
			Decision{Action: DeadLetter, Status: 404, Reason: "http_404", Detail: "body"}},
		{"400 that is auth", Input{Response: cls(400, profile.ClassAuth, "")},
			Decision{Action: Stop, Status: 400, Reason: "http_400", Detail: "the provider refused the credentials: body"}},
		{"wrong mode or account: retried without an attempt", Input{Response: cls(404, profile.ClassWrongAccount, "wrong_mode"), Attempt: 8},
			Decision{Action: Retry, Status: 404, Reason: "wrong_mode", Delay: 64 * time.Second,
				Detail: "the credentials are for another mode or account than the object: body"}},
		{"rule beats Stripe-Should-Retry", Input{Response: func() provider.Response {
			r := cls(404, profile.ClassMissing, "")
			r.ShouldRetry = new(true)
			return r
		}()}, Decision{Action: Ack, Outcome: ledger.Missing, Status: 404, Reason: "missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(p, tc.in, half); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Decide =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

func TestDecideUnmappedAccount(t *testing.T) {
	t.Parallel()
	err := &provider.Error{Kind: provider.KindUnmappedAccount, TransactionID: "pi_1",
		Err: &profile.UnmappedAccountError{AccountID: "player_99", MapFile: "connect.json"}}
	got := Decide(Policy{}.WithDefaults(), Input{Err: err, Attempt: 1}, half)
	want := Decision{Action: DeadLetter, Reason: "unmapped_account",
		Detail: `account "player_99" is not in the account map connect.json: add it to the map and redrive`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decide =\n  %+v\nwant\n  %+v", got, want)
	}
}

func TestDecideUnmappedStatus(t *testing.T) {
	t.Parallel()
	err := &provider.Error{Kind: provider.KindUnmappedStatus, TransactionID: "tx_1",
		Err: fmt.Errorf("wrapped: %w", &profile.UnmappedStatusError{Status: "VOIDED", Profile: "paypal"})}
	got := Decide(Policy{}.WithDefaults(), Input{Response: provider.Response{Status: 200, ProviderStatus: "VOIDED"}, Err: err, Attempt: 1}, half)
	want := Decision{Action: DeadLetter, Status: 200, Reason: "unmapped_status",
		Detail: "VOIDED: not in the status map of profile paypal; map it and redrive"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decide =\n  %+v\nwant\n  %+v", got, want)
	}
}
