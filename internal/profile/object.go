package profile

import (
	"strings"

	"github.com/reconcile/reconcile/internal/payments"
)

// Object is one kind of object a provider keeps (a payment, a refund, a
// dispute): how to ask for one by id and how to read the answer. The
// request and the reading are separate so that a listing of objects can
// read each element of a page the way a lookup reads its answer.
type Object struct {
	// Kind is payments.KindPayment, KindRefund or KindDispute.
	Kind string
	// IDPrefixes make a row whose file states no kind this kind when its
	// transaction id starts with one of them (Stripe's re_ and pyr_ are
	// refunds). Never set for payments, the kind of every other row.
	IDPrefixes []string
	// Request is how one object is asked for.
	Request Request
	// Reading says where the fields of the answer are and what they mean.
	Reading Reading
}

// Request is one request of a profile. Its templates (path, query values,
// header values, body) may hold two placeholders: {id}, the transaction
// id, and {account}, the item's account as [Account] resolves it.
type Request struct {
	// Method is GET or POST.
	Method string
	// Path is the path template below the base URL; placeholders are
	// path-escaped.
	Path string
	// Query are query parameters, sorted by name; a parameter whose value
	// comes out empty is left out.
	Query []Pair
	// Headers are extra request headers, sorted by name; a header whose
	// value comes out empty is not sent (Stripe-Account for the platform's
	// own payments).
	Headers []Pair
	// Body, when not empty, is sent as a JSON body; placeholders are
	// JSON-escaped (without quotes).
	Body string
	// IdempotencyHeader is the header that carries the item's idempotency
	// key; empty sends none.
	IdempotencyHeader string
}

// UsesAccount reports whether a template of r holds {account}.
func (r *Request) UsesAccount() bool {
	if strings.Contains(r.Path, placeholderAccount) || strings.Contains(r.Body, placeholderAccount) {
		return true
	}
	for _, ps := range [][]Pair{r.Query, r.Headers} {
		for _, p := range ps {
			if strings.Contains(p.Value, placeholderAccount) {
				return true
			}
		}
	}
	return false
}

// kindsUseAccount reports whether a request of p's kinds holds {account}.
func (p *Profile) kindsUseAccount() bool {
	for _, o := range p.Kinds {
		if o.Request.UsesAccount() {
			return true
		}
	}
	return false
}

// The placeholders of request templates.
const (
	placeholderID      = "{id}"
	placeholderAccount = "{account}"
)

// Reading says how to read one object from an answer: where its fields
// are, what its status words mean in the ledger's vocabulary, and the rules
// that derive a status (or choose the amount) from several fields.
type Reading struct {
	// Record locates the fields.
	Record RecordPaths
	// StatusMap maps the provider's status words to the ledger's
	// vocabulary. Nil means the provider speaks the vocabulary itself and
	// its words are taken as they are (the built-in reconcile contract).
	StatusMap map[string]string
	// StatusRules are tried in order before the status map; the first whose
	// conditions all hold decides the status, the amount's path, or both.
	StatusRules []StatusRule
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

// StatusRule derives the ledger status, or the path of the amount, from
// several fields of an answer: Stripe's refunds and disputes show on the
// PaymentIntent's charge, not in its status word.
type StatusRule struct {
	// When are the conditions; all must hold. At least one.
	When []Condition
	// Status is the ledger status the rule gives; empty: the status map's
	// word for the record's status.
	Status string
	// Amount is the path of the amount when the rule holds (Stripe's
	// amount_received: what was captured); empty: Record.Amount.
	Amount string
	// Key names the rule in its file (status_rules[2]), for `provider
	// check` and errors.
	Key string
}

// Test is what a [Condition] checks of the value at its path.
type Test int

// Tests of a [Condition].
const (
	// TestPresent: the value is there and not null (Value "true"), or it
	// is absent or null (Value "false").
	TestPresent Test = iota + 1
	// TestEquals: the value equals the JSON literal Value (a string, a
	// number compared exactly by its value, true or false).
	TestEquals
	// TestEqualsPath: the value equals the value at the path Value (two
	// numbers by value, or two equal strings or booleans).
	TestEqualsPath
	// TestAbove: the value is a number (or a string holding one) greater
	// than the number Value, compared exactly.
	TestAbove
)

var testNames = []string{"", "present", "equals", "equals_path", "above"}

// String returns the test's key in a profile file.
func (t Test) String() string {
	if t > 0 && int(t) < len(testNames) {
		return testNames[t]
	}
	return "Test(?)"
}

// Condition is one condition of a [StatusRule]: a test of the value at a
// path of the answer.
type Condition struct {
	Path string
	Test Test
	// Value is the test's operand: "true" or "false" for TestPresent, a
	// JSON literal for TestEquals, a path for TestEqualsPath, a decimal
	// number for TestAbove.
	Value string
	// literal is Value parsed, for TestEquals and TestAbove.
	literal literal
}

// KindOf returns the kind of object a row is: stated when the file states
// one, else the kind whose id prefix the transaction id starts with, else
// a payment.
func (p *Profile) KindOf(transactionID, stated string) string {
	if stated != "" {
		return stated
	}
	for _, kind := range []string{payments.KindRefund, payments.KindDispute} {
		if o := p.Kinds[kind]; o != nil {
			for _, prefix := range o.IDPrefixes {
				if strings.HasPrefix(transactionID, prefix) {
					return kind
				}
			}
		}
	}
	return payments.KindPayment
}

// ObjectFor returns the object that asks for and reads a row of kind: the
// kind's own, or the payment object when the profile has none for it (the
// built-in contract answers every kind at one path, in the ledger's terms).
func (p *Profile) ObjectFor(kind string) *Object {
	if o := p.Kinds[kind]; o != nil {
		return o
	}
	return &p.Payment
}

// ReturnsMoney reports whether o is an object of money going back to the
// customer (a refund or a dispute): providers write its amount as a
// positive number, the ledger holds it negative.
func (o *Object) ReturnsMoney() bool {
	return o.Kind == payments.KindRefund || o.Kind == payments.KindDispute
}
