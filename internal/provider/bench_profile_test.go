package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/reconcile/reconcile/internal/profile"
)

// builtinDecode is the client's decoder before profiles (encoding/json into
// a struct), kept as the reference the profile path is measured against.
func builtinDecode(body []byte) (Record, error) {
	var raw struct {
		ID          *string      `json:"id"`
		AmountMinor *json.Number `json:"amount_minor"`
		Currency    *string      `json:"currency"`
		Status      *string      `json:"status"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return Record{}, err
	}
	if raw.ID == nil || raw.AmountMinor == nil || raw.Currency == nil || raw.Status == nil {
		return Record{}, errors.New("missing")
	}
	amount, err := strconv.ParseInt(raw.AmountMinor.String(), 10, 64)
	if err != nil {
		return Record{}, err
	}
	return Record{ID: *raw.ID, AmountMinor: amount, Currency: *raw.Currency, Status: *raw.Status}, nil
}

var reconcileBody = []byte(`{"id":"tx_20261024_0000042","amount_minor":1099,"currency":"EUR","status":"succeeded"}`)

// BenchmarkDecode compares reading one answer: the built-in contract with
// its old decoder and with its profile, and a whole Stripe PaymentIntent (a
// body 25 times larger, as stripe-mock answers) with the stripe profile;
// stripe-expanded is the PaymentIntent with its charge expanded, as the
// stripe profile asks for it (its status rules read the charge), and
// stripe-refund a Refund, negated.
func BenchmarkDecode(b *testing.B) {
	stripeBody := stripeMockBody(b)
	expandedBody := fixture(b, "stripe-mock-payment-intent-expanded.json")
	refundBody := fixture(b, "stripe-mock-refund.json")
	rp, _ := profile.Builtin("reconcile")
	sp, _ := profile.Builtin("stripe")
	b.Run("builtin-json", func(b *testing.B) {
		b.SetBytes(int64(len(reconcileBody)))
		for b.Loop() {
			if _, err := builtinDecode(reconcileBody); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name string
		p    *profile.Profile
		kind string
		body []byte
	}{{"reconcile-profile", rp, "payment", reconcileBody}, {"stripe-profile", sp, "payment", stripeBody},
		{"stripe-expanded", sp, "payment", expandedBody}, {"stripe-refund", sp, "refund", refundBody}} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(tc.body)))
			o := tc.p.ObjectFor(tc.kind)
			for b.Loop() {
				if r := tc.p.Classify(200, tc.body); r != nil {
					b.Fatal("rule matched")
				}
				if _, err := tc.p.Extract(o, tc.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGet is one whole lookup over loopback HTTP, CPU included on both
// ends: the built-in contract against a Stripe PaymentIntent with the stripe
// profile.
func BenchmarkGet(b *testing.B) {
	stripeBody := stripeMockBody(b)
	sp, _ := profile.Builtin("stripe")
	for _, tc := range []struct {
		name string
		p    *profile.Profile
		body []byte
	}{{"reconcile", nil, reconcileBody}, {"stripe", sp, stripeBody}} {
		b.Run(tc.name, func(b *testing.B) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(tc.body)
			}))
			defer srv.Close()
			c, err := New(Config{BaseURL: srv.URL, Profile: tc.p, Token: testToken})
			if err != nil {
				b.Fatal(err)
			}
			id := "tx_20261024_0000042"
			if tc.p != nil {
				id = "pi_3MtwBwLkdIwHu7ix28a3tqPa"
			}
			for b.Loop() {
				if _, err := c.Get(b.Context(), Lookup{TransactionID: id, IdempotencyKey: "k"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// stripeMockBody is a PaymentIntent as stripe-mock v0.203.0 answers it.
func stripeMockBody(tb testing.TB) []byte {
	return fixture(tb, "stripe-mock-payment-intent.json")
}
