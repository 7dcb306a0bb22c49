package profile

// The decoders of a profile's kinds of object, their status rules and
// conditions, and the account key.

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/reconcile/reconcile/internal/payments"
)

// maxPrefixBytes bounds an id prefix; providers' are a few bytes (re_, dp_).
const maxPrefixBytes = 64

// maxPatternBytes bounds account.match; an account's form takes a few dozen.
const maxPatternBytes = 256

// prefixAt is an id prefix where the file gives it, to report overlaps.
type prefixAt struct {
	kind, prefix, key string
	line              int
}

// kinds decodes the objects of the kinds other than payments.
func (d *parser) kinds(n node, key string, p *Profile) error {
	p.Kinds = map[string]*Object{}
	var prefixes []prefixAt
	err := d.object(n, key, nil, func(m member, key string) error {
		if m.key != payments.KindRefund && m.key != payments.KindDispute {
			return &Error{File: d.file, Line: m.line, Key: key,
				Msg: "unknown kind (want refund or dispute; a payment is the top-level request and record)"}
		}
		o := newObject(m.key)
		var hasRequest, hasRecord bool
		err := d.object(m.val, key, fields{
			"id_prefixes": func(n node, k string) error {
				if n.kind != kindArray {
					return d.typeErr(n, k, kindArray)
				}
				for i, e := range n.elems {
					ek := fmt.Sprintf("%s[%d]", k, i)
					s, err := d.str(e, ek)
					if err != nil {
						return err
					}
					if s == "" || len(s) > maxPrefixBytes || payments.CheckID(s) != "" {
						return d.errf(e, ek, "%q: want 1 to %d bytes of an id's text", s, maxPrefixBytes)
					}
					o.IDPrefixes = append(o.IDPrefixes, s)
					prefixes = append(prefixes, prefixAt{kind: m.key, prefix: s, key: ek, line: e.line})
				}
				return nil
			},
			"request": func(n node, k string) error { hasRequest = true; return d.request(n, k, &o.Request) },
			"record": func(n node, k string) error {
				hasRecord = true
				return d.record(n, k, &o.Reading.Record)
			},
			"status_map":   func(n node, k string) error { return d.statusMap(n, k, &o.Reading) },
			"status_rules": func(n node, k string) error { return d.statusRules(n, k, &o.Reading) },
		}, nil)
		if err != nil {
			return err
		}
		for _, req := range []struct {
			ok  bool
			key string
		}{{hasRequest, "request"}, {hasRecord, "record"}} {
			if !req.ok {
				return &Error{File: d.file, Line: m.line, Key: join(key, req.key), Msg: "required key missing: each kind is asked for with its own request"}
			}
		}
		p.Kinds[m.key] = &o
		return nil
	})
	if err != nil {
		return err
	}
	// A transaction id must tell the kinds apart.
	for i, a := range prefixes {
		for _, b := range prefixes[:i] {
			if a.kind != b.kind && (strings.HasPrefix(a.prefix, b.prefix) || strings.HasPrefix(b.prefix, a.prefix)) {
				return &Error{File: d.file, Line: a.line, Key: a.key,
					Msg: fmt.Sprintf("%q overlaps %q of kind %s (line %d): an id cannot tell the kinds apart", a.prefix, b.prefix, b.kind, b.line)}
			}
		}
	}
	return nil
}

// statusRules decodes a reading's status rules.
func (d *parser) statusRules(n node, key string, r *Reading) error {
	if n.kind != kindArray {
		return d.typeErr(n, key, kindArray)
	}
	for i, e := range n.elems {
		k := fmt.Sprintf("%s[%d]", key, i)
		rule := StatusRule{Key: k}
		var hasWhen bool
		err := d.object(e, k, fields{
			"when": func(n node, k string) error {
				hasWhen = true
				if n.kind != kindArray {
					return d.typeErr(n, k, kindArray)
				}
				if len(n.elems) == 0 {
					return d.errf(n, k, "no condition: give at least one (a rule that always holds belongs in status_map)")
				}
				for j, c := range n.elems {
					cond, err := d.condition(c, fmt.Sprintf("%s[%d]", k, j))
					if err != nil {
						return err
					}
					rule.When = append(rule.When, cond)
				}
				return nil
			},
			"status": func(n node, k string) (err error) { rule.Status, err = d.ledgerStatus(n, k); return err },
			"amount": func(n node, k string) (err error) { rule.Amount, err = d.path(n, k); return err },
		}, nil)
		if err != nil {
			return err
		}
		if !hasWhen {
			return &Error{File: d.file, Line: e.line, Key: join(k, "when"), Msg: "required key missing: the conditions, all of which must hold"}
		}
		if rule.Status == "" && rule.Amount == "" {
			return &Error{File: d.file, Line: e.line, Key: k, Msg: "gives neither a status nor an amount"}
		}
		r.StatusRules = append(r.StatusRules, rule)
	}
	return nil
}

// condition decodes one condition: a path and exactly one test.
func (d *parser) condition(n node, key string) (Condition, error) {
	var c Condition
	var tests []string
	set := func(t Test) { c.Test = t; tests = append(tests, t.String()) }
	err := d.object(n, key, fields{
		"path": func(n node, k string) (err error) { c.Path, err = d.path(n, k); return err },
		"present": func(n node, k string) error {
			set(TestPresent)
			b, err := d.boolean(n, k)
			c.Value = fmt.Sprint(b)
			return err
		},
		"equals": func(n node, k string) (err error) {
			set(TestEquals)
			c.Value, err = d.literal(n, k)
			return err
		},
		"equals_path": func(n node, k string) (err error) {
			set(TestEqualsPath)
			c.Value, err = d.path(n, k)
			return err
		},
		"above": func(n node, k string) error {
			set(TestAbove)
			if n.kind != kindNumber {
				return d.typeErr(n, k, kindNumber)
			}
			if _, ok := parseNumber(n.text); !ok {
				return d.errf(n, k, "%s: want a number of at most %d digits' magnitude", n.text, maxNumberExponent)
			}
			c.Value = n.text
			return nil
		},
	}, nil)
	if err != nil {
		return c, err
	}
	if c.Path == "" {
		return c, &Error{File: d.file, Line: n.line, Key: join(key, "path"), Msg: "required key missing"}
	}
	if len(tests) != 1 {
		msg := "no test: want one of above, equals, equals_path, present"
		if len(tests) > 1 {
			msg = fmt.Sprintf("several tests (%s): want exactly one; give each its own condition", strings.Join(tests, ", "))
		}
		return c, &Error{File: d.file, Line: n.line, Key: key, Msg: msg}
	}
	return newCondition(c.Path, c.Test, c.Value), nil
}

// account decodes what {account} stands for.
func (d *parser) account(n node, key string, a *Account) error {
	return d.object(n, key, fields{
		"map": func(n node, k string) (err error) {
			if a.MapFile, err = d.str(n, k); err != nil {
				return err
			}
			if a.MapFile == "" {
				return d.errf(n, k, "empty: want the account map's file, relative to the profile")
			}
			a.mapLine = n.line
			return nil
		},
		"match": func(n node, k string) error {
			text, err := d.str(n, k)
			if err != nil {
				return err
			}
			if text == "" || len(text) > maxPatternBytes {
				return d.errf(n, k, "want a regular expression of 1 to %d bytes", maxPatternBytes)
			}
			if a.Match, err = regexp.Compile(text); err != nil {
				return d.errf(n, k, "%q: not a regular expression: %s", text, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
			}
			return nil
		},
	}, nil)
}
