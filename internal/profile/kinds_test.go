package profile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestExtractKinds reads each provider's documented refunds, disputes,
// refunded, disputed and partially captured payments with the built-in
// profiles: the ledger status the rules derive, the captured amount, and a
// refund's or dispute's money as the negative the payment file holds.
func TestExtractKinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile, kind, body string // body: a fixture name or a literal
		want                Extracted
	}{
		// Stripe PaymentIntents: the charge says refunded and disputed;
		// amount_received is what was captured.
		{"stripe", "payment", "stripe-payment-intent-partially-refunded.json", Extracted{ID: "pi_3PartRefund0001", AmountMinor: 4000,
			Currency: "EUR", Status: "partially_refunded", ProviderStatus: "succeeded", Kind: "payment", Rule: "status_rules[2]"}},
		{"stripe", "payment", `{"id":"pi_1","amount":5000,"amount_received":5000,"currency":"usd","status":"succeeded",
			"latest_charge":{"refunded":true,"amount_refunded":5000,"disputed":false}}`,
			Extracted{ID: "pi_1", AmountMinor: 5000, Currency: "USD", Status: "refunded", ProviderStatus: "succeeded", Kind: "payment", Rule: "status_rules[1]"}},
		{"stripe", "payment", `{"id":"pi_1","amount":5000,"amount_received":5000,"currency":"usd","status":"succeeded",
			"latest_charge":{"refunded":false,"amount_refunded":0,"disputed":true}}`,
			Extracted{ID: "pi_1", AmountMinor: 5000, Currency: "USD", Status: "disputed", ProviderStatus: "succeeded", Kind: "payment", Rule: "status_rules[0]"}},
		{"stripe", "payment", `{"id":"pi_1","amount":5000,"amount_received":3200,"currency":"usd","status":"succeeded",
			"latest_charge":{"refunded":false,"amount_refunded":0,"disputed":false}}`,
			Extracted{ID: "pi_1", AmountMinor: 3200, Currency: "USD", Status: "succeeded", ProviderStatus: "succeeded", Kind: "payment", Rule: "status_rules[3]"}},
		{"stripe", "payment", `{"id":"pi_1","amount":5000,"amount_received":0,"currency":"usd","status":"requires_capture","latest_charge":null}`,
			Extracted{ID: "pi_1", AmountMinor: 5000, Currency: "USD", Status: "pending", ProviderStatus: "requires_capture", Kind: "payment"}},
		{"stripe", "refund", "stripe-refund.json", Extracted{ID: "re_1Nispe2eZvKYlo2Cd31jOCgZ", AmountMinor: -1000, Currency: "USD",
			Status: "succeeded", ProviderStatus: "succeeded", Kind: "refund"}},
		{"stripe", "dispute", "stripe-dispute.json", Extracted{ID: "dp_1MtJUT2eZvKYlo2CNaw2HvEv", AmountMinor: -1000, Currency: "USD",
			Status: "disputed", ProviderStatus: "warning_needs_response", Kind: "dispute"}},
		{"stripe", "refund", "stripe-mock-refund.json", Extracted{ID: "re_3MtwBwLkdIwHu7ix1TwCw4Uo", AmountMinor: -100, Currency: "USD",
			Status: "succeeded", ProviderStatus: "succeeded", Kind: "refund"}},
		{"stripe", "dispute", "stripe-mock-dispute.json", Extracted{ID: "dp_1MtJUT2eZvKYlo2CNaw2HvEv", AmountMinor: -1000, Currency: "USD",
			Status: "disputed", ProviderStatus: "warning_needs_response", Kind: "dispute"}},
		{"stripe", "payment", "stripe-mock-payment-intent-expanded.json", Extracted{ID: "pi_3MtwBwLkdIwHu7ix28a3tqPa", AmountMinor: 1099,
			Currency: "USD", Status: "failed", ProviderStatus: "requires_payment_method", Kind: "payment"}},
		// PayPal: a chargeback is a PENDING capture with status_details.
		{"paypal", "payment", "paypal-capture-chargeback.json", Extracted{ID: "7TK53561YB803214S", AmountMinor: 2500, Currency: "EUR",
			Status: "disputed", ProviderStatus: "PENDING", Kind: "payment", Rule: "status_rules[0]"}},
		{"paypal", "payment", `{"id":"C1","status":"PENDING","status_details":{"reason":"BUYER_COMPLAINT"},"amount":{"currency_code":"EUR","value":"5.00"}}`,
			Extracted{ID: "C1", AmountMinor: 500, Currency: "EUR", Status: "disputed", ProviderStatus: "PENDING", Kind: "payment", Rule: "status_rules[1]"}},
		{"paypal", "payment", `{"id":"C1","status":"PENDING","status_details":{"reason":"ECHECK"},"amount":{"currency_code":"EUR","value":"5.00"}}`,
			Extracted{ID: "C1", AmountMinor: 500, Currency: "EUR", Status: "pending", ProviderStatus: "PENDING", Kind: "payment"}},
		{"paypal", "refund", "paypal-refund.json", Extracted{ID: "1JU08902781691411", AmountMinor: -1099, Currency: "USD",
			Status: "succeeded", ProviderStatus: "COMPLETED", Kind: "refund"}},
		{"paypal", "dispute", "paypal-dispute.json", Extracted{ID: "PP-D-4012", AmountMinor: -2500, Currency: "EUR",
			Status: "refunded", ProviderStatus: "RESOLVED", Kind: "dispute", Rule: "kinds.dispute.status_rules[0]"}},
		// Square: refunds show in refunded_money.
		{"square", "payment", "square-payment-partially-refunded.json", Extracted{ID: "bP9mAsEMYPUGjjGNaNO5ZDVyLhSZY", AmountMinor: 1000,
			Currency: "USD", Status: "partially_refunded", ProviderStatus: "COMPLETED", Kind: "payment", Rule: "status_rules[1]"}},
		{"square", "payment", `{"payment":{"id":"P1","status":"COMPLETED","amount_money":{"amount":900,"currency":"USD"},
			"total_money":{"amount":1000,"currency":"USD"},"refunded_money":{"amount":1000,"currency":"USD"}}}`,
			Extracted{ID: "P1", AmountMinor: 900, Currency: "USD", Status: "refunded", ProviderStatus: "COMPLETED", Kind: "payment", Rule: "status_rules[0]"}},
		{"square", "refund", "square-refund.json", Extracted{ID: "bP9mAsEMYPUGjjGNaNO5ZDVyLhSZY_69MmgHubkLqx9wGhnmenRUHOaKitE6llfZuxcWYjGxd",
			AmountMinor: -555, Currency: "USD", Status: "succeeded", ProviderStatus: "COMPLETED", Kind: "refund"}},
		{"square", "dispute", "square-dispute.json", Extracted{ID: "XDgyFu7yo1E2S5lQGGpYn", AmountMinor: -2500, Currency: "USD",
			Status: "refunded", ProviderStatus: "LOST", Kind: "dispute"}},
		// The built-in contract has no kinds: a refund is asked like a
		// payment and answered in the ledger's terms.
		{"reconcile", "refund", `{"id":"re_1","amount_minor":-500,"currency":"EUR","status":"succeeded"}`,
			Extracted{ID: "re_1", AmountMinor: -500, Currency: "EUR", Status: "succeeded", ProviderStatus: "succeeded", Kind: "payment"}},
	} {
		body := []byte(tc.body)
		if strings.HasSuffix(tc.body, ".json") {
			body = fixture(t, tc.body)
		}
		p := builtin(t, tc.profile)
		got, err := p.Extract(p.ObjectFor(tc.kind), body)
		if err != nil || got != tc.want {
			t.Errorf("%s %s %.40s:\n got %+v, %v\nwant %+v", tc.profile, tc.kind, tc.body, got, err, tc.want)
		}
	}
}

