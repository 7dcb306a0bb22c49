package profile

import (
	"cmp"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/reconcile/reconcile/internal/payments"
)

// MaxFileSize is the largest profile file read, in bytes.
const MaxFileSize = 1 << 20

// Load returns the built-in profile called nameOrFile or, when there is none
// of that name, parses the file and loads the account map it names. A name
// that is neither is an error listing the built-ins.
func Load(nameOrFile string) (*Profile, error) {
	if p, ok := Builtin(nameOrFile); ok {
		return p, nil
	}
	if !strings.ContainsAny(nameOrFile, `/\.`) {
		return nil, fmt.Errorf("profile %q: no built-in profile of that name (built-ins: %s) and not a file name",
			nameOrFile, strings.Join(BuiltinNames(), ", "))
	}
	f, err := os.Open(nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("open profile: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open profile: %w", err)
	}
	if st.Size() > MaxFileSize {
		return nil, &Error{File: nameOrFile, Msg: fmt.Sprintf("larger than %d bytes", MaxFileSize)}
	}
	data := make([]byte, st.Size())
	if _, err := f.ReadAt(data, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("read profile %s: %w", nameOrFile, err)
	}
	p, err := Parse(nameOrFile, data)
	if err != nil {
		return nil, err
	}
	if err := p.loadAccountMap(nameOrFile); err != nil {
		return nil, err
	}
	return p, nil
}

// maxStopAfterNotFound bounds stop_after_not_found: past a few hundred
// items the rule would only let a wrong URL mark more items missing.
const maxStopAfterNotFound = 1000

// Parse parses a profile file. file names it in errors. Every problem is an
// [*Error] with the file, the line and the key. An account map the profile
// names is not read (see [Load]).
func Parse(file string, data []byte) (*Profile, error) {
	root, err := parseTree(file, data)
	if err != nil {
		return nil, err
	}
	d := parser{file: file}
	p := &Profile{Source: file, StopAfterNotFound: DefaultStopAfterNotFound}
	p.Hints.RetryAfter = "Retry-After"
	p.Payment = newObject(payments.KindPayment)
	var hasRequest, hasAuth, hasRecord bool
	var exponentsNode node
	err = d.object(root, "", fields{
		"name": func(n node, key string) (err error) {
			if p.Name, err = d.str(n, key); err != nil {
				return err
			}
			if !isName(p.Name) {
				return d.errf(n, key, "%q: want lower-case letters, digits, _ and - (at most 40)", p.Name)
			}
			return nil
		},
		"description": func(n node, key string) (err error) { p.Description, err = d.str(n, key); return err },
		"base_url": func(n node, key string) (err error) {
			if p.BaseURL, err = d.str(n, key); err != nil {
				return err
			}
			u, perr := url.Parse(p.BaseURL)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
				return d.errf(n, key, "want an absolute http or https URL without credentials")
			}
			return nil
		},
		"request": func(n node, key string) error { hasRequest = true; return d.request(n, key, &p.Payment.Request) },
		"auth":    func(n node, key string) error { hasAuth = true; return d.auth(n, key, &p.Auth) },
		"record": func(n node, key string) error {
			hasRecord = true
			return d.record(n, key, &p.Payment.Reading.Record)
		},
		"status_map":   func(n node, key string) error { return d.statusMap(n, key, &p.Payment.Reading) },
		"status_rules": func(n node, key string) error { return d.statusRules(n, key, &p.Payment.Reading) },
		"kinds":        func(n node, key string) error { return d.kinds(n, key, p) },
		"list": func(n node, key string) error {
			p.List = &List{}
			return d.list(n, key, p.List)
		},
		"account": func(n node, key string) error { return d.account(n, key, &p.Account) },
		"currency_exponents": func(n node, key string) error {
			exponentsNode = n
			p.Exponents = map[string]int{}
			return d.object(n, key, nil, func(m member, key string) error {
				if !isCurrency(m.key) {
					return d.errf(m.val, key, "not a currency code: want three upper-case letters")
				}
				v, err := d.integer(m.val, key, 0, maxExponent)
				p.Exponents[m.key] = v
				return err
			})
		},
		"errors": func(n node, key string) error {
			if n.kind != kindArray {
				return d.typeErr(n, key, kindArray)
			}
			for i, e := range n.elems {
				r, err := d.rule(e, fmt.Sprintf("%s[%d]", key, i))
				if err != nil {
					return err
				}
				p.Rules = append(p.Rules, r)
				p.needsBody = p.needsBody || r.Path != "" || r.Contains != ""
			}
			return nil
		},
		"hints": func(n node, key string) error {
			h := &p.Hints
			header := func(dst *string) func(node, string) error {
				return func(n node, key string) (err error) {
					if *dst, err = d.str(n, key); err != nil {
						return err
					}
					if *dst != "" && !isToken(*dst) {
						return d.errf(n, key, "%q is not a header name", *dst)
					}
					return nil
				}
			}
			return d.object(n, key, fields{
				"retry_after": header(&h.RetryAfter), "should_retry": header(&h.ShouldRetry),
				"rate_limit_remaining": header(&h.Remaining), "rate_limit_reset": header(&h.Reset),
				"rate_limit_limit": header(&h.Limit),
			}, nil)
		},
		"stop_after_not_found": func(n node, key string) (err error) {
			p.StopAfterNotFound, err = d.integer(n, key, 0, maxStopAfterNotFound)
			return err
		},
	}, nil)
	if err != nil {
		return nil, err
	}
	for _, req := range []struct {
		ok  bool
		key string
	}{{p.Name != "", "name"}, {hasRequest, "request"}, {hasAuth, "auth"}, {hasRecord, "record"}} {
		if !req.ok {
			return nil, &Error{File: file, Line: root.line, Key: req.key, Msg: "required key missing"}
		}
	}
	if p.List != nil && !p.List.ownReading {
		p.List.Object = p.Payment
	}
	if len(p.Exponents) > 0 && !p.hasMinorAmounts() {
		return nil, d.errf(exponentsNode, "currency_exponents",
			"used only by minor amounts, and no record here is minor: decimal, milli and units_nanos are major units, converted with ISO 4217's exponent")
	}
	return p, nil
}

