package profile

// The typed decoders of a profile file's values, each reporting the line and
// key of what is wrong, and the checks of names, paths and headers.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// fields maps the keys of an object to their decoders.
type fields map[string]func(n node, key string) error

// parser decodes the nodes of one profile file; file names it in errors.
type parser struct{ file string }

func (d *parser) errf(n node, key, format string, args ...any) error {
	return &Error{File: d.file, Line: n.line, Key: key, Msg: fmt.Sprintf(format, args...)}
}

func (d *parser) typeErr(n node, key string, want kind) error {
	return d.errf(n, key, "want %s, not %s", want, n.kind)
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// object decodes an object's members with fs; a key not in fs goes to other
// (free-form maps) or is an error naming the allowed keys.
func (d *parser) object(n node, key string, fs fields, other func(m member, key string) error) error {
	if n.kind != kindObject {
		if key == "" {
			return &Error{File: d.file, Line: n.line, Msg: "want a JSON object, not " + n.kind.String()}
		}
		return d.typeErr(n, key, kindObject)
	}
	for _, m := range n.members {
		k := join(key, m.key)
		if f, ok := fs[m.key]; ok {
			if err := f(m.val, k); err != nil {
				return err
			}
			continue
		}
		if other == nil {
			names := make([]string, 0, len(fs))
			for name := range fs {
				names = append(names, name)
			}
			slices.Sort(names)
			return &Error{File: d.file, Line: m.line, Key: k, Msg: "unknown key (want " + strings.Join(names, ", ") + ")"}
		}
		if err := other(m, k); err != nil {
			return err
		}
	}
	return nil
}

func (d *parser) str(n node, key string) (string, error) {
	if n.kind != kindString {
		return "", d.typeErr(n, key, kindString)
	}
	return n.text, nil
}

func (d *parser) boolean(n node, key string) (bool, error) {
	if n.kind != kindBool {
		return false, d.typeErr(n, key, kindBool)
	}
	return n.boolean, nil
}

func (d *parser) integer(n node, key string, lo, hi int) (int, error) {
	if n.kind != kindNumber {
		return 0, d.typeErr(n, key, kindNumber)
	}
	v, err := strconv.Atoi(n.text)
	if err != nil || v < lo || v > hi {
		return 0, d.errf(n, key, "%s: want an integer from %d to %d", n.text, lo, hi)
	}
	return v, nil
}

// choice decodes a string that must be one of names (index 0 is unused).
func (d *parser) choice(n node, key string, names []string) (int, error) {
	s, err := d.str(n, key)
	if err != nil {
		return 0, err
	}
	if i := slices.Index(names, s); i > 0 {
		return i, nil
	}
	return 0, d.errf(n, key, "unknown %q (want %s)", s, strings.Join(names[1:], ", "))
}

func (d *parser) path(n node, key string) (string, error) {
	s, err := d.str(n, key)
	if err != nil {
		return "", err
	}
	if !isPath(s) {
		return "", d.errf(n, key, "%q is not a path: want dot-separated keys of letters, digits, _, - and $ (array elements by number)", s)
	}
	return s, nil
}

// pairs decodes an object of string values, sorted by name, whose
// templates hold a lookup's placeholders.
func (d *parser) pairs(n node, key string, header bool) ([]Pair, error) {
	return d.pairsOf(n, key, header, lookupPlaceholders)
}

// pairsOf decodes an object of string values, sorted by name, whose
// templates may hold the placeholders allowed.
func (d *parser) pairsOf(n node, key string, header bool, allowed []string) ([]Pair, error) {
	var out []Pair
	err := d.object(n, key, nil, func(m member, key string) error {
		v, err := d.str(m.val, key)
		if err != nil {
			return err
		}
		if err := d.templateOf(m.val, key, v, allowed); err != nil {
			return err
		}
		if header {
			switch {
			case !isToken(m.key):
				return &Error{File: d.file, Line: m.line, Key: key, Msg: "not a header name"}
			case strings.EqualFold(m.key, "Authorization"):
				return &Error{File: d.file, Line: m.line, Key: key, Msg: "credentials belong in auth (from the environment), not in the profile"}
			case strings.ContainsAny(v, "\r\n\x00"):
				return d.errf(m.val, key, "header values cannot contain line breaks")
			}
		}
		out = append(out, Pair{m.key, v})
		return nil
	})
	slices.SortFunc(out, func(a, b Pair) int { return strings.Compare(a.Name, b.Name) })
	return out, err
}

// lookupPlaceholders are the words a lookup's templates may hold.
var lookupPlaceholders = []string{"id", "account"}

// template checks the placeholders of a lookup's request template: every
// {word} must be {id} or {account}. Braces around anything else (a JSON
// body's objects, a GraphQL query's selections) are text.
func (d *parser) template(n node, key, s string) error {
	return d.templateOf(n, key, s, lookupPlaceholders)
}

// templateOf checks that every {word} of template s is one of allowed.
func (d *parser) templateOf(n node, key, s string, allowed []string) error {
	for rest := s; ; {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			return nil
		}
		rest = rest[open+1:]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return nil
		}
		word := rest[:end]
		if isWord(word) && !slices.Contains(allowed, word) {
			last := len(allowed) - 1
			want := "{" + strings.Join(allowed[:last], "}, {") + "} or {" + allowed[last] + "}"
			return d.errf(n, key, "unknown placeholder {%s} (want %s)", word, want)
		}
	}
}

// literal decodes a JSON literal a value is compared with: a string (kept
// quoted), a number or true or false.
func (d *parser) literal(n node, key string) (string, error) {
	switch n.kind {
	case kindString:
		return strconv.Quote(n.text), nil
	case kindNumber:
		return n.text, nil
	case kindBool:
		return strconv.FormatBool(n.boolean), nil
	default:
		return "", d.errf(n, key, "want a string, a number or true or false, not %s", n.kind)
	}
}

// isWord reports whether s is a placeholder-like word: letters, digits, _.
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func isName(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isReason(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// isPath reports whether s is a path of the restricted form the profile
// format allows: gjson's modifiers, wildcards and queries are left out so
// that a path means the same to every reader of the file.
func isPath(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for seg := range strings.SplitSeq(s, ".") {
		if seg == "" {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '$') {
				return false
			}
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token (a header name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func isEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func isCurrency(s string) bool {
	return len(s) == 3 && s[0] >= 'A' && s[0] <= 'Z' && s[1] >= 'A' && s[1] <= 'Z' && s[2] >= 'A' && s[2] <= 'Z'
}
