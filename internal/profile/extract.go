package profile

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Classify returns the first rule that matches an answer with the HTTP
// status and body, or nil when none does (the status alone decides).
func (p *Profile) Classify(status int, body []byte) *Rule {
	for i := range p.Rules {
		if p.Rules[i].matches(status, body) {
			return &p.Rules[i]
		}
	}
	return nil
}

// LooksAtBody reports whether the rule recognises an answer by its body
// (a path or a text), not by its status alone.
func (r *Rule) LooksAtBody() bool { return r.Path != "" || r.Contains != "" }

func (r *Rule) matches(status int, body []byte) bool {
	switch {
	case r.Status == 0:
	case r.StatusClass && status/100 != r.Status/100:
		return false
	case !r.StatusClass && status != r.Status:
		return false
	}
	if r.Contains != "" && !bytes.Contains(body, []byte(r.Contains)) {
		return false
	}
	if r.Path == "" {
		return true
	}
	res := gjson.GetBytes(body, r.Path)
	if !res.Exists() || res.Type == gjson.Null {
		return false
	}
	return r.Value == "" || equalsLiteral(res, r.Value)
}

// Extracted is a transaction read from an answer, in the ledger's terms.
type Extracted struct {
	ID string
	// AmountMinor is in ISO 4217 minor units, negative for the money a
	// refund or a dispute returns.
	AmountMinor int64
	// Currency is the currency code (upper-cased when the profile says so).
	Currency string
	// Status is the ledger status; ProviderStatus the provider's own word.
	Status, ProviderStatus string
	// Kind is the kind of object read (payment, refund, dispute).
	Kind string
	// Rule names the status rule that decided the status or the amount
	// (status_rules[2]); empty when none held.
	Rule string
}

// ErrBody is wrapped by every error of [Profile.Extract] about the body.
var ErrBody = errors.New("unreadable body")

// UnmappedStatusError is a status word the profile's status map does not
// know: not a mismatch, a profile to fix.
type UnmappedStatusError struct {
	// Status is the provider's word.
	Status string
	// Profile is the profile's name.
	Profile string
}

func (e *UnmappedStatusError) Error() string {
	return fmt.Sprintf("provider status %q is not in the status map of profile %s", e.Status, e.Profile)
}

// Extract reads the object o describes from a successful answer's body, in
// the ledger's terms: the status from the first status rule that holds or
// the status map, the amount from the rule's path or the record's,
// converted to ISO 4217 minor units and negated for the money a refund or
// a dispute returns. Its error wraps [ErrBody] (not JSON, a field missing
// or of the wrong type, a bad amount) or is an [*UnmappedStatusError]; with
// the latter, the rest of the record is filled in.
func (p *Profile) Extract(o *Object, body []byte) (Extracted, error) {
	if !gjson.ValidBytes(body) {
		return Extracted{}, fmt.Errorf("%w: not valid JSON", ErrBody)
	}
	rd := &o.Reading
	rp := &rd.Record
	a := answer{body: body}
	out := Extracted{Kind: o.Kind}
	var missing []string
	id := a.get(rp.ID)
	switch id.Type {
	case gjson.String:
		out.ID = id.Str
	case gjson.Number:
		out.ID = id.Raw
	}
	if out.ID == "" {
		missing = append(missing, rp.ID)
	}
	cur := a.get(rp.Currency)
	if cur.Type == gjson.String && cur.Str != "" {
		out.Currency = cur.Str
		if rp.UpperCurrency {
			out.Currency = strings.ToUpper(out.Currency)
		}
	} else {
		missing = append(missing, rp.Currency)
	}
	st := a.get(rp.Status)
	if st.Type == gjson.String && st.Str != "" {
		out.ProviderStatus = st.Str
	} else {
		missing = append(missing, rp.Status)
	}
	amountPath, derived := rp.Amount, ""
	if rule := rd.firstRule(&a); rule != nil {
		out.Rule, derived = rule.Key, rule.Status
		amountPath = cmp.Or(rule.Amount, amountPath)
	}
	amount := a.get(amountPath)
	if !amount.Exists() || amount.Type == gjson.Null {
		missing = append(missing, amountPath)
	}
	if len(missing) > 0 {
		return Extracted{}, fmt.Errorf("%w: missing %s", ErrBody, strings.Join(missing, ", "))
	}
	var err error
	if out.AmountMinor, err = p.amount(rp.AmountFormat, amount, out.Currency); err != nil {
		return Extracted{}, fmt.Errorf("%w: %s: %w", ErrBody, amountPath, err)
	}
	if o.ReturnsMoney() {
		if out.AmountMinor == math.MinInt64 {
			return Extracted{}, fmt.Errorf("%w: %s: %s does not fit in 64 bits once negated", ErrBody, amountPath, amount.Raw)
		}
		out.AmountMinor = -out.AmountMinor
	}
	switch {
	case derived != "":
		out.Status = derived
	case rd.StatusMap == nil:
		out.Status = out.ProviderStatus
	default:
		s, ok := rd.StatusMap[out.ProviderStatus]
		if !ok {
			return out, &UnmappedStatusError{Status: out.ProviderStatus, Profile: p.Name}
		}
		out.Status = s
	}
	return out, nil
}

// amount converts the amount value, written in format, to ISO 4217 minor
// units of currency.
func (p *Profile) amount(format AmountFormat, v gjson.Result, currency string) (int64, error) {
	text := func(r gjson.Result) (string, bool) {
		switch r.Type {
		case gjson.Number:
			return r.Raw, true
		case gjson.String:
			return r.Str, true
		}
		return "", false
	}
	if format == AmountMinor {
		s, ok := text(v)
		if !ok || !isDigits(strings.TrimPrefix(s, "-")) {
			return 0, fmt.Errorf("%s is not an integer", v.Raw)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s does not fit in 64 bits", s)
		}
		return p.minorToISO(n, currency)
	}
	exp, err := ledgerExponent(currency)
	if err != nil {
		return 0, err
	}
	switch format {
	case AmountDecimal:
		s, ok := text(v)
		if !ok {
			return 0, fmt.Errorf("%s is not a decimal", v.Raw)
		}
		return DecimalToMinor(s, exp)
	case AmountMilli:
		s, ok := text(v)
		if !ok {
			return 0, fmt.Errorf("%s is not an integer", v.Raw)
		}
		return MilliToMinor(s, exp)
	default: // AmountUnitsNanos
		if !v.IsObject() {
			return 0, fmt.Errorf("%s is not an object with units and nanos", v.Raw)
		}
		units, ok := text(v.Get("units"))
		if !ok {
			units = "0" // google.type.Money omits zero fields
		}
		var nanos int64
		if n := v.Get("nanos"); n.Exists() {
			s, ok := text(n)
			if !ok {
				return 0, fmt.Errorf("nanos %s is not an integer", n.Raw)
			}
			if nanos, err = strconv.ParseInt(s, 10, 64); err != nil {
				return 0, fmt.Errorf("nanos %s is not an integer", n.Raw)
			}
		}
		return UnitsNanosToMinor(units, nanos, exp)
	}
}
