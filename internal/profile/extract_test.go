package profile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "profiles", "fixtures", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func builtin(t testing.TB, name string) *Profile {
	t.Helper()
	p, ok := Builtin(name)
	if !ok {
		t.Fatalf("no built-in %s", name)
	}
	return p
}

// TestExtractDocumentedBodies reads each provider's documented success body.
func TestExtractDocumentedBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile, fixture string
		want             Extracted
	}{
		{"stripe", "stripe-payment-intent.json", Extracted{ID: "pi_3MtwBwLkdIwHu7ix28a3tqPa", AmountMinor: 2000, Currency: "USD",
			Status: "succeeded", ProviderStatus: "succeeded", Kind: "payment", Rule: "status_rules[3]"}},
		{"paypal", "paypal-capture.json", Extracted{ID: "2GG279541U471931P", AmountMinor: 1099, Currency: "USD", Status: "succeeded",
			ProviderStatus: "COMPLETED", Kind: "payment"}},
		{"square", "square-payment.json", Extracted{ID: "bP9mAsEMYPUGjjGNaNO5ZDVyLhSZY", AmountMinor: 1000, Currency: "USD",
			Status: "succeeded", ProviderStatus: "COMPLETED", Kind: "payment"}},
		{"reconcile", "", Extracted{ID: "tx_1", AmountMinor: 1234, Currency: "eur", Status: "succeeded", ProviderStatus: "succeeded", Kind: "payment"}},
	} {
		body := []byte(`{"id":"tx_1","amount_minor":1234,"currency":"eur","status":"succeeded"}`)
		if tc.fixture != "" {
			body = fixture(t, tc.fixture)
		}
		p := builtin(t, tc.profile)
		if r := p.Classify(200, body); r != nil {
			t.Errorf("%s: a 200 matched rule %+v", tc.profile, r)
		}
		got, err := p.Extract(&p.Payment, body)
		if err != nil || got != tc.want {
			t.Errorf("%s: Extract = %+v, %v; want %+v", tc.profile, got, err, tc.want)
		}
	}
}

func TestClassifyDocumentedErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile string
		status  int
		body    string // a fixture name or a literal body
		want    Class
		reason  string
	}{
		{"stripe", 404, "stripe-404.json", ClassMissing, ""},
		{"stripe", 404, `{"error":{"message":"Unrecognized request URL (GET: /v1/payment_intent/x)","type":"invalid_request_error"}}`, ClassPermanent, ""},
		{"stripe", 429, "stripe-429-lock.json", ClassLocked, "lock_timeout"},
		{"stripe", 429, "stripe-429.json", ClassThrottle, ""},
		{"stripe", 500, `{"error":{"type":"api_error"}}`, 0, ""},
		{"paypal", 404, "paypal-404.json", ClassMissing, ""},
		{"paypal", 429, "paypal-429.json", ClassThrottle, ""},
		{"paypal", 401, "paypal-401.json", 0, ""},
		{"square", 404, "square-404.json", ClassMissing, ""},
		{"square", 429, "square-429.json", ClassThrottle, ""},
		{"square", 404, `<html>not found</html>`, ClassPermanent, ""},
		{"reconcile", 404, `{"error":"not_found"}`, 0, ""},
	} {
		body := []byte(tc.body)
		if filepath.Ext(tc.body) == ".json" {
			body = fixture(t, tc.body)
		}
		r := builtin(t, tc.profile).Classify(tc.status, body)
		var got Class
		var reason string
		if r != nil {
			got, reason = r.Class, r.Reason
		}
		if got != tc.want || reason != tc.reason {
			t.Errorf("%s %d %.30s: class %v %q, want %v %q", tc.profile, tc.status, tc.body, got, reason, tc.want, tc.reason)
		}
	}
}