// newObject returns an object of kind with the format's defaults.
func newObject(kind string) Object {
	return Object{Kind: kind, Request: Request{Method: "GET"}, Reading: Reading{Record: RecordPaths{AmountFormat: AmountMinor}}}
}

// hasMinorAmounts reports whether any object of p reads minor amounts.
func (p *Profile) hasMinorAmounts() bool {
	if p.Payment.Reading.Record.AmountFormat == AmountMinor {
		return true
	}
	for _, o := range p.Kinds {
		if o.Reading.Record.AmountFormat == AmountMinor {
			return true
		}
	}
	return false
}

func (d *parser) statusMap(n node, key string, r *Reading) error {
	r.StatusMap = map[string]string{}
	return d.object(n, key, nil, func(m member, key string) error {
		v, err := d.ledgerStatus(m.val, key)
		if err != nil {
			return err
		}
		if m.key == "" {
			return d.errf(m.val, key, "empty provider status")
		}
		r.StatusMap[m.key] = v
		return nil
	})
}

func (d *parser) ledgerStatus(n node, key string) (string, error) {
	v, err := d.str(n, key)
	if err != nil {
		return "", err
	}
	if !payments.IsStatus(v) {
		return "", d.errf(n, key, "%q is not a ledger status (want one of %s)", v, strings.Join(payments.Statuses(), ", "))
	}
	return v, nil
}