// TestKindOf: the file's kind wins; else the id prefixes; else a payment.
func TestKindOf(t *testing.T) {
	t.Parallel()
	stripe, square := builtin(t, "stripe"), builtin(t, "square")
	for _, tc := range []struct {
		p             *Profile
		id, stated    string
		want, request string
	}{
		{stripe, "pi_3MtwBwLkdIwHu7ix28a3tqPa", "", "payment", "/v1/payment_intents/{id}"},
		{stripe, "re_3MtwBwLkdIwHu7ix1TwCw4Uo", "", "refund", "/v1/refunds/{id}"},
		{stripe, "pyr_1Ow2Ps2eZvKYlo2C", "", "refund", "/v1/refunds/{id}"},
		{stripe, "dp_1MtJUT2eZvKYlo2CNaw2HvEv", "", "dispute", "/v1/disputes/{id}"},
		{stripe, "du_1Ow2Ps2eZvKYlo2C", "", "dispute", "/v1/disputes/{id}"},
		{stripe, "re_1", "payment", "payment", "/v1/payment_intents/{id}"},
		{stripe, "ch_1", "refund", "refund", "/v1/refunds/{id}"},
		{square, "bP9mAsEMYPUGjjGNaNO5ZDVyLhSZY_69Mmg", "", "payment", "/v2/payments/{id}"},
		{square, "bP9mAsEMYPUGjjGNaNO5ZDVyLhSZY_69Mmg", "refund", "refund", "/v2/refunds/{id}"},
		{builtin(t, "paypal"), "PP-D-4012", "", "dispute", "/v1/customer/disputes/{id}"},
		{builtin(t, "reconcile"), "re_1", "refund", "refund", "/v1/transactions/{id}"},
	} {
		kind := tc.p.KindOf(tc.id, tc.stated)
		if kind != tc.want || tc.p.ObjectFor(kind).Request.Path != tc.request {
			t.Errorf("%s %s (stated %q): kind %s, %s; want %s, %s", tc.p.Name, tc.id, tc.stated, kind, tc.p.ObjectFor(kind).Request.Path, tc.want, tc.request)
		}
	}
}

