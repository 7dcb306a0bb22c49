package profile

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestDecimalToMinor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		exp  int
		want int64
		err  string // substring; empty for success
	}{
		{"10.99", 2, 1099, ""},
		{"10.990", 2, 1099, ""},
		{"10.9", 2, 1090, ""},
		{"10", 2, 1000, ""},
		{"0.01", 2, 1, ""},
		{"-5.25", 2, -525, ""},
		{"-0.00", 2, 0, ""},
		{"1500", 0, 1500, ""},
		{"1500.0", 0, 1500, ""},
		{"1.234", 3, 1234, ""},
		{"1.2345", 4, 12345, ""},
		{"92233720368547758.07", 2, math.MaxInt64, ""},
		{"-92233720368547758.08", 2, math.MinInt64, ""},
		{"92233720368547758.08", 2, 0, "does not fit"},
		{"10.995", 2, 0, "more than 2 decimal places"},
		{"1500.5", 0, 0, "more than 0 decimal places"},
		{"", 2, 0, "not a decimal"},
		{".5", 2, 0, "not a decimal"},
		{"1.", 2, 0, "not a decimal"},
		{"+1", 2, 0, "not a decimal"},
		{"1e3", 2, 0, "not a decimal"},
		{" 1", 2, 0, "not a decimal"},
		{"1,5", 2, 0, "not a decimal"},
		{"--1", 2, 0, "not a decimal"},
		{"1", 19, 0, "exponent"},
	} {
		got, err := DecimalToMinor(tc.in, tc.exp)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("DecimalToMinor(%q, %d) = %d, %v; want %d", tc.in, tc.exp, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrAmount)):
			t.Errorf("DecimalToMinor(%q, %d) = %d, %v; want an error with %q", tc.in, tc.exp, got, err, tc.err)
		}
	}
}

func TestMilliAndUnitsNanos(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		exp  int
		want int64
		ok   bool
	}{{"10990", 2, 1099, true}, {"10995", 2, 0, false}, {"5", 3, 5, true}, {"5000", 0, 5, true}, {"5001", 0, 0, false},
		{"7", 4, 70, true}, {"-10990", 2, -1099, true}, {"1.5", 2, 0, false}, {"", 2, 0, false}} {
		got, err := MilliToMinor(tc.in, tc.exp)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("MilliToMinor(%q, %d) = %d, %v", tc.in, tc.exp, got, err)
		}
	}
	for _, tc := range []struct {
		units string
		nanos int64
		exp   int
		want  int64
		ok    bool
	}{{"10", 990000000, 2, 1099, true}, {"10", 995000000, 2, 0, false}, {"-1", -750000000, 2, -175, true},
		{"0", -750000000, 2, -75, true}, {"1", -5, 9, 0, false}, {"1", 1e9, 2, 0, false}, {"1500", 0, 0, 1500, true}} {
		got, err := UnitsNanosToMinor(tc.units, tc.nanos, tc.exp)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("UnitsNanosToMinor(%q, %d, %d) = %d, %v", tc.units, tc.nanos, tc.exp, got, err)
		}
	}
}

func TestExponents(t *testing.T) {
	t.Parallel()
	p := &Profile{Exponents: map[string]int{"ISK": 2}}
	for cur, want := range map[string]int{"EUR": 2, "usd": 2, "JPY": 0, "KWD": 3, "CLF": 4, "ISK": 2, "XYZ": 2} {
		if got, err := p.Exponent(cur); err != nil || got != want {
			t.Errorf("Exponent(%s) = %d, %v; want %d", cur, got, err, want)
		}
	}
	if _, err := p.Exponent("EURO"); err == nil {
		t.Error("Exponent(EURO) accepted")
	}
}

// FuzzDecimalToMinor checks the conversion against its inverse across the
// exponent table: every int64 written with the currency's exponent converts
// back exactly; any accepted string is a plain decimal whose value is kept.
func FuzzDecimalToMinor(f *testing.F) {
	f.Add(int64(1099), "EUR", "10.99")
	f.Add(int64(-1), "JPY", "1.5")
	f.Add(int64(math.MaxInt64), "KWD", "0.0001")
	f.Add(int64(math.MinInt64), "CLF", "-0")
	f.Fuzz(func(t *testing.T, v int64, currency, s string) {
		exp := ISOExponent(strings.ToUpper(currency))
		dec := MinorToDecimal(v, exp)
		got, err := DecimalToMinor(dec, exp)
		if err != nil || got != v {
			t.Fatalf("DecimalToMinor(MinorToDecimal(%d, %d) = %q) = %d, %v", v, exp, dec, got, err)
		}
		// Trailing zeros change nothing.
		if exp > 0 {
			if got, err := DecimalToMinor(dec+"000", exp); err != nil || got != v {
				t.Fatalf("DecimalToMinor(%q) = %d, %v", dec+"000", got, err)
			}
		}
		// An arbitrary string either fails or round-trips to the same value.
		m, err := DecimalToMinor(s, exp)
		if err != nil {
			if !errors.Is(err, ErrAmount) {
				t.Fatalf("error %v does not wrap ErrAmount", err)
			}
			return
		}
		back, err := DecimalToMinor(MinorToDecimal(m, exp), exp)
		if err != nil || back != m {
			t.Fatalf("%q → %d → %q → %d, %v", s, m, MinorToDecimal(m, exp), back, err)
		}
		// The accepted string has at most exp significant decimals: with one
		// more non-zero digit it must fail.
		if strings.Contains(s, ".") || exp == 0 {
			extra := s
			if !strings.Contains(s, ".") {
				extra += "."
			}
			extra += strings.Repeat("0", max(0, exp-(len(extra)-strings.Index(extra, ".")-1))) + "1"
			if _, err := DecimalToMinor(extra, exp); err == nil {
				t.Fatalf("DecimalToMinor(%q, %d) accepted an extra digit", extra, exp)
			}
		}
	})
}
