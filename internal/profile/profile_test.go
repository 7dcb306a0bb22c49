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
		"auth-key-of-other-type.json": "auth-key-of-other-type.json:6: auth.client_secret_env: not used by auth type bearer",
		"bad-exponent.json":           "bad-exponent.json:6: currency_exponents.XBT: 19: want an integer from 0 to 18",
		"bad-ledger-status.json":      `bad-ledger-status.json:8: status_map.BACK: "returned" is not a ledger status (want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed)`,
		"bad-path.json":               `bad-path.json:5: record.amount: "data.#.amount" is not a path: want dot-separated keys of letters, digits, _, - and $ (array elements by number)`,
		"bad-status.json":             "bad-status.json:7: errors[0].status: 700: want an integer from 100 to 599",
		"duplicate-key.json":          "duplicate-key.json:6: name: duplicate key (first on line 2)",
		"missing-record.json":         "missing-record.json:1: record: required key missing",
		"no-id-placeholder.json":      "no-id-placeholder.json:3: request: the transaction id ({id}) appears in neither the path, the query nor the body",
		"oauth2-no-token-url.json":    "oauth2-no-token-url.json:5: auth.token_url: required by auth type oauth2_client_credentials",
		"secret-in-headers.json":      "secret-in-headers.json:6: request.headers.Authorization: credentials belong in auth (from the environment), not in the profile",
		"syntax-error.json":           "syntax-error.json:4: not valid JSON: invalid character ',' looking for beginning of object key string",
		"truncated.json":              "truncated.json:4: not valid JSON: unexpected end of file",
		"unknown-amount-format.json":  `unknown-amount-format.json:8: record.amount_format: unknown "cents" (want minor, decimal, milli, units_nanos)`,
		"unknown-auth.json":           `unknown-auth.json:5: auth.type: unknown "api_key" (want none, bearer, basic, oauth2_client_credentials)`,
		"unknown-class.json":          `unknown-class.json:8: errors[1].class: unknown "slow_down" (want missing, throttle, locked, retry, permanent, auth)`,
		"unknown-key.json":            "unknown-key.json:6: status_mapping: unknown key (want auth, base_url, currency_exponents, description, errors, hints, name, record, request, status_map)",
		"unknown-nested-key.json":     "unknown-nested-key.json:5: request.methd: unknown key (want body, headers, idempotency_header, method, path, query)",
		"value-without-path.json":     "value-without-path.json:8: errors[0].value: needs a path",
		"wrong-type.json":             "wrong-type.json:6: errors: want an array, not an object",
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
	if p.Request.Method != "GET" || p.Record.AmountFormat != AmountMinor || p.Auth.TokenEnv != "RECONCILE_PROVIDER_TOKEN" ||
		p.Hints.RetryAfter != "Retry-After" || p.Request.IdempotencyHeader != "" || p.StatusMap != nil {
		t.Errorf("defaults: %+v", p)
	}
}