// TestStripeCurrencyExponents: Stripe's minor units depart from ISO 4217
// for ISK (two-decimal in the API, 100 is one króna) and MGA (zero-decimal,
// ISO has two); HUF and TWD differ for payouts only, so they read as ISO.
// The ledger holds ISO minor units whatever the provider writes.
func TestStripeCurrencyExponents(t *testing.T) {
	t.Parallel()
	stripe := builtin(t, "stripe")
	for _, tc := range []struct {
		currency string
		stripe   string // amount_received as Stripe writes it
		want     int64  // ISO minor units
		err      string
	}{
		{"isk", "150000", 1500, ""},
		{"isk", "150050", 0, `"1500.50" has more than 0 decimal places`},
		{"mga", "5000", 500000, ""},
		{"huf", "150000", 150000, ""},
		{"twd", "4500", 4500, ""},
		{"jpy", "1500", 1500, ""},
		{"krw", "12000", 12000, ""},
		{"ugx", "3700", 3700, ""},
		{"kwd", "1230", 1230, ""},
		{"usd", "1099", 1099, ""},
	} {
		got, err := stripe.Extract(&stripe.Payment, []byte(`{"id":"pi_1","amount":`+tc.stripe+`,"amount_received":`+tc.stripe+
			`,"currency":"`+tc.currency+`","status":"succeeded"}`))
		switch {
		case tc.err == "" && (err != nil || got.AmountMinor != tc.want):
			t.Errorf("%s %s: %d, %v; want %d", tc.currency, tc.stripe, got.AmountMinor, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s %s: %d, %v; want an error with %q", tc.currency, tc.stripe, got.AmountMinor, err, tc.err)
		}
		if tc.err == "" {
			back, err := stripe.ISOToProviderMinor(tc.want, tc.currency)
			if err != nil || tc.stripe != strconv.FormatInt(back, 10) {
				t.Errorf("%s: ISOToProviderMinor(%d) = %d, %v; want %s", tc.currency, tc.want, back, err, tc.stripe)
			}
		}
	}
	// The same ISK night through PayPal's decimal amounts and the
	// reconcile contract's ISO minor units is right too.
	paypal := builtin(t, "paypal")
	if got, err := paypal.Extract(&paypal.Payment, []byte(`{"id":"C1","status":"COMPLETED","amount":{"currency_code":"ISK","value":"1500"}}`)); err != nil || got.AmountMinor != 1500 {
		t.Errorf("paypal ISK: %d, %v", got.AmountMinor, err)
	}
}

// TestConditions checks each test of a status rule's condition, on values
// present, absent, null and of other types.
func TestConditions(t *testing.T) {
	t.Parallel()
	body := []byte(`{"n":0,"big":2000,"dec":"10.50","s":"CHARGEBACK","t":true,"f":false,"z":null,"a":{"x":2000.0},"e":"1e3"}`)
	for _, tc := range []struct {
		c    Condition
		want bool
	}{
		{newCondition("n", TestPresent, "true"), true},
		{newCondition("z", TestPresent, "true"), false},
		{newCondition("z", TestPresent, "false"), true},
		{newCondition("nope", TestPresent, "false"), true},
		{newCondition("f", TestPresent, "true"), true},
		{newCondition("s", TestEquals, `"CHARGEBACK"`), true},
		{newCondition("s", TestEquals, `"chargeback"`), false},
		{newCondition("t", TestEquals, "true"), true},
		{newCondition("f", TestEquals, "true"), false},
		{newCondition("big", TestEquals, "2000.00"), true},
		{newCondition("dec", TestEquals, "10.5"), false}, // a string is not a number literal
		{newCondition("big", TestEqualsPath, "a.x"), true},
		{newCondition("big", TestEqualsPath, "n"), false},
		{newCondition("z", TestEqualsPath, "z"), false},
		{newCondition("s", TestEqualsPath, "s"), true},
		{newCondition("n", TestAbove, "0"), false},
		{newCondition("big", TestAbove, "0"), true},
		{newCondition("dec", TestAbove, "10.49"), true},
		{newCondition("dec", TestAbove, "10.5"), false},
		{newCondition("e", TestAbove, "0"), false}, // a string must be a plain decimal
		{newCondition("s", TestAbove, "0"), false},
		{newCondition("nope", TestAbove, "-1"), false},
	} {
		if got := tc.c.holds(&answer{body: body}); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.c, got, tc.want)
		}
	}
	// Huge exponents are refused rather than expanded.
	huge := newCondition("x", TestAbove, "0")
	if huge.holds(&answer{body: []byte(`{"x":1e999999999}`)}) {
		t.Error("1e999999999 compared")
	}
}

