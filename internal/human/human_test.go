package human

import (
	"math"
	"testing"
	"time"
)

func TestCount(t *testing.T) {
	t.Parallel()
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1648858: "1,648,858", -12345: "-12,345",
		math.MinInt64: "-9,223,372,036,854,775,808"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestNumber(t *testing.T) {
	t.Parallel()
	for x, want := range map[float64]string{0: "0", 1234.6: "1,235", 200: "200", 19.84: "19.8", 1.234: "1.23", 0.5: "0.5",
		0.001154: "0.00115", 39.68588065580161: "39.7", -2.5: "-2.5", 1e9: "1,000,000,000"} {
		if got := Number(x); got != want {
			t.Errorf("Number(%v) = %q, want %q", x, got, want)
		}
	}
}

func TestRate(t *testing.T) {
	t.Parallel()
	for r, want := range map[float64]string{
		39.68588065580161:       "39.7/s",
		0.000011458333333333333: "0.99/day",
		410288:                  "410,288/s",
		0.5:                     "0.5/s",
		0.07:                    "4.2/min",
		1.0 / 3600:              "1/h",
		0:                       "0/s",
		10:                      "10/s",
	} {
		if got := Rate(r); got != want {
			t.Errorf("Rate(%v) = %q, want %q", r, got, want)
		}
	}
}

func TestDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0: "0s", 249600 * time.Microsecond: "250ms", 1340 * time.Millisecond: "1.3s", 24498 * time.Millisecond: "24s",
		4*time.Minute + 5*time.Second: "4m5s", time.Hour: "1h", 3*time.Hour + 25*time.Minute + 10*time.Second: "3h25m",
		50 * time.Hour: "2d2h", 72 * time.Hour: "3d", -90 * time.Second: "-1m30s", 10 * time.Minute: "10m",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestMoney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{164858, "EUR", "1,648.58 EUR"},
		{5, "eur", "0.05 EUR"},
		{-1250, "USD", "-12.50 USD"},
		{1500, "JPY", "1,500 JPY"},
		{1500, "KWD", "1.500 KWD"},
		{123456789, "CLF", "12,345.6789 CLF"},
		{0, "GBP", "0.00 GBP"},
	} {
		if got := Money(tc.minor, tc.currency); got != tc.want {
			t.Errorf("Money(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}
