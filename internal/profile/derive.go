package profile

import (
	"math/big"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// firstRule returns the first status rule whose conditions all hold on
// body, or nil.
func (r *Reading) firstRule(body []byte) *StatusRule {
	for i := range r.StatusRules {
		if r.StatusRules[i].holds(body) {
			return &r.StatusRules[i]
		}
	}
	return nil
}

func (s *StatusRule) holds(body []byte) bool {
	for i := range s.When {
		if !s.When[i].holds(body) {
			return false
		}
	}
	return true
}

func (c *Condition) holds(body []byte) bool {
	v := gjson.GetBytes(body, c.Path)
	switch c.Test {
	case TestPresent:
		there := v.Exists() && v.Type != gjson.Null
		return there == (c.Value == "true")
	case TestEquals:
		return equalsLiteral(v, c.Value)
	case TestEqualsPath:
		return sameValue(v, gjson.GetBytes(body, c.Value))
	case TestAbove:
		x, ok := number(v)
		y, _ := exactNumber(c.Value) // checked when parsed
		return ok && x.Cmp(y) > 0
	}
	return false
}

// equalsLiteral reports whether v equals the JSON literal lit: a quoted
// string, true, false, or a number (compared by value: 0 equals 0.0).
func equalsLiteral(v gjson.Result, lit string) bool {
	switch {
	case strings.HasPrefix(lit, `"`):
		return v.Type == gjson.String && strconv.Quote(v.Str) == lit
	case lit == "true":
		return v.Type == gjson.True
	case lit == "false":
		return v.Type == gjson.False
	}
	if v.Type != gjson.Number {
		return false
	}
	x, ok := number(v)
	y, ok2 := exactNumber(lit)
	return ok && ok2 && x.Cmp(y) == 0
}

// sameValue reports whether two values are equal: two numbers by value,
// two strings or two booleans as they are. Absent or null values are equal
// to nothing.
func sameValue(a, b gjson.Result) bool {
	switch {
	case a.Type == gjson.Number && b.Type == gjson.Number:
		x, ok := number(a)
		y, ok2 := number(b)
		return ok && ok2 && x.Cmp(y) == 0
	case a.Type == gjson.String && b.Type == gjson.String:
		return a.Str == b.Str
	case a.Type == gjson.True || a.Type == gjson.False:
		return a.Type == b.Type
	}
	return false
}

// number returns the exact value of a JSON number, or of a string holding a
// plain decimal ("10.50": PayPal writes amounts so); ok is false for
// anything else.
func number(v gjson.Result) (*big.Rat, bool) {
	var text string
	switch v.Type {
	case gjson.Number:
		text = v.Raw
	case gjson.String:
		intPart, frac, hasDot := strings.Cut(strings.TrimPrefix(v.Str, "-"), ".")
		if !isDigits(intPart) || hasDot && !isDigits(frac) {
			return nil, false
		}
		text = v.Str
	default:
		return nil, false
	}
	return exactNumber(text)
}

// maxNumberExponent bounds the exponent of a number compared exactly: the
// exact value of 1e1000000000 would take gigabytes, and no amount comes
// near 10^400.
const maxNumberExponent = 400

// exactNumber returns the exact value of a JSON number's text, refusing
// exponents beyond maxNumberExponent.
func exactNumber(text string) (*big.Rat, bool) {
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(text[i+1:], "+"))
		if err != nil || e > maxNumberExponent || e < -maxNumberExponent {
			return nil, false
		}
	}
	return new(big.Rat).SetString(text)
}