// TestRulesExpressEdgeCases: the 500 that is a throttle and the GraphQL 200
// with errors[] and a null node.
func TestRulesExpressEdgeCases(t *testing.T) {
	t.Parallel()
	p, err := Parse("edge.json", []byte(`{
	  "name": "edge", "request": {"method": "POST", "path": "/graphql", "body": "{\"query\":\"{ node(id: \\\"{id}\\\") { id } }\"}"},
	  "auth": {"type": "none"},
	  "record": {"id": "data.node.id", "amount": "data.node.amount.value", "amount_format": "decimal",
	             "currency": "data.node.amount.currency", "status": "data.node.state"},
	  "errors": [
	    {"status": 500, "contains": "too many requests", "class": "throttle"},
	    {"status": 200, "path": "errors.0.extensions.code", "value": "NOT_FOUND", "class": "missing"},
	    {"status": 200, "path": "errors.0", "class": "retry", "reason": "graphql_error"},
	    {"status": "5xx", "class": "retry"},
	    {"path": "fatal", "value": true, "class": "permanent"}
	  ]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !p.NeedsBody() {
		t.Error("NeedsBody false with body rules")
	}
	for _, tc := range []struct {
		status int
		body   string
		want   Class
	}{
		{500, `{"status":500,"errorCode":"000","message":"too many requests","errorType":"internal"}`, ClassThrottle},
		{500, `too many requests`, ClassThrottle},
		{503, `{}`, ClassRetry},
		{200, `{"data":{"node":null},"errors":[{"message":"not found","extensions":{"code":"NOT_FOUND"}}]}`, ClassMissing},
		{200, `{"data":{"node":null},"errors":[{"message":"boom"}]}`, ClassRetry},
		{200, `{"data":{"node":{"id":"x"}}}`, 0},
		{200, `{"data":{"node":{"id":"x"}},"errors":[]}`, 0},
		{400, `{"fatal":true}`, ClassPermanent},
		{400, `{"fatal":"true"}`, 0},
	} {
		var got Class
		if r := p.Classify(tc.status, []byte(tc.body)); r != nil {
			got = r.Class
		}
		if got != tc.want {
			t.Errorf("%d %s: class %v, want %v", tc.status, tc.body, got, tc.want)
		}
	}
}

func TestExtractErrors(t *testing.T) {
	t.Parallel()
	stripe, paypal := builtin(t, "stripe"), builtin(t, "paypal")
	for _, tc := range []struct {
		p    *Profile
		body string
		want string
	}{
		{stripe, `{"id":"pi_1","amount":1.5,"currency":"usd","status":"processing"}`, "unreadable body: amount: 1.5 is not an integer"},
		{stripe, `{"id":"pi_1","currency":"usd","status":"processing"}`, "unreadable body: missing amount"},
		{stripe, `{"id":"pi_1","amount":1,"currency":"usd","status":"succeeded"}`, "unreadable body: missing amount_received"},
		{stripe, `{"id":"pi_1","amount":1,"currency":"usd","status":"succeeded"} x`, "unreadable body: not valid JSON"},
		{stripe, `{"id":"pi_1","amount":99999999999999999999,"currency":"usd","status":"processing"}`, "unreadable body: amount: 99999999999999999999 does not fit in 64 bits"},
		{stripe, `{"id":"pi_1","amount":150050,"amount_received":150050,"currency":"isk","status":"succeeded"}`,
			`unreadable body: amount_received: bad amount: 150050 in ISK minor units of 2 decimals: "1500.50" has more than 0 decimal places`},
		{paypal, `{"id":"C1","amount":{"value":"10.999","currency_code":"USD"},"status":"COMPLETED"}`, `unreadable body: amount.value: bad amount: "10.999" has more than 2 decimal places`},
		{paypal, `{"id":"C1","amount":{"value":"1000.5","currency_code":"JPY"},"status":"COMPLETED"}`, `unreadable body: amount.value: bad amount: "1000.5" has more than 0 decimal places`},
		{paypal, `{"id":"C1","amount":{"value":"10.99","currency_code":"USD"},"status":"VOIDED"}`, `provider status "VOIDED" is not in the status map of profile paypal`},
	} {
		_, err := tc.p.Extract(&tc.p.Payment, []byte(tc.body))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s %s:\n got %v\nwant %s", tc.p.Name, tc.body, err, tc.want)
		}
	}
	got, err := paypal.Extract(&paypal.Payment, []byte(`{"id":"C1","amount":{"value":"10.99","currency_code":"USD"},"status":"VOIDED"}`))
	var ue *UnmappedStatusError
	if !errors.As(err, &ue) || ue.Status != "VOIDED" || got.AmountMinor != 1099 || got.ProviderStatus != "VOIDED" {
		t.Errorf("unmapped: %+v, %v", got, err)
	}
	got, err = paypal.Extract(&paypal.Payment, []byte(`{"id":"C1","amount":{"value":"1500","currency_code":"JPY"},"status":"REFUNDED"}`))
	if err != nil || got.AmountMinor != 1500 || got.Status != "refunded" {
		t.Errorf("JPY: %+v, %v", got, err)
	}
}

func TestExtractFormats(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		format, amount string
		want           int64
	}{
		{"minor", `1099`, 1099}, {"minor", `"1099"`, 1099}, {"minor", `-5`, -5},
		{"decimal", `"10.99"`, 1099}, {"decimal", `10.99`, 1099},
		{"milli", `10990`, 1099}, {"milli", `"10990"`, 1099},
		{"units_nanos", `{"units":"10","nanos":990000000}`, 1099}, {"units_nanos", `{"units":10}`, 1000},
		{"units_nanos", `{"nanos":-500000000}`, -50},
	} {
		p, err := Parse("f.json", []byte(`{"name":"f","request":{"path":"/{id}"},"auth":{"type":"none"},
			"record":{"id":"id","amount":"amt","amount_format":"`+tc.format+`","currency":"cur","status":"st"}}`))
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Extract(&p.Payment, []byte(`{"id":"x","amt":`+tc.amount+`,"cur":"EUR","st":"succeeded"}`))
		if err != nil || got.AmountMinor != tc.want {
			t.Errorf("%s %s = %d, %v; want %d", tc.format, tc.amount, got.AmountMinor, err, tc.want)
		}
	}
}

// FuzzParse: the parser never panics, and what it accepts is usable: its
// rules classify and its record paths extract without panicking.
func FuzzParse(f *testing.F) {
	for _, name := range BuiltinNames() {
		b, _ := builtinFS.ReadFile("builtin/" + name + ".json")
		f.Add(b)
	}
	checkout, _ := os.ReadFile(filepath.Join("..", "..", "testdata", "profiles", "checkout.json"))
	f.Add(checkout)
	bad, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "profiles", "bad", "*.json"))
	for _, path := range bad {
		b, _ := os.ReadFile(path)
		f.Add(b)
	}
	body := fixture(f, "stripe-payment-intent.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.json", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "fuzz.json" {
				t.Fatalf("error %v is not an *Error naming the file", err)
			}
			return
		}
		if p.Name == "" || p.Payment.Request.Path == "" || p.Auth.Type == 0 || p.Payment.Reading.Record.AmountFormat == 0 {
			t.Fatalf("accepted an incomplete profile: %+v", p)
		}
		for kind, o := range p.Kinds {
			if o.Kind != kind || o.Request.Path == "" || o.Reading.Record.ID == "" || o.Reading.Record.AmountFormat == 0 {
				t.Fatalf("accepted an incomplete %s object: %+v", kind, o)
			}
		}
		for _, r := range p.Payment.Reading.StatusRules {
			if len(r.When) == 0 || r.Status == "" && r.Amount == "" {
				t.Fatalf("accepted a rule without effect: %+v", r)
			}
		}
		_ = p.Classify(429, body)
		for _, kind := range []string{"payment", "refund", "dispute"} {
			_, _ = p.Extract(p.ObjectFor(kind), body)
		}
		_ = p.KindOf("re_1", "")
		_, _ = p.Account.Resolve("acct_1")
	})
}