func (d *parser) request(n node, key string, r *Request) error {
	err := d.object(n, key, fields{
		"method": func(n node, key string) (err error) {
			if r.Method, err = d.str(n, key); err != nil {
				return err
			}
			if r.Method != "GET" && r.Method != "POST" {
				return d.errf(n, key, "%q: want GET or POST", r.Method)
			}
			return nil
		},
		"path": func(n node, key string) (err error) {
			if r.Path, err = d.str(n, key); err != nil {
				return err
			}
			if !strings.HasPrefix(r.Path, "/") || strings.ContainsAny(r.Path, "?# \t\r\n") {
				return d.errf(n, key, "%q: want a path starting with / (query parameters go in request.query)", r.Path)
			}
			placeholders := strings.Count(r.Path, placeholderID) + strings.Count(r.Path, placeholderAccount)
			if strings.Count(r.Path, "{") != placeholders || strings.Count(r.Path, "}") != placeholders {
				return d.errf(n, key, "%q: the only placeholders are {id} and {account}", r.Path)
			}
			return nil
		},
		"query":   func(n node, key string) (err error) { r.Query, err = d.pairs(n, key, false); return err },
		"headers": func(n node, key string) (err error) { r.Headers, err = d.pairs(n, key, true); return err },
		"body": func(n node, key string) (err error) {
			if r.Body, err = d.str(n, key); err != nil {
				return err
			}
			return d.template(n, key, r.Body)
		},
		"idempotency_header": func(n node, key string) (err error) {
			if r.IdempotencyHeader, err = d.str(n, key); err != nil {
				return err
			}
			if r.IdempotencyHeader != "" && !isToken(r.IdempotencyHeader) {
				return d.errf(n, key, "%q is not a header name", r.IdempotencyHeader)
			}
			return nil
		},
	}, nil)
	if err != nil {
		return err
	}
	if r.Path == "" {
		return &Error{File: d.file, Line: n.line, Key: join(key, "path"), Msg: "required key missing"}
	}
	uses := strings.Contains(r.Path, "{id}") || strings.Contains(r.Body, "{id}")
	for _, q := range r.Query {
		uses = uses || strings.Contains(q.Value, "{id}")
	}
	if !uses {
		return &Error{File: d.file, Line: n.line, Key: key, Msg: "the transaction id ({id}) appears in neither the path, the query nor the body"}
	}
	if r.Body != "" && r.Method != "POST" {
		return &Error{File: d.file, Line: n.line, Key: join(key, "body"), Msg: "a body needs method POST"}
	}
	return nil
}

func (d *parser) auth(n node, key string, a *Auth) error {
	used := map[string]bool{}
	var typeNode node
	str := func(dst *string) func(node, string) error {
		return func(n node, k string) (err error) {
			used[strings.TrimPrefix(k, key+".")] = true
			*dst, err = d.str(n, k)
			return err
		}
	}
	env := func(dst *string) func(node, string) error {
		return func(n node, k string) error {
			if err := str(dst)(n, k); err != nil {
				return err
			}
			if !isEnvName(*dst) {
				return d.errf(n, k, "%q is not an environment variable name", *dst)
			}
			return nil
		}
	}
	lines := map[string]int{}
	for _, m := range n.members {
		lines[m.key] = m.line
	}
	err := d.object(n, key, fields{
		"type": func(n node, k string) error {
			typeNode = n
			t, err := d.choice(n, k, authTypeNames)
			a.Type = AuthType(t)
			return err
		},
		"token_env": env(&a.TokenEnv),
		"optional": func(n node, k string) (err error) {
			used["optional"] = true
			a.Optional, err = d.boolean(n, k)
			return err
		},
		"username_env":      env(&a.UsernameEnv),
		"password_env":      env(&a.PasswordEnv),
		"client_id_env":     env(&a.ClientIDEnv),
		"client_secret_env": env(&a.ClientSecretEnv),
		"token_url": func(n node, k string) error {
			if err := str(&a.TokenURL)(n, k); err != nil {
				return err
			}
			u, err := url.Parse(a.TokenURL)
			if err != nil || a.TokenURL == "" || (!u.IsAbs() && !strings.HasPrefix(a.TokenURL, "/")) || u.User != nil {
				return d.errf(n, k, "%q: want an absolute URL or a path starting with /", a.TokenURL)
			}
			return nil
		},
		"scopes": func(n node, k string) error {
			used["scopes"] = true
			if n.kind != kindArray {
				return d.typeErr(n, k, kindArray)
			}
			for i, e := range n.elems {
				s, err := d.str(e, fmt.Sprintf("%s[%d]", k, i))
				if err != nil {
					return err
				}
				a.Scopes = append(a.Scopes, s)
			}
			return nil
		},
		"credentials_in": func(n node, k string) error {
			used["credentials_in"] = true
			i, err := d.choice(n, k, []string{"", "header", "params"})
			a.InParams = i == 2
			return err
		},
	}, nil)
	if err != nil {
		return err
	}
	if a.Type == 0 {
		return &Error{File: d.file, Line: n.line, Key: join(key, "type"), Msg: "required key missing (want " + strings.Join(authTypeNames[1:], ", ") + ")"}
	}
	allowed := map[AuthType][]string{
		AuthNone:                    nil,
		AuthBearer:                  {"token_env", "optional"},
		AuthBasic:                   {"username_env", "password_env"},
		AuthOAuth2ClientCredentials: {"token_url", "client_id_env", "client_secret_env", "scopes", "credentials_in"},
	}[a.Type]
	for k := range used {
		if !slices.Contains(allowed, k) {
			return &Error{File: d.file, Line: lines[k], Key: join(key, k), Msg: fmt.Sprintf("not used by auth type %s", a.Type)}
		}
	}
	switch a.Type {
	case AuthBearer:
		a.TokenEnv = cmp.Or(a.TokenEnv, "RECONCILE_PROVIDER_TOKEN")
	case AuthBasic:
		a.UsernameEnv = cmp.Or(a.UsernameEnv, "RECONCILE_PROVIDER_USERNAME")
	case AuthOAuth2ClientCredentials:
		a.ClientIDEnv = cmp.Or(a.ClientIDEnv, "RECONCILE_PROVIDER_CLIENT_ID")
		a.ClientSecretEnv = cmp.Or(a.ClientSecretEnv, "RECONCILE_PROVIDER_CLIENT_SECRET")
		if a.TokenURL == "" {
			return &Error{File: d.file, Line: typeNode.line, Key: join(key, "token_url"), Msg: "required by auth type oauth2_client_credentials"}
		}
	}
	return nil
}