// TestAccount: {account} is the account_id, or what the map makes of it,
// kept only with the provider's prefix; the request omits an empty header.
func TestAccount(t *testing.T) {
	t.Parallel()
	stripe := builtin(t, "stripe")
	for id, want := range map[string]string{"acct_1Nv0FGQ9RKHgCVdK": "acct_1Nv0FGQ9RKHgCVdK", "player_17": "", "": "",
		"acct_000123": "", "acct_1Nv0FGQ9RKHgCVdK\n": ""} {
		if got, err := stripe.Account.Resolve(id); err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", id, got, err, want)
		}
	}
	if !stripe.Payment.Request.UsesAccount() || !stripe.Kinds["refund"].Request.UsesAccount() || builtin(t, "square").Payment.Request.UsesAccount() {
		t.Error("UsesAccount")
	}
	a := Account{Map: map[string]string{"player_17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""}, MapFile: "accounts.json", Match: stripe.Account.Match}
	for id, want := range map[string]string{"player_17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""} {
		if got, err := a.Resolve(id); err != nil || got != want {
			t.Errorf("mapped Resolve(%q) = %q, %v; want %q", id, got, err, want)
		}
	}
	_, err := a.Resolve("player_99")
	var ue *UnmappedAccountError
	if !errors.As(err, &ue) || err.Error() != `account "player_99" is not in the account map accounts.json` {
		t.Errorf("unmapped: %v", err)
	}
}

// TestAccountMapFiles: a profile names its account map relative to itself;
// a bad map is bad input naming the map file, the line and the key.
func TestAccountMapFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	profileJSON := func(mapFile string) string {
		return `{"name": "acme", "request": {"path": "/tx/{id}", "headers": {"Acme-Account": "{account}"}}, "auth": {"type": "none"},
  "record": {"id": "id", "amount": "amount", "currency": "currency", "status": "status"},
  "account": {"map": "` + mapFile + `"}}`
	}
	write("accounts.json", `{"player_17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""}`)
	p, err := Load(write("acme.json", profileJSON("accounts.json")))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Account.Resolve("player_17"); err != nil || got != "acct_1Nv0FGQ9RKHgCVdK" || p.Account.MapFile != filepath.Join(dir, "accounts.json") {
		t.Errorf("Resolve = %q, %v (map %s)", got, err, p.Account.MapFile)
	}
	for _, tc := range []struct{ name, data, want string }{
		{"dup.json", "{\"a\": \"acct_1\",\n\"a\": \"acct_2\"}", "dup.json:2: a: duplicate key (first on line 1)"},
		{"number.json", `{"a": 7}`, "number.json:1: a: want a string, not a number"},
		{"empty-key.json", `{"": "acct_1"}`, `empty-key.json:1: not an account_id a payment file can hold: empty`},
		{"newline.json", `{"a": "acct_\n1"}`, `newline.json:1: a: not a provider account: contains the control character U+000A`},
		{"array.json", `["a"]`, "array.json:1: want a JSON object, not an array"},
	} {
		path := write(tc.name, tc.data)
		_, err := Load(write("p-"+tc.name, profileJSON(tc.name)))
		var pe *Error
		if !errors.As(err, &pe) || err.Error() != filepath.Join(dir, tc.want) {
			t.Errorf("%s: %v\nwant %s", tc.name, err, filepath.Join(dir, tc.want))
		}
		if _, err := LoadAccountMap(path); err == nil {
			t.Errorf("%s: LoadAccountMap accepted it", tc.name)
		}
	}
	_, err = Load(write("nomap.json", profileJSON("absent.json")))
	if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, "nomap.json")+":3: account.map: read account map: ") {
		t.Errorf("absent map: %v", err)
	}
}

