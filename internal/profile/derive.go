package profile

// How status rules read an answer: conditions over its values, compared
// exactly, and a reader that scans the body once per top-level key.

import (
	"cmp"
	"math/big"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// answer reads the values of one JSON body. Paths below the same top-level
// key (latest_charge.refunded, latest_charge.disputed) scan the body once
// for the key and then only its value's text; the cache lives on the
// caller's stack.
type answer struct {
	body []byte
	n    int
	tops [8]struct {
		key string
		val gjson.Result
	}
}

// get returns the value at path.
func (a *answer) get(path string) gjson.Result {
	top, rest, nested := strings.Cut(path, ".")
	var t gjson.Result
	found := false
	for i := range a.n {
		if a.tops[i].key == top {
			t, found = a.tops[i].val, true
			break
		}
	}
	if !found {
		t = gjson.GetBytes(a.body, top)
		if a.n < len(a.tops) {
			a.tops[a.n].key, a.tops[a.n].val = top, t
			a.n++
		}
	}
	if !nested {
		return t
	}
	if !t.IsObject() && !t.IsArray() {
		return gjson.Result{}
	}
	return t.Get(rest)
}

// firstRule returns the first status rule whose conditions all hold on
// the answer, or nil.
func (r *Reading) firstRule(a *answer) *StatusRule {
	for i := range r.StatusRules {
		if r.StatusRules[i].holds(a) {
			return &r.StatusRules[i]
		}
	}
	return nil
}

func (s *StatusRule) holds(a *answer) bool {
	for i := range s.When {
		if !s.When[i].holds(a) {
			return false
		}
	}
	return true
}

// newCondition returns the condition with its operand parsed: value is
// "true" or "false" for TestPresent, a JSON literal for TestEquals, a path
// for TestEqualsPath and a number for TestAbove (checked by the parser).
func newCondition(path string, test Test, value string) Condition {
	c := Condition{Path: path, Test: test, Value: value}
	switch test {
	case TestEquals:
		c.literal = parseLiteral(value)
	case TestAbove:
		c.literal.kind = gjson.Number
		c.literal.num, _ = parseNumber(value)
	}
	return c
}

func (c *Condition) holds(a *answer) bool {
	v := a.get(c.Path)
	switch c.Test {
	case TestPresent:
		there := v.Exists() && v.Type != gjson.Null
		return there == (c.Value == "true")
	case TestEquals:
		return c.literal.equals(v)
	case TestEqualsPath:
		return sameValue(v, a.get(c.Value))
	case TestAbove:
		x, ok := number(v)
		return ok && x.cmp(c.literal.num) > 0
	}
	return false
}

// literal is a JSON literal a value is compared with.
type literal struct {
	kind gjson.Type // String, Number, True or False
	str  string
	num  exact
}

func parseLiteral(text string) literal {
	switch {
	case strings.HasPrefix(text, `"`):
		s, _ := strconv.Unquote(text) // quoted by the parser
		return literal{kind: gjson.String, str: s}
	case text == "true":
		return literal{kind: gjson.True}
	case text == "false":
		return literal{kind: gjson.False}
	}
	n, _ := parseNumber(text)
	return literal{kind: gjson.Number, num: n}
}

// equals reports whether v equals the literal: the same string or
// boolean, or a number of the same value (0 equals 0.0).
func (l literal) equals(v gjson.Result) bool {
	if v.Type != l.kind {
		return false
	}
	switch l.kind {
	case gjson.String:
		return v.Str == l.str
	case gjson.Number:
		x, ok := number(v)
		return ok && x.cmp(l.num) == 0
	}
	return true
}

// equalsLiteral reports whether v equals the JSON literal text lit (an
// error rule's value).
func equalsLiteral(v gjson.Result, lit string) bool { return parseLiteral(lit).equals(v) }

// sameValue reports whether two values are equal: two numbers by value,
// two strings or two booleans as they are. Absent or null values are equal
// to nothing.
func sameValue(a, b gjson.Result) bool {
	switch {
	case a.Type == gjson.Number && b.Type == gjson.Number:
		x, ok := number(a)
		y, ok2 := number(b)
		return ok && ok2 && x.cmp(y) == 0
	case a.Type == gjson.String && b.Type == gjson.String:
		return a.Str == b.Str
	case a.Type == gjson.True || a.Type == gjson.False:
		return a.Type == b.Type
	}
	return false
}

// exact is a number compared exactly: an int64, or when it is not one, a
// rational.
type exact struct {
	i int64
	r *big.Rat // nil: the value is i
}

func (x exact) rat() *big.Rat {
	if x.r != nil {
		return x.r
	}
	return new(big.Rat).SetInt64(x.i)
}

func (x exact) cmp(y exact) int {
	if x.r == nil && y.r == nil {
		return cmp.Compare(x.i, y.i)
	}
	return x.rat().Cmp(y.rat())
}

// number returns the exact value of a JSON number, or of a string holding a
// plain decimal ("10.50": PayPal writes amounts so); ok is false for
// anything else.
func number(v gjson.Result) (exact, bool) {
	switch v.Type {
	case gjson.Number:
		return parseNumber(v.Raw)
	case gjson.String:
		intPart, frac, hasDot := strings.Cut(strings.TrimPrefix(v.Str, "-"), ".")
		if !isDigits(intPart) || hasDot && !isDigits(frac) {
			return exact{}, false
		}
		return parseNumber(v.Str)
	}
	return exact{}, false
}

// maxNumberExponent bounds the exponent of a number compared exactly: the
// exact value of 1e1000000000 would take gigabytes, and no amount comes
// near 10^400.
const maxNumberExponent = 400

// parseNumber returns the exact value of a JSON number's text, refusing
// exponents beyond maxNumberExponent.
func parseNumber(text string) (exact, bool) {
	if i, err := strconv.ParseInt(text, 10, 64); err == nil {
		return exact{i: i}, true
	}
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(text[i+1:], "+"))
		if err != nil || e > maxNumberExponent || e < -maxNumberExponent {
			return exact{}, false
		}
	}
	r, ok := new(big.Rat).SetString(text)
	return exact{r: r}, ok
}
