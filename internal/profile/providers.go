package profile

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Providers is a providers file: the providers of one night, each with its
// profile, URL, credentials' environment variables and limit, and the
// default one for payments that name none.
//
//	{"providers": {
//	  "stripe": {"profile": "stripe", "url": "https://api.stripe.com", "token_env": "STRIPE_SECRET_KEY", "rate": 80, "burst": 10},
//	  "legacy": {"profile": "/etc/reconcile/legacy.json", "url": "http://10.0.0.5:8080", "token_env": "LEGACY_TOKEN", "rate": 20, "burst": 5}
//	}, "default": "stripe"}
type Providers struct {
	// File is the file's name, as given.
	File string
	// Default names the provider of payments that name none.
	Default string
	// List holds the providers in file order.
	List []ProviderEntry
}

// ProviderEntry is one provider of a providers file.
type ProviderEntry struct {
	// Name is the provider's key in the file (payment files name it in
	// their provider column).
	Name string
	// Line is the line of the entry's key.
	Line int
	// Profile is the profile (a built-in or a file, relative to the
	// providers file), with its Auth's environment variables replaced by
	// the entry's (credentials come only from the variables the entry
	// names) and, when the entry names one, its account map.
	Profile *Profile
	// URL is the provider's base URL; empty: the profile's.
	URL string
	// Rate and Burst seed the provider's shared limiter; zero: keep the
	// stored setting.
	Rate  float64
	Burst int
	// EnvKeys maps each environment variable the entry names to its key in
	// the file (providers.stripe.token_env), for errors about it.
	EnvKeys map[string]string
}

// Names returns the providers' names in file order.
func (p *Providers) Names() []string {
	out := make([]string, len(p.List))
	for i, e := range p.List {
		out[i] = e.Name
	}
	return out
}

// Lookup returns the entry of name.
func (p *Providers) Lookup(name string) (ProviderEntry, bool) {
	for _, e := range p.List {
		if e.Name == name {
			return e, true
		}
	}
	return ProviderEntry{}, false
}

// LoadProviders reads and parses a providers file.
func LoadProviders(file string) (*Providers, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read providers file: %w", err)
	}
	return ParseProviders(file, data)
}

// ParseProviders parses a providers file. file names it in errors and
// anchors relative profile paths. Every problem is an [*Error] with the
// file, the line and the key: an unknown key, a duplicate or malformed
// name, an unknown or bad profile, a URL that is not absolute, a rate that
// is not positive, credentials the profile's auth strategy does not read,
// an account map the profile would not use or that is bad (named by its own
// file and line), a default that is not one of the providers.
func ParseProviders(file string, data []byte) (*Providers, error) {
	root, err := parseTree(file, data)
	if err != nil {
		return nil, err
	}
	d := parser{file: file}
	out := &Providers{File: file}
	var hasProviders bool
	var defaultNode node
	err = d.object(root, "", fields{
		"providers": func(n node, key string) error {
			hasProviders = true
			return d.object(n, key, nil, func(m member, key string) error {
				if !isName(m.key) {
					return &Error{File: file, Line: m.line, Key: key, Msg: "not a provider name: want lower-case letters, digits, _ and - (at most 40)"}
				}
				e, err := d.providerEntry(m, key)
				if err != nil {
					return err
				}
				out.List = append(out.List, e)
				return nil
			})
		},
		"default": func(n node, key string) (err error) {
			defaultNode = n
			out.Default, err = d.str(n, key)
			return err
		},
	}, nil)
	if err != nil {
		return nil, err
	}
	if !hasProviders || len(out.List) == 0 {
		return nil, &Error{File: file, Line: root.line, Key: "providers", Msg: "required: at least one provider"}
	}
	switch {
	case out.Default == "" && len(out.List) == 1:
		out.Default = out.List[0].Name
	case out.Default == "":
		return nil, &Error{File: file, Line: root.line, Key: "default", Msg: "required with several providers: the provider of payments that name none"}
	default:
		if _, ok := out.Lookup(out.Default); !ok {
			return nil, d.errf(defaultNode, "default", "%q is not one of the providers (%s)", out.Default, strings.Join(out.Names(), ", "))
		}
	}
	return out, nil
}

