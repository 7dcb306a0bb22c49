package sample

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
)

var update = flag.Bool("update", false, "rewrite the sample days in testdata/")

var regularID = regexp.MustCompile(`^tx_20261024_[0-9]{7}$`)

var day = payments.Date{Year: 2026, Month: time.October, Day: 24}

// TestTestdataIsGenerated proves the sample days in testdata/ are exactly
// what `reconcile sample --date 2026-10-24 --count 3000 --seed 1` writes.
// Run with -update to regenerate them.
func TestTestdataIsGenerated(t *testing.T) {
	t.Parallel()
	for _, f := range []payments.Format{payments.FormatCSV, payments.FormatJSONL} {
		var buf bytes.Buffer
		if err := Write(&buf, f, Config{Date: day, Count: 3000, Seed: 1}); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "testdata", "payments-2026-10-24."+string(f))
		if *update {
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("%s differs from the generator's output; run go test ./internal/sample -update", path)
		}
	}
}

func TestDeterministic(t *testing.T) {
	t.Parallel()
	digest := func(cfg Config) [32]byte {
		h := sha256.New()
		if err := Write(h, payments.FormatJSONL, cfg); err != nil {
			t.Fatal(err)
		}
		return [32]byte(h.Sum(nil))
	}
	a := digest(Config{Date: day, Count: 5000, Seed: 7})
	if b := digest(Config{Date: day, Count: 5000, Seed: 7}); a != b {
		t.Error("same config gave different bytes")
	}
	if c := digest(Config{Date: day, Count: 5000, Seed: 8}); a == c {
		t.Error("different seeds gave the same bytes")
	}
}

// TestRoundTrip reads generated days back with the payment reader, in both
// formats and in a zone with a 25-hour day: every payment is valid, in the
// business date, and read back exactly as generated.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	dstEnd := payments.Date{Year: 2026, Month: time.October, Day: 25} // clocks go back: 25 hours
	for _, tc := range []struct {
		format payments.Format
		date   payments.Date
		loc    *time.Location
	}{
		{payments.FormatCSV, day, time.UTC},
		{payments.FormatJSONL, day, time.UTC},
		{payments.FormatCSV, dstEnd, berlin},
		{payments.FormatJSONL, dstEnd, berlin},
	} {
		cfg := Config{Date: tc.date, Location: tc.loc, Count: 5000, Seed: 3}
		var buf bytes.Buffer
		if err := Write(&buf, tc.format, cfg); err != nil {
			t.Fatal(err)
		}
		rd, err := payments.NewReader(&buf, "day."+string(tc.format), payments.Options{BusinessDate: tc.date, Location: tc.loc})
		if err != nil {
			t.Fatal(err)
		}
		g, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			got, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			want, ok := g.Next()
			if !ok {
				t.Fatalf("%s: reader returned more payments than generated", tc.format)
			}
			n++
			want.Line = n + 1
			if tc.format == payments.FormatJSONL {
				want.Line = n
			}
			if !got.OccurredAt.Equal(want.OccurredAt) {
				t.Fatalf("%s line %d: occurred_at %v, want %v", tc.format, got.Line, got.OccurredAt, want.OccurredAt)
			}
			got.OccurredAt, want.OccurredAt = time.Time{}, time.Time{}
			if got != want {
				t.Fatalf("%s: read %+v, want %+v", tc.format, got, want)
			}
		}
		if p := rd.Problems(); !p.Empty() {
			t.Fatalf("%s: %v", tc.format, p)
		}
		if n != cfg.Count {
			t.Fatalf("%s: read %d payments, want %d", tc.format, n, cfg.Count)
		}
	}
}

// TestRealistic checks the shape of a day: skewed accounts, several
// currencies, mostly succeeded, some unusual ids, times in order.
func TestRealistic(t *testing.T) {
	t.Parallel()
	g, err := New(Config{Date: day, Count: 18000, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	perAccount := map[string]int{}
	currencies := map[string]int{}
	statuses := map[string]int{}
	unusual := 0
	var last time.Time
	for {
		p, ok := g.Next()
		if !ok {
			break
		}
		perAccount[p.AccountID]++
		currencies[p.Currency]++
		statuses[p.Status]++
		if !regularID.MatchString(p.TransactionID) {
			unusual++
		}
		if p.OccurredAt.Before(last) {
			t.Fatalf("%s occurs before its predecessor", p.TransactionID)
		}
		last = p.OccurredAt
	}
	top := 0
	ones := 0
	for _, n := range perAccount {
		top = max(top, n)
		if n <= 2 {
			ones++
		}
	}
	t.Logf("accounts %d, busiest %d payments, with at most 2: %d; currencies %v; statuses %v; unusual ids %d",
		len(perAccount), top, ones, currencies, statuses, unusual)
	if top < 50 || top > 18000/5 {
		t.Errorf("busiest account has %d payments, want a skew (50 to 3600)", top)
	}
	if len(currencies) < 5 || currencies["JPY"] == 0 {
		t.Errorf("currencies %v, want at least 5 including JPY", currencies)
	}
	if statuses["succeeded"] < 16000 || statuses["refunded"] == 0 || statuses["failed"] == 0 {
		t.Errorf("statuses %v, want mostly succeeded, some refunded and failed", statuses)
	}
	if unusual < 50 || unusual > 150 {
		t.Errorf("%d unusual ids, want about 90", unusual)
	}
}

// BenchmarkWrite measures writing a million payments.
func BenchmarkWrite(b *testing.B) {
	for _, f := range []payments.Format{payments.FormatCSV, payments.FormatJSONL} {
		b.Run(string(f), func(b *testing.B) {
			for b.Loop() {
				if err := Write(io.Discard, f, Config{Date: day, Count: 1_000_000, Seed: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
