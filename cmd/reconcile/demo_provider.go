package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
	"github.com/reconcile/reconcile/internal/sample"
)

// demoShares are the simulated provider's faults in the demo: mismatches,
// missing ids, transient 503s and a few permanent failures (400 and an
// unreadable body) that end as dead letters.
var demoShares = providersim.Shares{Mismatch: 0.03, Missing: 0.02, Transient: 0.04, BadRequest: 0.002, BadBody: 0.002}

// demoBurst is the burst of the provider's limit and of the demo's limiter:
// one second of its highest rate, the bucket the benchmarks give their
// providers. A much smaller bucket would make every 429 cost nearly all of
// its whole-second pause (a bucket of 20 keeps 20 of the 100 calls a second
// of 100/s refills), so that no limiter could keep a phase of a few seconds
// near its limit.
const demoBurst = 300

// demoDay is the generated day: the payments to enqueue as CSV and the
// provider's records of them.
type demoDay struct {
	csv      []byte
	records  []provider.Record
	accounts int
	currency map[string]int
	// unexpected are the provider's records the file lacks (list mode).
	unexpected map[string]bool
}

// addUnexpected adds n records to the provider's side that the payment
// file lacks: charges nobody booked, which list mode reports unexpected.
func (d *demoDay) addUnexpected(n int) {
	d.unexpected = make(map[string]bool, n)
	for i := range n {
		id := fmt.Sprintf("tx_unbooked_%06d", i+1)
		d.records = append(d.records, provider.Record{ID: id, AmountMinor: int64(100 + 37*i), Currency: "EUR", Status: payments.StatusSucceeded})
		d.unexpected[id] = true
	}
}

// generateDemoDay generates n payments of date with seed.
func generateDemoDay(date payments.Date, n int, seed uint64) (demoDay, error) {
	return generateDemoDayIn(date, n, seed, providersim.ShapeReconcile)
}

// generateDemoDayIn generates a day whose statuses the shape can say: a
// status it has no word for (Stripe's PaymentIntents are never refunded)
// becomes canceled, or succeeded when it cannot say canceled either.
func generateDemoDayIn(date payments.Date, n int, seed uint64, shape providersim.Shape) (demoDay, error) {
	g, err := sample.New(sample.Config{Date: date, Count: n, Seed: seed})
	if err != nil {
		return demoDay{}, err
	}
	day := demoDay{currency: map[string]int{}}
	var buf bytes.Buffer
	buf.WriteString(strings.Join(payments.Fields(), ",") + "\n")
	accounts := map[string]bool{}
	var line []byte
	for {
		p, ok := g.Next()
		if !ok {
			break
		}
		if !shape.Expresses(payments.KindPayment, p.Status) {
			p.Status = payments.StatusCanceled
			if !shape.Expresses(payments.KindPayment, p.Status) {
				p.Status = payments.StatusSucceeded
			}
		}
		line = sample.AppendCSV(line[:0], p)
		buf.Write(line)
		day.records = append(day.records, provider.Record{ID: p.TransactionID, AmountMinor: p.AmountMinor, Currency: p.Currency, Status: p.Status})
		accounts[p.AccountID] = true
		day.currency[p.Currency]++
	}
	day.csv, day.accounts = buf.Bytes(), len(accounts)
	return day, nil
}

// demoSchedule is the provider's limit during the demo: 300/s, then 100/s,
// then 250/s. The changes are placed by item count (the first 30% of the
// items at 300/s, the next 30% at 100/s), so the phases happen at any
// --items; the 100/s phase lasts long enough (9 s at the default 3,000
// items) that its two 1 s pauses (the fall and its measurement) are not
// most of it.
func demoSchedule(items int) providersim.Schedule {
	t1 := max(time.Second, time.Duration(float64(items)*0.30/300*float64(time.Second))).Round(100 * time.Millisecond)
	t2 := t1 + max(time.Second, time.Duration(float64(items)*0.30/100*float64(time.Second))).Round(100*time.Millisecond)
	return providersim.Schedule{{At: 0, Rate: 300}, {At: t1, Rate: 100}, {At: t2, Rate: 250}}
}

// demoSim returns the simulator of a demo day.
func demoSim(day demoDay, seed uint64, token provider.Secret, logger *slog.Logger) (*providersim.Server, error) {
	return providersim.New(providersim.Config{
		Records: day.records, Seed: seed, Shares: demoShares, TransientCalls: 2,
		Latency: providersim.Latency{Fixed: 2 * time.Millisecond, Jitter: 8 * time.Millisecond},
		Token:   token, Logger: logger,
	})
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return "demo_" + hex.EncodeToString(b)
}

// demoProvider is the demo's simulated provider, served on a loopback port
// in the demo's API shape, with the credentials the consumer is given.
type demoProvider struct {
	sim          *providersim.Server
	url          string
	token        provider.Secret
	clientSecret provider.Secret
	stop         func()
}

// startDemoProvider serves the simulator of day in the shape o asks for and
// returns once it accepts connections.
func startDemoProvider(ctx context.Context, day demoDay, o demoOptions, logger *slog.Logger) (*demoProvider, error) {
	p := &demoProvider{token: provider.Secret(randomToken()), clientSecret: provider.Secret(randomToken())}
	sim, err := demoSim(day, o.seed, p.token, logger)
	if err != nil {
		return nil, err
	}
	p.sim = sim
	handler, err := providersim.Shaped(sim, o.shape, providersim.ShapeConfig{ClientID: "demo", ClientSecret: p.clientSecret})
	if err != nil {
		return nil, err
	}
	simCtx, stopSim := context.WithCancel(ctx)
	var simDone sync.WaitGroup
	p.stop = func() { stopSim(); simDone.Wait() }
	ready, simErr := make(chan net.Addr, 1), make(chan error, 1)
	simDone.Add(1)
	go func() {
		defer simDone.Done()
		if err := providersim.ServeHandler(simCtx, handler, "127.0.0.1:0", func(a net.Addr) { ready <- a }); err != nil {
			simErr <- err
		}
	}()
	select {
	case a := <-ready:
		p.url = "http://" + a.String()
		return p, nil
	case err := <-simErr:
		p.stop()
		return nil, fmt.Errorf("demo: start provider simulator: %w", err)
	}
}

// printDemoDay says what the day holds and how the provider behaves.
func printDemoDay(w io.Writer, day demoDay, o demoOptions, providerURL string) {
	currencies := make([]string, 0, len(day.currency))
	for c := range day.currency {
		currencies = append(currencies, c)
	}
	slices.Sort(currencies)
	fmt.Fprintf(w, "reconcile demo: %d payments of %s across %d accounts in %d currencies (%s)\n",
		o.items, o.date, day.accounts, len(currencies), strings.Join(currencies, ", "))
	fmt.Fprintf(w, "simulated provider at %s speaking the %s API: rate limit %s, bucket of %d calls; faults: %.1f%% mismatched, %.1f%% missing, %.1f%% transient 503s, %.1f%% permanent (400 or unreadable body)\n",
		providerURL, o.shape, describeSchedule(demoSchedule(o.items)), demoBurst, 100*demoShares.Mismatch, 100*demoShares.Missing,
		100*demoShares.Transient, 100*(demoShares.BadRequest+demoShares.BadBody))
}