// providerEntry decodes one provider of the file.
func (d *parser) providerEntry(m member, key string) (ProviderEntry, error) {
	e := ProviderEntry{Name: m.key, Line: m.line, EnvKeys: map[string]string{}}
	var profileName, accountMap string
	var profileNode, accountMapNode node
	env := map[string]string{} // key → variable
	envNode := map[string]node{}
	envField := func(name string) func(node, string) error {
		return func(n node, key string) error {
			v, err := d.str(n, key)
			if err != nil {
				return err
			}
			if !isEnvName(v) {
				return d.errf(n, key, "%q is not an environment variable name", v)
			}
			env[name], envNode[name] = v, n
			e.EnvKeys[v] = key
			return nil
		}
	}
	err := d.object(m.val, key, fields{
		"profile": func(n node, key string) (err error) {
			profileNode = n
			profileName, err = d.str(n, key)
			return err
		},
		"url": func(n node, key string) (err error) {
			if e.URL, err = d.str(n, key); err != nil {
				return err
			}
			u, perr := url.Parse(e.URL)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				return d.errf(n, key, "want an absolute http or https URL without credentials")
			}
			return nil
		},
		"rate": func(n node, key string) error {
			if n.kind != kindNumber {
				return d.typeErr(n, key, kindNumber)
			}
			v, err := strconv.ParseFloat(n.text, 64)
			if err != nil || !(v > 0) || math.IsInf(v, 0) {
				return d.errf(n, key, "%s: want a positive number of requests per second", n.text)
			}
			e.Rate = v
			return nil
		},
		"burst": func(n node, key string) (err error) {
			e.Burst, err = d.integer(n, key, 1, 1_000_000)
			return err
		},
		"account_map": func(n node, key string) (err error) {
			accountMapNode = n
			if accountMap, err = d.str(n, key); err == nil && accountMap == "" {
				return d.errf(n, key, "empty: want the account map's file, relative to the providers file")
			}
			return err
		},
		"token_env":         envField("token_env"),
		"username_env":      envField("username_env"),
		"password_env":      envField("password_env"),
		"client_id_env":     envField("client_id_env"),
		"client_secret_env": envField("client_secret_env"),
	}, nil)
	if err != nil {
		return e, err
	}
	if profileName == "" {
		return e, &Error{File: d.file, Line: m.line, Key: key + ".profile", Msg: "required: a built-in profile (" + strings.Join(BuiltinNames(), ", ") + ") or a profile file"}
	}
	if e.Burst > 0 && e.Rate == 0 {
		return e, &Error{File: d.file, Line: m.line, Key: key + ".burst", Msg: "needs rate"}
	}
	nameOrFile := profileName
	if _, builtin := Builtin(profileName); !builtin && !filepath.IsAbs(profileName) && strings.ContainsAny(profileName, `/\.`) {
		nameOrFile = filepath.Join(filepath.Dir(d.file), profileName)
	}
	p, err := Load(nameOrFile)
	if err != nil {
		return e, d.errf(profileNode, key+".profile", "%v", err)
	}
	if e.URL == "" && p.BaseURL == "" {
		return e, &Error{File: d.file, Line: m.line, Key: key + ".url", Msg: fmt.Sprintf("required: profile %s has no default base URL", p.Name)}
	}
	// Credentials come only from the variables the entry names.
	cp := *p
	a := Auth{Type: p.Auth.Type, Optional: p.Auth.Optional, TokenURL: p.Auth.TokenURL, Scopes: p.Auth.Scopes, InParams: p.Auth.InParams}
	allowed := map[AuthType][]string{
		AuthBearer:                  {"token_env"},
		AuthBasic:                   {"username_env", "password_env"},
		AuthOAuth2ClientCredentials: {"client_id_env", "client_secret_env"},
	}[p.Auth.Type]
	for _, k := range []string{"token_env", "username_env", "password_env", "client_id_env", "client_secret_env"} {
		n, ok := envNode[k]
		if ok && !slices.Contains(allowed, k) {
			want := "no credentials"
			if len(allowed) > 0 {
				want = strings.Join(allowed, " and ")
			}
			return e, d.errf(n, key+"."+k, "profile %s authenticates with %s: it reads %s", p.Name, p.Auth.Type, want)
		}
	}
	a.TokenEnv, a.UsernameEnv, a.PasswordEnv = env["token_env"], env["username_env"], env["password_env"]
	a.ClientIDEnv, a.ClientSecretEnv = env["client_id_env"], env["client_secret_env"]
	var missing []string
	switch p.Auth.Type {
	case AuthBearer:
		if a.TokenEnv == "" && !a.Optional {
			missing = []string{"token_env"}
		}
	case AuthBasic:
		if a.UsernameEnv == "" {
			missing = []string{"username_env"}
		}
	case AuthOAuth2ClientCredentials:
		for _, k := range []string{"client_id_env", "client_secret_env"} {
			if env[k] == "" {
				missing = append(missing, k)
			}
		}
	}
	if len(missing) > 0 {
		return e, &Error{File: d.file, Line: m.line, Key: key + "." + missing[0],
			Msg: fmt.Sprintf("required: profile %s authenticates with %s; name the environment variable(s) %s", p.Name, p.Auth.Type, strings.Join(missing, " and "))}
	}
	cp.Auth = a
	if accountMap != "" {
		if !cp.Payment.Request.UsesAccount() && !cp.kindsUseAccount() {
			return e, d.errf(accountMapNode, key+".account_map", "profile %s sends no {account}: the map would not be used", p.Name)
		}
		path := accountMap
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(d.file), path)
		}
		m, err := LoadAccountMap(path)
		if err != nil {
			var pe *Error
			if errors.As(err, &pe) {
				return e, err
			}
			return e, d.errf(accountMapNode, key+".account_map", "%v", err)
		}
		cp.Account.Map, cp.Account.MapFile = m, path
	}
	e.Profile = &cp
	return e, nil
}
