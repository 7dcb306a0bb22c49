package profile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxExponent is the largest exponent accepted: 10^18 still fits an int64.
const maxExponent = 18

// iso4217 lists the active ISO 4217 currencies whose minor unit is not two
// decimal places (the ISO 4217 maintenance agency's list one, "Minor unit"
// column). Every other three-letter code has two.
var iso4217 = map[string]int{
	// No minor unit.
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	// Three decimal places.
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// Four.
	"CLF": 4, "UYW": 4,
}

// Exponent returns the number of decimal places of the provider's minor
// unit of currency: the profile's currency_exponents where the provider
// departs from ISO 4217 (Stripe's ISK), else ISO 4217's (2 for codes not
// listed as otherwise). The code is upper-cased first; a code that is not
// three letters is an error.
func (p *Profile) Exponent(currency string) (int, error) {
	c := strings.ToUpper(currency)
	if !isCurrency(c) {
		return 0, fmt.Errorf("currency %q is not a three-letter code", currency)
	}
	if e, ok := p.Exponents[c]; ok {
		return e, nil
	}
	return ISOExponent(c), nil
}

// ledgerExponent returns the exponent of the ledger's minor units of
// currency: ISO 4217's, whatever the provider's.
func ledgerExponent(currency string) (int, error) {
	c := strings.ToUpper(currency)
	if !isCurrency(c) {
		return 0, fmt.Errorf("currency %q is not a three-letter code", currency)
	}
	return ISOExponent(c), nil
}

// minorToISO converts v, in the provider's minor units of currency, to
// ISO 4217 minor units, exactly: Stripe's 150000 ISK (two-decimal) is
// 1500; 150050 ISK is an error, not a rounding, since the ledger cannot
// hold half a króna.
func (p *Profile) minorToISO(v int64, currency string) (int64, error) {
	from, err := p.Exponent(currency)
	if err != nil {
		return 0, err
	}
	to := ISOExponent(strings.ToUpper(currency))
	if from == to {
		return v, nil
	}
	n, err := DecimalToMinor(MinorToDecimal(v, from), to)
	if err != nil {
		return 0, fmt.Errorf("%w: %d in %s minor units of %d decimals: %s", ErrAmount, v, strings.ToUpper(currency), from, amountDetail(err))
	}
	return n, nil
}

// ISOToProviderMinor converts v, in ISO 4217 minor units of currency, to
// the provider's minor units: what the provider writes for the amount the
// ledger holds (Stripe writes 1500 ISK as 150000). It is minorToISO's
// inverse, for a simulator speaking the provider's API.
func (p *Profile) ISOToProviderMinor(v int64, currency string) (int64, error) {
	to, err := p.Exponent(currency)
	if err != nil {
		return 0, err
	}
	from := ISOExponent(strings.ToUpper(currency))
	if from == to {
		return v, nil
	}
	n, err := DecimalToMinor(MinorToDecimal(v, from), to)
	if err != nil {
		return 0, fmt.Errorf("%w: %d %s cannot be written in %d decimals: %s", ErrAmount, v, strings.ToUpper(currency), to, amountDetail(err))
	}
	return n, nil
}

// ISOExponent returns the ISO 4217 exponent of an upper-case currency code:
// 0 for JPY, 3 for KWD, 2 for EUR and for codes not in the table.
func ISOExponent(code string) int {
	if e, ok := iso4217[code]; ok {
		return e
	}
	return 2
}

// ErrAmount is wrapped by every amount conversion error.
var ErrAmount = errors.New("bad amount")

// DecimalToMinor converts a decimal in major units ("10.99", "-5", "0.5")
// to minor units with exp decimal places, exactly: "10.99" with exp 2 is
// 1099, "10.990" too, but "10.995" is an error (it has more precision than
// the currency), not a rounding. Signs other than a leading '-', exponents,
// spaces and empty parts ("1.", ".5") are errors, as are values beyond an
// int64.
func DecimalToMinor(s string, exp int) (int64, error) {
	if exp < 0 || exp > maxExponent {
		return 0, fmt.Errorf("%w: exponent %d out of range", ErrAmount, exp)
	}
	neg := strings.HasPrefix(s, "-")
	body := strings.TrimPrefix(s, "-")
	intPart, frac, hasDot := strings.Cut(body, ".")
	if !isDigits(intPart) || hasDot && !isDigits(frac) {
		return 0, fmt.Errorf("%w: %q is not a decimal number", ErrAmount, s)
	}
	if len(frac) > exp {
		if extra := frac[exp:]; strings.Trim(extra, "0") != "" {
			return 0, fmt.Errorf("%w: %q has more than %d decimal places", ErrAmount, s, exp)
		}
		frac = frac[:exp]
	}
	digits := strings.TrimLeft(intPart+frac+strings.Repeat("0", exp-len(frac)), "0")
	if digits == "" {
		return 0, nil
	}
	if neg {
		digits = "-" + digits
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q does not fit in 64 bits of minor units", ErrAmount, s)
	}
	return v, nil
}

// MinorToDecimal writes minor units with exp decimal places: 1099 with exp
// 2 is "10.99", 5 with exp 0 is "5". It is DecimalToMinor's inverse.
func MinorToDecimal(v int64, exp int) string {
	s := strconv.FormatInt(v, 10)
	if exp <= 0 {
		return s
	}
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) <= exp {
		s = strings.Repeat("0", exp-len(s)+1) + s
	}
	s = s[:len(s)-exp] + "." + s[len(s)-exp:]
	if neg {
		s = "-" + s
	}
	return s
}

// MilliToMinor converts an integer amount in thousandths of the major unit
// to minor units with exp decimal places, exactly (10990 with exp 2 is 1099;
// 10995 is an error).
func MilliToMinor(s string, exp int) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(s, "-")
	if !isDigits(digits) {
		return 0, fmt.Errorf("%w: %q is not an integer", ErrAmount, s)
	}
	for len(digits) < 4 {
		digits = "0" + digits
	}
	dec := digits[:len(digits)-3] + "." + digits[len(digits)-3:]
	if neg {
		dec = "-" + dec
	}
	v, err := DecimalToMinor(dec, exp)
	if err != nil {
		return 0, fmt.Errorf("%w: %q thousandths: %s", ErrAmount, s, amountDetail(err))
	}
	return v, nil
}

// UnitsNanosToMinor converts a google.type.Money amount (whole units and
// billionths, both of the same sign, |nanos| < 10^9) to minor units with exp
// decimal places, exactly.
func UnitsNanosToMinor(units string, nanos int64, exp int) (int64, error) {
	neg := strings.HasPrefix(units, "-")
	u := strings.TrimPrefix(units, "-")
	if !isDigits(u) {
		return 0, fmt.Errorf("%w: units %q is not an integer", ErrAmount, units)
	}
	if nanos <= -1e9 || nanos >= 1e9 {
		return 0, fmt.Errorf("%w: nanos %d out of range", ErrAmount, nanos)
	}
	unitsZero := strings.Trim(u, "0") == ""
	if nanos != 0 && !unitsZero && (nanos < 0) != neg {
		return 0, fmt.Errorf("%w: units %s and nanos %d have different signs", ErrAmount, units, nanos)
	}
	if nanos < 0 {
		neg, nanos = true, -nanos
	}
	dec := fmt.Sprintf("%s.%09d", u, nanos)
	if neg {
		dec = "-" + dec
	}
	return DecimalToMinor(dec, exp)
}

// amountDetail is the text of a conversion error without its "bad
// amount: " prefix, for an error that says it again.
func amountDetail(err error) string {
	return strings.TrimPrefix(err.Error(), ErrAmount.Error()+": ")
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
