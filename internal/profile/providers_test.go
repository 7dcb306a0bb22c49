package profile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseProviders(t *testing.T) {
	t.Parallel()
	const good = `{"providers": {
  "stripe": {"profile": "stripe", "url": "https://api.stripe.com", "token_env": "STRIPE_SECRET_KEY", "rate": 80, "burst": 10},
  "wallet": {"profile": "paypal", "client_id_env": "PP_ID", "client_secret_env": "PP_SECRET", "rate": 2.5},
  "legacy": {"profile": "reconcile", "url": "http://10.0.0.5:8080"}
}, "default": "stripe"}`
	p, err := ParseProviders("providers.json", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if p.Default != "stripe" || len(p.List) != 3 {
		t.Fatalf("parsed %+v", p)
	}
	s, w, l := p.List[0], p.List[1], p.List[2]
	if s.Name != "stripe" || s.Line != 2 || s.Rate != 80 || s.Burst != 10 || s.Profile.Auth.TokenEnv != "STRIPE_SECRET_KEY" ||
		s.EnvKeys["STRIPE_SECRET_KEY"] != "providers.stripe.token_env" {
		t.Errorf("stripe: %+v", s)
	}
	if w.URL != "" || w.Profile.BaseURL == "" || w.Rate != 2.5 || w.Burst != 0 || w.Profile.Auth.ClientIDEnv != "PP_ID" {
		t.Errorf("wallet: %+v", w)
	}
	// The built-in's own variable is not read: the entry names none.
	if l.Profile.Auth.TokenEnv != "" || !l.Profile.Auth.Optional {
		t.Errorf("legacy auth: %+v", l.Profile.Auth)
	}
	if b, _ := Builtin("stripe"); b.Auth.TokenEnv != "RECONCILE_PROVIDER_TOKEN" {
		t.Errorf("the built-in profile was changed: %+v", b.Auth)
	}
}

// TestProvidersAccountMap: a providers file entry gives a built-in profile
// an account map, read beside the providers file; the built-in stays as it
// is for other entries.
func TestProvidersAccountMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "connect.json"), []byte(`{"player-17": "acct_1Nv0FGQ9RKHgCVdK", "house": ""}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := ParseProviders(filepath.Join(dir, "providers.json"), []byte(`{"providers": {
  "cards": {"profile": "stripe", "token_env": "K", "account_map": "connect.json"},
  "plain": {"profile": "stripe", "token_env": "K2"}}, "default": "cards"}`))
	if err != nil {
		t.Fatal(err)
	}
	cards, _ := p.Lookup("cards")
	if got, err := cards.Profile.Account.Resolve("player-17"); err != nil || got != "acct_1Nv0FGQ9RKHgCVdK" {
		t.Errorf("cards: %q, %v", got, err)
	}
	if _, err := cards.Profile.Account.Resolve("player-18"); err == nil {
		t.Error("cards: an account the map lacks resolved")
	}
	plain, _ := p.Lookup("plain")
	if got, err := plain.Profile.Account.Resolve("player-17"); err != nil || got != "" || plain.Profile.Account.Map != nil {
		t.Errorf("plain: %q, %v", got, err)
	}
}

func TestParseProvidersErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"name": "x"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dup-map.json"), []byte("{\"a\": \"acct_1\",\n\"a\": \"acct_2\"}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, in, want string }{
		{"not an object", `[]`, "p.json:1: want a JSON object, not an array"},
		{"no providers", `{"default": "a"}`, "p.json:1: providers: required: at least one provider"},
		{"unknown key", `{"providers": {"a": {"profile": "reconcile", "url": "http://x", "rat": 1}}}`,
			"p.json:1: providers.a.rat: unknown key (want account_map, burst, client_id_env, client_secret_env, password_env, profile, rate, token_env, url, username_env)"},
		{"duplicate", "{\"providers\": {\n\"a\": {\"profile\": \"reconcile\", \"url\": \"http://x\"},\n\"a\": {\"profile\": \"reconcile\", \"url\": \"http://y\"}}}",
			"p.json:3: a: duplicate key (first on line 2)"},
		{"bad name", `{"providers": {"Stripe": {"profile": "stripe", "token_env": "K"}}}`,
			"p.json:1: providers.Stripe: not a provider name: want lower-case letters, digits, _ and - (at most 40)"},
		{"unknown profile", "{\"providers\": {\n\"a\": {\n\"profile\": \"strype\", \"token_env\": \"K\"}}}",
			`p.json:3: providers.a.profile: profile "strype": no built-in profile of that name (built-ins: reconcile, paypal, square, stripe) and not a file name`},
		{"bad profile file", `{"providers": {"a": {"profile": "bad.json", "url": "http://x"}}}`, "p.json:1: providers.a.profile: "},
		{"negative rate", "{\"providers\": {\"a\": {\"profile\": \"reconcile\", \"url\": \"http://x\",\n\"rate\": -5}}}",
			"p.json:2: providers.a.rate: -5: want a positive number of requests per second"},
		{"burst without rate", `{"providers": {"a": {"profile": "reconcile", "url": "http://x", "burst": 5}}}`, "p.json:1: providers.a.burst: needs rate"},
		{"no url", `{"providers": {"a": {"profile": "reconcile"}}}`, "p.json:1: providers.a.url: required: profile reconcile has no default base URL"},
		{"credentials the strategy does not read", `{"providers": {"a": {"profile": "stripe", "client_id_env": "X"}}}`,
			"p.json:1: providers.a.client_id_env: profile stripe authenticates with bearer: it reads token_env"},
		{"missing credentials", `{"providers": {"a": {"profile": "paypal", "client_id_env": "X"}}}`,
			"p.json:1: providers.a.client_secret_env: required: profile paypal authenticates with oauth2_client_credentials; name the environment variable(s) client_secret_env"},
		{"bad env name", `{"providers": {"a": {"profile": "stripe", "token_env": "A-B"}}}`,
			`p.json:1: providers.a.token_env: "A-B" is not an environment variable name`},
		{"no default", `{"providers": {"a": {"profile": "reconcile", "url": "http://x"}, "b": {"profile": "reconcile", "url": "http://y"}}}`,
			"p.json:1: default: required with several providers: the provider of payments that name none"},
		{"unknown default", `{"providers": {"a": {"profile": "reconcile", "url": "http://x"}}, "default": "b"}`,
			`p.json:1: default: "b" is not one of the providers (a)`},
		{"account map of a profile without {account}", `{"providers": {"a": {"profile": "square", "token_env": "K", "account_map": "m.json"}}}`,
			"p.json:1: providers.a.account_map: profile square sends no {account}: the map would not be used"},
		{"bad account map", `{"providers": {"a": {"profile": "stripe", "token_env": "K", "account_map": "dup-map.json"}}}`,
			"dup-map.json:2: a: duplicate key (first on line 1)"},
		{"empty account map name", `{"providers": {"a": {"profile": "stripe", "token_env": "K", "account_map": ""}}}`,
			"p.json:1: providers.a.account_map: empty: want the account map's file, relative to the providers file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseProviders(filepath.Join(dir, "p.json"), []byte(tc.in))
			got := ""
			if err != nil {
				got = err.Error()
			}
			want := filepath.Join(dir, tc.want)
			if tc.name == "bad profile file" {
				if len(got) < len(want) || got[:len(want)] != want {
					t.Errorf("error %q, want it to start with %q", got, want)
				}
				return
			}
			if got != want {
				t.Errorf("error\n %q\nwant\n %q", got, want)
			}
		})
	}
}