func (d *parser) record(n node, key string, r *RecordPaths) error {
	err := d.object(n, key, fields{
		"id":       func(n node, k string) (err error) { r.ID, err = d.path(n, k); return err },
		"amount":   func(n node, k string) (err error) { r.Amount, err = d.path(n, k); return err },
		"currency": func(n node, k string) (err error) { r.Currency, err = d.path(n, k); return err },
		"status":   func(n node, k string) (err error) { r.Status, err = d.path(n, k); return err },
		"amount_format": func(n node, k string) error {
			f, err := d.choice(n, k, amountFormatNames)
			r.AmountFormat = AmountFormat(f)
			return err
		},
		"upper_currency": func(n node, k string) (err error) { r.UpperCurrency, err = d.boolean(n, k); return err },
	}, nil)
	if err != nil {
		return err
	}
	for _, f := range []struct{ v, name string }{{r.ID, "id"}, {r.Amount, "amount"}, {r.Currency, "currency"}, {r.Status, "status"}} {
		if f.v == "" {
			return &Error{File: d.file, Line: n.line, Key: join(key, f.name), Msg: "required key missing"}
		}
	}
	return nil
}

func (d *parser) rule(n node, key string) (Rule, error) {
	r := Rule{Line: n.line}
	var hasValue bool
	var valueNode node
	err := d.object(n, key, fields{
		"status": func(n node, k string) error {
			switch n.kind {
			case kindNumber:
				v, err := d.integer(n, k, 100, 599)
				r.Status = v
				return err
			case kindString:
				if len(n.text) == 3 && n.text[0] >= '1' && n.text[0] <= '5' && n.text[1:] == "xx" {
					r.Status, r.StatusClass = int(n.text[0]-'0')*100, true
					return nil
				}
				return d.errf(n, k, "%q: want a status code (404) or a class (4xx)", n.text)
			default:
				return d.errf(n, k, "want a status code (404) or a class (\"4xx\"), not %s", n.kind)
			}
		},
		"path": func(n node, k string) (err error) { r.Path, err = d.path(n, k); return err },
		"value": func(n node, k string) (err error) {
			hasValue, valueNode = true, n
			r.Value, err = d.literal(n, k)
			return err
		},
		"contains": func(n node, k string) (err error) {
			if r.Contains, err = d.str(n, k); err == nil && r.Contains == "" {
				return d.errf(n, k, "empty")
			}
			return err
		},
		"class": func(n node, k string) error {
			c, err := d.choice(n, k, classNames)
			r.Class = Class(c)
			return err
		},
		"reason": func(n node, k string) (err error) {
			if r.Reason, err = d.str(n, k); err != nil {
				return err
			}
			if !isReason(r.Reason) {
				return d.errf(n, k, "%q: want a lower-case word (letters, digits, _)", r.Reason)
			}
			return nil
		},
	}, nil)
	if err != nil {
		return r, err
	}
	if r.Class == 0 {
		return r, &Error{File: d.file, Line: n.line, Key: join(key, "class"), Msg: "required key missing (want " + strings.Join(classNames[1:], ", ") + ")"}
	}
	if hasValue && r.Path == "" {
		return r, d.errf(valueNode, join(key, "value"), "needs a path")
	}
	if r.Status == 0 && r.Path == "" && r.Contains == "" {
		return r, &Error{File: d.file, Line: n.line, Key: key, Msg: "matches every answer: give a status, a path or contains"}
	}
	return r, nil
}
