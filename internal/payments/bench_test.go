package payments_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/sample"
)

var day = payments.Date{Year: 2026, Month: time.October, Day: 24}

func generate(tb testing.TB, format payments.Format, n int) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := sample.Write(&buf, format, sample.Config{Date: day, Count: n, Seed: 1}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func readCount(tb testing.TB, data []byte, format payments.Format) int {
	return readAll(tb, bytes.NewReader(data), format)
}

// readAll reads every payment from r, failing on any problem, and returns
// how many there were.
func readAll(tb testing.TB, r io.Reader, format payments.Format) int {
	rd, err := payments.NewReader(r, "bench", payments.Options{BusinessDate: day, Format: format})
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for {
		_, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
		n++
	}
	if p := rd.Problems(); !p.Empty() {
		tb.Fatal(p)
	}
	return n
}

// BenchmarkRead reads generated days of 10,000 and 100,000 payments. The
// allocations per row stay constant as the file grows: the reader streams.
//
//	go test -run '^$' -bench Read -benchmem ./internal/payments/
func BenchmarkRead(b *testing.B) {
	for _, format := range []payments.Format{payments.FormatCSV, payments.FormatJSONL} {
		for _, rows := range []int{10_000, 100_000} {
			data := generate(b, format, rows)
			b.Run(fmt.Sprintf("%s/%d", format, rows), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if n := readCount(b, data, format); n != rows {
						b.Fatalf("read %d rows", n)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
			})
		}
	}
}

// TestAllocationsPerRow proves the reader's allocations do not grow with
// the file: reading 4 times as many rows costs at most 4 times as many
// allocations (plus the id set's few growths), and few per row.
//
// It is not parallel: testing.AllocsPerRun refuses to run in parallel tests.
func TestAllocationsPerRow(t *testing.T) {
	for _, tc := range []struct {
		format payments.Format
		max    float64 // allocations per row
	}{{payments.FormatCSV, 2}, {payments.FormatJSONL, 12}} {
		small, large := generate(t, tc.format, 2_000), generate(t, tc.format, 8_000)
		a := testing.AllocsPerRun(1, func() { readCount(t, small, tc.format) })
		b := testing.AllocsPerRun(1, func() { readCount(t, large, tc.format) })
		t.Logf("%s: %.0f allocations for 2,000 rows, %.0f for 8,000 (%.2f per row)", tc.format, a, b, b/8_000)
		if b/8_000 > tc.max {
			t.Errorf("%s: %.2f allocations per row, want at most %v", tc.format, b/8_000, tc.max)
		}
		if b > 4*a+20 {
			t.Errorf("%s: allocations grow faster than the rows: %.0f for 2,000 rows, %.0f for 8,000", tc.format, a, b)
		}
	}
}

// BenchmarkStreamMillion streams a generated day of 1,000,000 payments from
// the generator through a pipe into the reader, as `reconcile sample |
// reconcile enqueue --source -` would. Run it under /usr/bin/time -v to see
// the peak RSS of the whole process:
//
//	go test -c -o /tmp/payments.test ./internal/payments/ &&
//	/usr/bin/time -v /tmp/payments.test -test.run '^$' -test.bench StreamMillion -test.benchtime 1x
func BenchmarkStreamMillion(b *testing.B) {
	for _, format := range []payments.Format{payments.FormatCSV, payments.FormatJSONL} {
		b.Run(string(format), func(b *testing.B) {
			for b.Loop() {
				pr, pw := io.Pipe()
				go func() {
					pw.CloseWithError(sample.Write(pw, format, sample.Config{Date: day, Count: 1_000_000, Seed: 1}))
				}()
				if n := readAll(b, pr, format); n != 1_000_000 {
					b.Fatalf("read %d payments, want 1,000,000", n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1_000_000), "ns/row")
		})
	}
}
