package providersim

// How each provider shape writes the simulator's records: one object spec
// per kind (payment, refund, dispute) with its endpoint, its status words
// and the fields the provider keeps the rest of the story in (Stripe's
// charge, Square's refunded_money, PayPal's status_details and dispute
// outcome), and the shape's error bodies. The records are in the ledger's
// terms; the specs write what the provider would, so that the built-in
// profile of the same name reads each record back.

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// shapeSpec is how one shape writes records and errors.
type shapeSpec struct {
	// objects are the shape's kinds of object, the payment first.
	objects []objectSpec
	// err writes an error body of the HTTP status for object o (nil when
	// no object's endpoint was asked) and id.
	err func(status int, o *objectSpec, id string) any
}

// objectSpec is how a shape writes one kind of record.
type objectSpec struct {
	kind string
	// prefix is the endpoint: prefix + id.
	prefix string
	// name is the object's name in the provider's error messages.
	name string
	// words maps a ledger status to the provider's; fallback is the word of
	// a status the provider has none for (Square cannot say disputed): it
	// reads as another ledger status, so a record in that status is served
	// as a status mismatch.
	words    map[string]string
	fallback string
	// write returns the object's body.
	write func(w written) any
}

// written is one record as a spec writes it.
type written struct {
	rec provider.Record
	// word is the provider's status word for rec.Status.
	word string
	// amount is the money of the object in ISO 4217 minor units, positive:
	// a refund's or dispute's is the negative the ledger holds, negated.
	amount int64
	// authorized is what a card payment authorised beyond what it
	// captured (a partial capture), in ISO minor units; 0 for most.
	authorized int64
	// account is the connected account the record belongs to; "" for none.
	account string
}

// written is rec as the object o holds it, the same in a lookup's answer
// and in a list's page: its amount as the provider writes it (a refund's or
// a dispute's, the money going back, negated), its status word, what a
// partial capture authorised and its connected account.
func (h *shaped) written(o *objectSpec, rec provider.Record) written {
	amount := rec.AmountMinor
	if o.kind != payments.KindPayment {
		amount = -amount
	}
	return written{rec: rec, word: o.wordOf(rec, amount), amount: amount,
		authorized: h.s.partialCapture(rec), account: h.s.cfg.Accounts[rec.ID]}
}

// find returns the object spec whose endpoint path names, and the id.
func (sp *shapeSpec) find(path string) (*objectSpec, string, bool) {
	var best *objectSpec
	for i := range sp.objects {
		o := &sp.objects[i]
		if strings.HasPrefix(path, o.prefix) && (best == nil || len(o.prefix) > len(best.prefix)) {
			best = o
		}
	}
	if best == nil || strings.Contains(path[len(best.prefix):], "/") {
		return nil, "", false
	}
	return best, path[len(best.prefix):], true
}

// object returns the spec of kind, nil when the shape has none.
func (sp *shapeSpec) object(kind string) *objectSpec {
	for i := range sp.objects {
		if sp.objects[i].kind == kind {
			return &sp.objects[i]
		}
	}
	return nil
}

// captured reports whether a payment in the ledger status took the money
// (refunds and disputes come after a capture).
func captured(status string) bool {
	switch status {
	case payments.StatusSucceeded, payments.StatusRefunded, payments.StatusPartiallyRefunded, payments.StatusDisputed:
		return true
	}
	return false
}

// part is a partial refund of amount: half of it, at least 1 and less than
// amount (amount ≥ 2; callers check).
func part(amount int64) int64 { return max(amount/2, 1) }

// stripeProfile is the built-in stripe profile, whose currency_exponents
// say how Stripe writes amounts.
// It is parsed on first use, not when the binary starts.
var stripeProfile = sync.OnceValue(func() *profile.Profile {
	p, _ := profile.Builtin("stripe")
	return p
})

// stripeAmount writes v, ISO 4217 minor units of currency, in Stripe's
// minor units (1500 ISK is 150000). A value Stripe's units cannot hold
// exactly (a mismatched MGA amount, 2 decimals in ISO, none at Stripe) is
// rounded up: the simulator's records are exact, so a mismatch rounded up
// stays a mismatch.
func stripeAmount(v int64, currency string) int64 {
	n, err := stripeProfile().ISOToProviderMinor(v, currency)
	if err == nil {
		return n
	}
	from := profile.ISOExponent(strings.ToUpper(currency))
	to, _ := stripeProfile().Exponent(currency)
	unit := int64(math.Pow10(from - to))
	q := v / unit
	if v%unit > 0 {
		q++
	}
	return q
}

