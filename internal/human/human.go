// Package human writes numbers for people, the same way in every command,
// report and page: counts with thousands separators, rates per second (per
// minute, hour or day when smaller), durations rounded to what a person
// reads, and amounts in major units with their currency, by the currency's
// ISO 4217 exponent.
//
// Machine formats (JSON, CSV) keep exact values; this package is for text
// a person reads.
package human

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/profile"
)

// Count writes n with thousands separators: 1,648,858.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	return sign(neg) + group(strings.TrimPrefix(s, "-"))
}

// group puts a comma between every three digits of an unsigned integer.
func group(digits string) string {
	if len(digits) <= 3 {
		return digits
	}
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func sign(neg bool) string {
	if neg {
		return "-"
	}
	return ""
}

// Number writes x with its integer part in full (grouped) and at most
// three significant digits in all, without trailing zeros or an exponent:
// 1,234, 200, 19.8, 1.23, 0.5, 0.00115.
func Number(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'f', -1, 64)
	case x < 0:
		return "-" + Number(-x)
	case x == 0:
		return "0"
	}
	decimals := max(0, 2-int(math.Floor(math.Log10(x))))
	s := strconv.FormatFloat(x, 'f', decimals, 64)
	whole, frac, _ := strings.Cut(s, ".")
	frac = strings.TrimRight(frac, "0")
	if frac == "" {
		return group(whole)
	}
	return group(whole) + "." + frac
}

// rateUnits are the units a rate is written in, largest first: the first
// in which the rate reaches its threshold is taken, so that a rate is
// never written as a string of zeros.
var rateUnits = []struct {
	per       time.Duration
	name      string
	threshold float64
}{
	{time.Second, "/s", 0.1},
	{time.Minute, "/min", 1},
	{time.Hour, "/h", 1},
	{24 * time.Hour, "/day", 0},
}

// Rate writes a rate given per second with its unit: 39.7/s, 1,250/s,
// 0.5/s; below 0.1/s per minute (4.2/min), hour (1.5/h) or day (0.99/day).
func Rate(perSecond float64) string {
	if perSecond == 0 || math.IsNaN(perSecond) || math.IsInf(perSecond, 0) {
		return Number(perSecond) + "/s"
	}
	for _, u := range rateUnits {
		if v := perSecond * u.per.Seconds(); math.Abs(v) >= u.threshold {
			return Number(v) + u.name
		}
	}
	panic("unreachable: the last unit has no threshold")
}

// Duration writes d rounded to what a person reads: 250ms, 1.3s, 42s, 4m5s,
// 3h25m, 2d3h. Zero is 0s.
func Duration(d time.Duration) string {
	if d < 0 {
		return "-" + Duration(-d)
	}
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return units(int64(d/time.Minute), "m", int64(d%time.Minute/time.Second), "s")
	case d < 48*time.Hour:
		d = d.Round(time.Minute)
		return units(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "m")
	}
	d = d.Round(time.Hour)
	return units(int64(d/(24*time.Hour)), "d", int64(d%(24*time.Hour)/time.Hour), "h")
}

// units writes "4m5s", or "4m" when the smaller part is zero.
func units(big int64, bigUnit string, small int64, smallUnit string) string {
	s := strconv.FormatInt(big, 10) + bigUnit
	if small != 0 {
		s += strconv.FormatInt(small, 10) + smallUnit
	}
	return s
}

// Money writes an amount held in minor units in its currency's major units,
// exactly, by the currency's ISO 4217 exponent: 164858 EUR is
// "1,648.58 EUR", 1500 JPY "1,500 JPY", 1500 KWD "1.500 KWD".
func Money(minor int64, currency string) string {
	code := strings.ToUpper(currency)
	dec := profile.MinorToDecimal(minor, profile.ISOExponent(code))
	neg := strings.HasPrefix(dec, "-")
	whole, frac, hasFrac := strings.Cut(strings.TrimPrefix(dec, "-"), ".")
	s := sign(neg) + group(whole)
	if hasFrac {
		s += "." + frac
	}
	return s + " " + code
}