// FuzzAccountMap: the map parser never panics; what it accepts maps ids a
// payment file can hold to header-safe values.
func FuzzAccountMap(f *testing.F) {
	f.Add([]byte(`{"player_17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""}`))
	f.Add([]byte(`{"a": "b", "a": "c"}`))
	f.Add([]byte(`{"\u0000": 1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseAccountMap("m.json", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "m.json" {
				t.Fatalf("error %v is not an *Error naming the file", err)
			}
			return
		}
		for k, v := range m {
			if k == "" || strings.ContainsAny(k+v, "\r\n\x00") {
				t.Fatalf("accepted %q: %q", k, v)
			}
		}
	})
}

// TestAnswerReadsAsGJSON: the reader that scans once per top-level key
// reads every path as gjson does, cached or not, nested, in arrays, below
// scalars and past its cache's size.
func TestAnswerReadsAsGJSON(t *testing.T) {
	t.Parallel()
	body := []byte(`{"a":{"b":{"c":1},"d":[{"e":"x"},{"e":"y"}]},"s":"str","n":null,"arr":[1,{"k":2}],` +
		`"t1":1,"t2":2,"t3":3,"t4":4,"t5":5,"t6":6,"t7":7,"t8":8,"t9":{"z":9},"e-x":{"$y":true}}`)
	paths := []string{"a.b.c", "a.d.1.e", "a.d.0.e", "a.b", "s", "s.x", "n", "n.x", "arr.1.k", "arr.0", "arr.5", "nope", "nope.x",
		"t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9.z", "t9.z", "e-x.$y", "a.b.c"}
	a := answer{body: body}
	for _, p := range paths {
		got, want := a.get(p), gjson.GetBytes(body, p)
		if got.Raw != want.Raw || got.Exists() != want.Exists() {
			t.Errorf("%s: %q (%v), gjson %q (%v)", p, got.Raw, got.Exists(), want.Raw, want.Exists())
		}
	}
}