var stripeSpec = shapeSpec{
	objects: []objectSpec{
		{
			kind: payments.KindPayment, prefix: "/v1/payment_intents/", name: "payment_intent",
			// Refunds and disputes live on the charge; the PaymentIntent
			// stays succeeded.
			words: map[string]string{payments.StatusSucceeded: "succeeded", payments.StatusRefunded: "succeeded",
				payments.StatusPartiallyRefunded: "succeeded", payments.StatusDisputed: "succeeded",
				payments.StatusCanceled: "canceled", payments.StatusPending: "processing", payments.StatusFailed: "requires_payment_method"},
			fallback: "canceled",
			write: func(w written) any {
				cur := w.rec.Currency
				amount, received := w.amount, int64(0)
				charge := map[string]any{"object": "charge", "refunded": false, "amount_refunded": 0, "disputed": false,
					"currency": strings.ToLower(cur)}
				if captured(w.rec.Status) && w.word == "succeeded" {
					received = w.amount
					amount = w.amount + w.authorized
					switch w.rec.Status {
					case payments.StatusRefunded:
						charge["refunded"], charge["amount_refunded"] = true, stripeAmount(received, cur)
					case payments.StatusPartiallyRefunded:
						charge["amount_refunded"] = stripeAmount(part(received), cur)
					case payments.StatusDisputed:
						charge["disputed"] = true
					}
				}
				charge["amount"], charge["amount_captured"] = stripeAmount(amount, cur), stripeAmount(received, cur)
				captureMethod := "automatic"
				if w.authorized > 0 {
					captureMethod = "manual"
				}
				return map[string]any{"id": w.rec.ID, "object": "payment_intent", "amount": stripeAmount(amount, cur),
					"amount_received": stripeAmount(received, cur), "currency": strings.ToLower(cur), "status": w.word,
					"livemode": false, "capture_method": captureMethod, "latest_charge": charge, "metadata": map[string]any{},
					"payment_method_types": []string{"card"}, "on_behalf_of": nullable(w.account)}
			},
		},
		{
			kind: payments.KindRefund, prefix: "/v1/refunds/", name: "refund",
			words: map[string]string{payments.StatusSucceeded: "succeeded", payments.StatusPending: "pending",
				payments.StatusFailed: "failed", payments.StatusCanceled: "canceled"},
			fallback: "canceled",
			write: func(w written) any {
				return map[string]any{"id": w.rec.ID, "object": "refund", "amount": stripeAmount(w.amount, w.rec.Currency),
					"currency": strings.ToLower(w.rec.Currency), "status": w.word, "metadata": map[string]any{}}
			},
		},
		{
			kind: payments.KindDispute, prefix: "/v1/disputes/", name: "dispute",
			words: map[string]string{payments.StatusDisputed: "needs_response", payments.StatusSucceeded: "won",
				payments.StatusRefunded: "lost", payments.StatusCanceled: "warning_closed"},
			fallback: "needs_response",
			write: func(w written) any {
				return map[string]any{"id": w.rec.ID, "object": "dispute", "amount": stripeAmount(w.amount, w.rec.Currency),
					"currency": strings.ToLower(w.rec.Currency), "status": w.word, "reason": "general", "livemode": false}
			},
		},
	},
	err: func(status int, o *objectSpec, id string) any {
		e := map[string]any{"type": "invalid_request_error"}
		switch status {
		case http.StatusNotFound:
			if o == nil {
				e["message"] = "Unrecognized request URL."
				break
			}
			e["code"], e["param"], e["message"] = "resource_missing", "id", "No such "+o.name+": '"+id+"'"
		case http.StatusTooManyRequests:
			e["code"], e["message"] = "rate_limit", "Request rate limit exceeded."
		case http.StatusUnauthorized:
			e["message"] = "Invalid API Key provided."
		case http.StatusBadRequest:
			e["message"] = "This object cannot be retrieved."
		default:
			e["type"], e["message"] = "api_error", "An unknown error occurred."
		}
		return map[string]any{"error": e}
	},
}

