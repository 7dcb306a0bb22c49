package profile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBuiltinsParse(t *testing.T) {
	t.Parallel()
	names := BuiltinNames()
	if strings.Join(names, ",") != "reconcile,paypal,square,stripe" {
		t.Fatalf("BuiltinNames = %v", names)
	}
	for _, name := range names {
		p, ok := Builtin(name)
		if !ok || p.Name != name || p.Source != "built-in" || p.Description == "" {
			t.Errorf("Builtin(%q) = %+v, %v", name, p, ok)
		}
	}
	if _, ok := Builtin("../parse"); ok {
		t.Error("Builtin accepted a path")
	}
	if _, err := Load("strype"); err == nil || !strings.Contains(err.Error(), "built-ins: reconcile, paypal, square, stripe") {
		t.Errorf("Load(strype) = %v, want the list of built-ins", err)
	}
}

func TestBadProfiles(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"above-not-number.json":       "above-not-number.json:7: status_rules[0].when[0].above: want a number, not a string",
		"account-bad-match.json":      "account-bad-match.json:6: account.match: \"^acct_[A-Z\": not a regular expression: missing closing ]: `[A-Z`",
		"account-empty-map.json":      "account-empty-map.json:6: account.map: empty: want the account map's file, relative to the profile",
		"auth-key-of-other-type.json": "auth-key-of-other-type.json:6: auth.client_secret_env: not used by auth type bearer",
		"bad-stop-threshold.json":     "bad-stop-threshold.json:6: stop_after_not_found: 5000: want an integer from 0 to 1000",
		"condition-two-tests.json":    "condition-two-tests.json:7: status_rules[0].when[0]: several tests (equals, present): want exactly one; give each its own condition",
		"condition-without-test.json": "condition-without-test.json:7: status_rules[0].when[0]: no test: want one of above, equals, equals_path, present",
		"empty-prefix.json":           `empty-prefix.json:7: kinds.refund.id_prefixes[0]: "": want 1 to 64 bytes of an id's text`,
		"exponents-without-minor.json": "exponents-without-minor.json:6: currency_exponents: used only by minor amounts, and no record here is minor: " +
			"decimal, milli and units_nanos are major units, converted with ISO 4217's exponent",
		"kind-without-request.json":     "kind-without-request.json:7: kinds.refund.request: required key missing: each kind is asked for with its own request",
		"overlapping-prefixes.json":     `overlapping-prefixes.json:8: kinds.dispute.id_prefixes[1]: "r" overlaps "re_" of kind refund (line 7): an id cannot tell the kinds apart`,
		"rule-bad-status.json":          `rule-bad-status.json:8: status_rules[0].status: "chargeback" is not a ledger status (want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed)`,
		"rule-empty-when.json":          "rule-empty-when.json:7: status_rules[0].when: no condition: give at least one (a rule that always holds belongs in status_map)",
		"rule-without-effect.json":      "rule-without-effect.json:7: status_rules[0]: gives neither a status nor an amount",
		"rule-without-when.json":        "rule-without-when.json:7: status_rules[0].when: required key missing: the conditions, all of which must hold",
		"unknown-kind.json":             "unknown-kind.json:7: kinds.chargeback: unknown kind (want refund or dispute; a payment is the top-level request and record)",
		"unknown-placeholder.json":      "unknown-placeholder.json:4: request.headers.Acme-Account: unknown placeholder {acount} (want {id} or {account})",
		"bad-exponent.json":             "bad-exponent.json:6: currency_exponents.XBT: 19: want an integer from 0 to 18",
		"bad-ledger-status.json":        `bad-ledger-status.json:8: status_map.BACK: "returned" is not a ledger status (want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed)`,
		"bad-path.json":                 `bad-path.json:5: record.amount: "data.#.amount" is not a path: want dot-separated keys of letters, digits, _, - and $ (array elements by number)`,
		"bad-status.json":               "bad-status.json:7: errors[0].status: 700: want an integer from 100 to 599",
		"duplicate-key.json":            "duplicate-key.json:6: name: duplicate key (first on line 2)",
		"missing-record.json":           "missing-record.json:1: record: required key missing",
		"no-id-placeholder.json":        "no-id-placeholder.json:3: request: the transaction id ({id}) appears in neither the path, the query nor the body",
		"oauth2-no-token-url.json":      "oauth2-no-token-url.json:5: auth.token_url: required by auth type oauth2_client_credentials",
		"secret-in-headers.json":        "secret-in-headers.json:6: request.headers.Authorization: credentials belong in auth (from the environment), not in the profile",
		"syntax-error.json":             "syntax-error.json:4: not valid JSON: invalid character ',' looking for beginning of object key string",
		"truncated.json":                "truncated.json:4: not valid JSON: unexpected end of file",
		"unknown-amount-format.json":    `unknown-amount-format.json:8: record.amount_format: unknown "cents" (want minor, decimal, milli, units_nanos)`,
		"unknown-auth.json":             `unknown-auth.json:5: auth.type: unknown "api_key" (want none, bearer, basic, oauth2_client_credentials)`,
		"unknown-class.json":            `unknown-class.json:8: errors[1].class: unknown "slow_down" (want missing, throttle, locked, retry, permanent, auth, wrong_account)`,
		"unknown-key.json":              "unknown-key.json:6: status_mapping: unknown key (want account, auth, base_url, currency_exponents, description, errors, hints, kinds, list, name, record, request, status_map, status_rules, stop_after_not_found)",
		"unknown-nested-key.json":       "unknown-nested-key.json:5: request.methd: unknown key (want body, headers, idempotency_header, method, path, query)",
		"list-bad-placeholder.json":     "list-bad-placeholder.json:8: list.query.cursor: unknown placeholder {id} (want {from}, {to}, {cursor} or {limit})",
		"list-no-cursor.json":           "list-no-cursor.json:6: list.query: {cursor} appears in neither the query nor the headers: every page must be asked for the window and the cursor",
		"list-page-size.json":           "list-page-size.json:9: list.page_size: 5000: want an integer from 1 to 1000",
		"list-paging-without-next.json": "list-paging-without-next.json:11: list.paging.next: required by style cursor: the path of the next page's cursor",
		"list-unknown-paging.json":      `list-unknown-paging.json:11: list.paging.style: unknown "offset" (want cursor, last_id, page)`,
		"list-without-records.json":     "list-without-records.json:6: list.records: required key missing",
		"value-without-path.json":       "value-without-path.json:8: errors[0].value: needs a path",
		"wrong-type.json":               "wrong-type.json:6: errors: want an array, not an object",
	}
	dir := filepath.Join("..", "..", "testdata", "profiles", "bad")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no bad profiles: %v", err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Parse(name, data)
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%s: Parse = %v, want an *Error", name, err)
			continue
		}
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: no expected message; got %q", name, err)
			continue
		}
		if err.Error() != w {
			t.Errorf("%s:\n got %s\nwant %s", name, err, w)
		}
		if pe.Line < 1 {
			t.Errorf("%s: no line", name)
		}
		delete(want, name)
	}
	for name := range want {
		t.Errorf("%s: expected in %s but not there", name, dir)
	}
}

// TestLoadFile checks that a file is read and named in errors by its path.
func TestLoadFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "acme.json")
	if err := os.WriteFile(path, []byte(`{"name": "acme", "request": {"path": "/x/{id}"}, "auth": {"type": "none"},
		"record": {"id": "id", "amount": "a", "currency": "c", "status": "s"}, "bogus": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	if err == nil || !strings.HasPrefix(err.Error(), path+":2: bogus: unknown key") {
		t.Errorf("Load = %v", err)
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	p, err := Parse("min.json", []byte(`{"name":"min","request":{"path":"/x/{id}"},"auth":{"type":"bearer"},
		"record":{"id":"id","amount":"a","currency":"c","status":"s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Payment.Request.Method != "GET" || p.Payment.Reading.Record.AmountFormat != AmountMinor || p.Auth.TokenEnv != "RECONCILE_PROVIDER_TOKEN" ||
		p.Hints.RetryAfter != "Retry-After" || p.Payment.Request.IdempotencyHeader != "" || p.Payment.Reading.StatusMap != nil ||
		p.Kinds != nil || p.StopAfterNotFound != DefaultStopAfterNotFound || p.Payment.Kind != "payment" {
		t.Errorf("defaults: %+v", p)
	}
}
