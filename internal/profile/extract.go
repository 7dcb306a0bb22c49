package profile

import (
	"bytes"
	"errors"
	"fmt"
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
	if r.Value == "" {
		return true
	}
	switch res.Type {
	case gjson.String:
		return strconv.Quote(res.Str) == r.Value
	case gjson.True:
		return r.Value == "true"
	case gjson.False:
		return r.Value == "false"
	case gjson.Number:
		return res.Raw == r.Value
	}
	return false
}

// Extracted is a transaction read from an answer, in the ledger's terms.
type Extracted struct {
	ID          string
	AmountMinor int64
	// Currency is the currency code (upper-cased when the profile says so).
	Currency string
	// Status is the ledger status; ProviderStatus the provider's own word.
	Status, ProviderStatus string
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

// Extract reads the transaction of a successful answer's body. Its error
// wraps [ErrBody] (not JSON, a field missing or of the wrong type, a bad
// amount) or is an [*UnmappedStatusError]; with the latter, the rest of the
// record is filled in.
func (p *Profile) Extract(body []byte) (Extracted, error) {
	if !gjson.ValidBytes(body) {
		return Extracted{}, fmt.Errorf("%w: not valid JSON", ErrBody)
	}
	rp := &p.Record
	var out Extracted
	var missing []string
	id := gjson.GetBytes(body, rp.ID)
	switch id.Type {
	case gjson.String:
		out.ID = id.Str
	case gjson.Number:
		out.ID = id.Raw
	}
	if out.ID == "" {
		missing = append(missing, rp.ID)
	}
	cur := gjson.GetBytes(body, rp.Currency)
	if cur.Type == gjson.String && cur.Str != "" {
		out.Currency = cur.Str
		if rp.UpperCurrency {
			out.Currency = strings.ToUpper(out.Currency)
		}
	} else {
		missing = append(missing, rp.Currency)
	}
	st := gjson.GetBytes(body, rp.Status)
	if st.Type == gjson.String && st.Str != "" {
		out.ProviderStatus = st.Str
	} else {
		missing = append(missing, rp.Status)
	}
	amount := gjson.GetBytes(body, rp.Amount)
	if !amount.Exists() || amount.Type == gjson.Null {
		missing = append(missing, rp.Amount)
	}
	if len(missing) > 0 {
		return Extracted{}, fmt.Errorf("%w: missing %s", ErrBody, strings.Join(missing, ", "))
	}
	var err error
	if out.AmountMinor, err = p.amount(amount, out.Currency); err != nil {
		return Extracted{}, fmt.Errorf("%w: %s: %w", ErrBody, rp.Amount, err)
	}
	if p.StatusMap == nil {
		out.Status = out.ProviderStatus
		return out, nil
	}
	s, ok := p.StatusMap[out.ProviderStatus]
	if !ok {
		return out, &UnmappedStatusError{Status: out.ProviderStatus, Profile: p.Name}
	}
	out.Status = s
	return out, nil
}

// amount converts the amount value to minor units.
func (p *Profile) amount(v gjson.Result, currency string) (int64, error) {
	text := func(r gjson.Result) (string, bool) {
		switch r.Type {
		case gjson.Number:
			return r.Raw, true
		case gjson.String:
			return r.Str, true
		}
		return "", false
	}
	if p.Record.AmountFormat == AmountMinor {
		s, ok := text(v)
		if !ok || !isDigits(strings.TrimPrefix(s, "-")) {
			return 0, fmt.Errorf("%s is not an integer", v.Raw)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s does not fit in 64 bits", s)
		}
		return n, nil
	}
	exp, err := p.Exponent(currency)
	if err != nil {
		return 0, err
	}
	switch p.Record.AmountFormat {
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