// stripeWrongMode is Stripe's answer to a test-mode key asking for a
// live-mode object.
func stripeWrongMode(o *objectSpec, id string) any {
	return map[string]any{"error": map[string]any{"type": "invalid_request_error", "code": "resource_missing", "param": "id",
		"message": "No such " + o.name + ": '" + id + "'; a similar object exists in live mode, but a test mode key was used to make this request."}}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// paypalMoney writes an amount in ISO minor units as PayPal's decimal money.
func paypalMoney(v int64, currency string) map[string]string {
	return map[string]string{"currency_code": currency, "value": profile.MinorToDecimal(v, profile.ISOExponent(strings.ToUpper(currency)))}
}

var paypalSpec = shapeSpec{
	objects: []objectSpec{
		{
			kind: payments.KindPayment, prefix: "/v2/payments/captures/", name: "capture",
			// A chargeback leaves the capture PENDING with a reason.
			words: map[string]string{payments.StatusSucceeded: "COMPLETED", payments.StatusPending: "PENDING",
				payments.StatusFailed: "DECLINED", payments.StatusRefunded: "REFUNDED", payments.StatusPartiallyRefunded: "PARTIALLY_REFUNDED",
				payments.StatusDisputed: "PENDING"},
			fallback: "DECLINED",
			write: func(w written) any {
				money := paypalMoney(w.amount, w.rec.Currency)
				details := map[string]string{}
				if w.rec.Status == payments.StatusDisputed {
					details["reason"] = "CHARGEBACK"
				}
				return map[string]any{"id": w.rec.ID, "status": w.word, "status_details": details, "amount": money, "final_capture": true,
					"seller_receivable_breakdown": map[string]any{"gross_amount": money}}
			},
		},
		{
			kind: payments.KindRefund, prefix: "/v2/payments/refunds/", name: "refund",
			words: map[string]string{payments.StatusSucceeded: "COMPLETED", payments.StatusPending: "PENDING",
				payments.StatusFailed: "FAILED", payments.StatusCanceled: "CANCELLED"},
			fallback: "CANCELLED",
			write: func(w written) any {
				return map[string]any{"id": w.rec.ID, "status": w.word, "amount": paypalMoney(w.amount, w.rec.Currency)}
			},
		},
		{
			kind: payments.KindDispute, prefix: "/v1/customer/disputes/", name: "dispute",
			// A resolved dispute says how in its outcome.
			words: map[string]string{payments.StatusDisputed: "UNDER_REVIEW", payments.StatusRefunded: "RESOLVED",
				payments.StatusSucceeded: "RESOLVED", payments.StatusCanceled: "RESOLVED"},
			fallback: "OPEN",
			write: func(w written) any {
				body := map[string]any{"dispute_id": w.rec.ID, "status": w.word, "reason": "MERCHANDISE_OR_SERVICE_NOT_RECEIVED",
					"dispute_amount": paypalMoney(w.amount, w.rec.Currency), "dispute_life_cycle_stage": "CHARGEBACK"}
				if outcome, ok := map[string]string{payments.StatusRefunded: "RESOLVED_BUYER_FAVOUR", payments.StatusSucceeded: "RESOLVED_SELLER_FAVOUR",
					payments.StatusCanceled: "CANCELED_BY_BUYER"}[w.rec.Status]; ok && w.word == "RESOLVED" {
					body["dispute_outcome"] = map[string]string{"outcome_code": outcome}
				}
				return body
			},
		},
	},
	err: func(status int, _ *objectSpec, id string) any {
		m, ok := map[int][2]string{
			http.StatusNotFound:        {"RESOURCE_NOT_FOUND", "The specified resource does not exist."},
			http.StatusTooManyRequests: {"RATE_LIMIT_REACHED", "Too many requests. Blocked due to rate limiting."},
			http.StatusBadRequest:      {"INVALID_REQUEST", "Request is not well-formed, syntactically incorrect, or violates schema."},
			http.StatusUnauthorized:    {"AUTHENTICATION_FAILURE", "Authentication failed due to invalid authentication credentials or a missing Authorization header."},
		}[status]
		if !ok {
			m = [2]string{"INTERNAL_SERVICE_ERROR", "An internal service error has occurred."}
		}
		return map[string]any{"name": m[0], "message": m[1], "debug_id": "sim" + strconv.Itoa(status)}
	},
}

// squareMoney writes an amount in ISO minor units as Square's money.
func squareMoney(v int64, currency string) map[string]any {
	return map[string]any{"amount": v, "currency": currency}
}

var squareSpec = shapeSpec{
	objects: []objectSpec{
		{
			kind: payments.KindPayment, prefix: "/v2/payments/", name: "payment",
			// A refunded payment stays COMPLETED with refunded_money.
			words: map[string]string{payments.StatusSucceeded: "COMPLETED", payments.StatusPending: "PENDING",
				payments.StatusCanceled: "CANCELED", payments.StatusFailed: "FAILED",
				payments.StatusRefunded: "COMPLETED", payments.StatusPartiallyRefunded: "COMPLETED"},
			fallback: "CANCELED",
			write: func(w written) any {
				money := squareMoney(w.amount, w.rec.Currency)
				pay := map[string]any{"id": w.rec.ID, "status": w.word, "amount_money": money, "total_money": money, "source_type": "CARD"}
				refunded := int64(0)
				switch w.rec.Status {
				case payments.StatusRefunded:
					refunded = w.amount
				case payments.StatusPartiallyRefunded:
					refunded = part(w.amount)
				}
				if refunded > 0 {
					pay["refunded_money"] = squareMoney(refunded, w.rec.Currency)
					pay["refund_ids"] = []string{w.rec.ID + "_R1"}
				}
				return map[string]any{"payment": pay}
			},
		},
		{
			kind: payments.KindRefund, prefix: "/v2/refunds/", name: "refund",
			words: map[string]string{payments.StatusSucceeded: "COMPLETED", payments.StatusPending: "PENDING",
				payments.StatusFailed: "FAILED"},
			fallback: "REJECTED",
			write: func(w written) any {
				return map[string]any{"refund": map[string]any{"id": w.rec.ID, "status": w.word,
					"amount_money": squareMoney(w.amount, w.rec.Currency)}}
			},
		},
		{
			kind: payments.KindDispute, prefix: "/v2/disputes/", name: "dispute",
			words: map[string]string{payments.StatusDisputed: "EVIDENCE_REQUIRED", payments.StatusSucceeded: "WON",
				payments.StatusRefunded: "LOST", payments.StatusCanceled: "INQUIRY_CLOSED"},
			fallback: "PROCESSING",
			write: func(w written) any {
				return map[string]any{"dispute": map[string]any{"id": w.rec.ID, "dispute_id": w.rec.ID, "state": w.word,
					"reason": "NO_KNOWLEDGE", "amount_money": squareMoney(w.amount, w.rec.Currency)}}
			},
		},
	},
	err: func(status int, _ *objectSpec, id string) any {
		m, ok := map[int][2]string{
			http.StatusNotFound:        {"INVALID_REQUEST_ERROR", "NOT_FOUND"},
			http.StatusTooManyRequests: {"RATE_LIMIT_ERROR", "RATE_LIMITED"},
			http.StatusBadRequest:      {"INVALID_REQUEST_ERROR", "BAD_REQUEST"},
			http.StatusUnauthorized:    {"AUTHENTICATION_ERROR", "UNAUTHORIZED"},
		}[status]
		if !ok {
			m = [2]string{"API_ERROR", "SERVICE_UNAVAILABLE"}
		}
		return map[string]any{"errors": []map[string]string{{"category": m[0], "code": m[1], "detail": "simulated " + strings.ToLower(m[1]) + " for " + id}}}
	},
}

// wordOf returns the provider's word for rec's status in o: its own, or the
// fallback when it has none or the record cannot carry it (a partial
// refund of less than two minor units).
func (o *objectSpec) wordOf(rec provider.Record, amount int64) string {
	word, ok := o.words[rec.Status]
	if !ok || rec.Status == payments.StatusPartiallyRefunded && amount < 2 {
		return o.fallback
	}
	return word
}
