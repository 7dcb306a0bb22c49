package providersim

import (
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
)

// BenchmarkLookup measures lookups served over loopback HTTP by an unlimited,
// zero-latency simulator, with as many concurrent clients as GOMAXPROCS: the
// ceiling the simulator puts on end-to-end benchmarks.
func BenchmarkLookup(b *testing.B) {
	recs := dataset(10000)
	sim, err := New(Config{Records: recs, Seed: 1, Shares: Shares{Mismatch: 0.02, Missing: 0.01}})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(sim)
	b.Cleanup(srv.Close)
	c, err := provider.New(provider.Config{BaseURL: srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			id := recs[i%len(recs)].ID
			if _, err := c.Get(b.Context(), provider.Lookup{TransactionID: id, IdempotencyKey: "bench:" + strconv.Itoa(i)}); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "lookups/s")
}
