// Package sample generates a realistic, deterministic day of payments for
// trials, benchmarks and tests.
//
// The same Config always yields the same payments, byte for byte. A day has
// many accounts with a skewed distribution (a few accounts make many
// payments, most make one or two), several currencies (JPY without minor
// units), mostly succeeded payments with some refunded and failed ones, and
// times spread over the business date in its time zone, in order. Ids look
// like tx_20261024_0000001; about one in 200 is unusual but valid (quotes,
// backslashes, slashes, "../", commas, spaces, non-ASCII letters, emoji, URL
// syntax), so every consumer of the ids is exercised with them.
package sample

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
)

// Config describes a generated day.
type Config struct {
	// Date is the business date the payments occur on. Required.
	Date payments.Date
	// Location is the time zone of Date. Defaults to UTC.
	Location *time.Location
	// Count is the number of payments. Defaults to 18000, the nightly volume.
	Count int
	// Seed selects the day: the same seed gives the same payments. Defaults
	// to 0 (itself a valid seed).
	Seed uint64
	// Accounts is the number of distinct accounts to draw from. Defaults to
	// Count/8, at least 1.
	Accounts int
}

// Generator produces the payments of a Config one at a time. It is not safe
// for concurrent use.
type Generator struct {
	cfg      Config
	rng      *rand.Rand
	zipf     *rand.Zipf
	perm     uint64 // multiplier scattering popular accounts over the id range
	date     string // YYYYMMDD
	start    time.Time
	span     time.Duration
	i        int
	accounts uint64
}

// currencies are the currencies drawn, with weights and typical price points
// in minor units.
var currencies = []struct {
	code   string
	weight int
	prices []int64
}{
	{"EUR", 40, []int64{99, 199, 499, 999, 1999, 4999, 9999}},
	{"USD", 30, []int64{99, 199, 499, 999, 1999, 4999, 9999}},
	{"GBP", 12, []int64{79, 179, 449, 899, 1799, 4499, 8999}},
	{"JPY", 8, []int64{120, 250, 610, 1220, 3060, 6100, 12000}},
	{"SEK", 4, []int64{1000, 2500, 5000, 10000, 25000}},
	{"CHF", 3, []int64{100, 200, 500, 1000, 2000, 5000}},
	{"BRL", 3, []int64{490, 990, 2490, 4990, 9990}},
}

// New returns a Generator for cfg.
func New(cfg Config) (*Generator, error) {
	if cfg.Date.IsZero() {
		return nil, errors.New("generate sample: no date given")
	}
	if cfg.Count < 0 {
		return nil, fmt.Errorf("generate sample: count %d is negative", cfg.Count)
	}
	if cfg.Count == 0 {
		cfg.Count = 18000
	}
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	if cfg.Accounts <= 0 {
		cfg.Accounts = max(cfg.Count/8, 1)
	}
	g := &Generator{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
		date:     fmt.Sprintf("%04d%02d%02d", cfg.Date.Year, int(cfg.Date.Month), cfg.Date.Day),
		start:    cfg.Date.Start(cfg.Location),
		accounts: uint64(cfg.Accounts),
	}
	g.span = cfg.Date.End(cfg.Location).Sub(g.start)
	if g.accounts > 1 {
		g.zipf = rand.NewZipf(g.rng, 1.1, 30, g.accounts-1)
	}
	g.perm = 2654435761
	for gcd(g.perm, g.accounts) != 1 {
		g.perm++
	}
	return g, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Count returns the number of payments the Generator yields.
func (g *Generator) Count() int { return g.cfg.Count }

// Next returns the next payment, or false after the last one. Line is zero.
func (g *Generator) Next() (payments.Payment, bool) {
	if g.i >= g.cfg.Count {
		return payments.Payment{}, false
	}
	g.i++
	n := g.i
	var p payments.Payment
	p.TransactionID = g.id(n)

	var acct uint64
	if g.zipf != nil {
		acct = g.zipf.Uint64() * g.perm % g.accounts
	}
	p.AccountID = "acct_" + pad(acct, 6)

	w := g.rng.IntN(100)
	c := currencies[0]
	for _, cur := range currencies {
		if w < cur.weight {
			c = cur
			break
		}
		w -= cur.weight
	}
	p.Currency = c.code
	p.AmountMinor = c.prices[g.rng.IntN(len(c.prices))]
	if g.rng.IntN(10) == 0 {
		// Some payments are not at a price point: bundles, taxes, top-ups.
		p.AmountMinor = c.prices[0] + g.rng.Int64N(c.prices[len(c.prices)-1])
	}
	switch s := g.rng.IntN(100); {
	case s < 93:
		p.Status = "succeeded"
	case s < 97:
		p.Status = "refunded"
	default:
		p.Status = "failed"
	}
	// Stratified over the day: payment n falls in the n-th of Count equal
	// slices of the day, so times are in order and evenly spread.
	slice := float64(g.span) / float64(g.cfg.Count)
	off := time.Duration(slice * (float64(n-1) + g.rng.Float64()))
	p.OccurredAt = g.start.Add(off.Truncate(time.Millisecond)).In(g.cfg.Location)
	return p, true
}

// id returns the transaction id of payment n: tx_<date>_<n>, or now and then
// an unusual but valid one. Every id contains n, so ids are unique.
func (g *Generator) id(n int) string {
	num := pad(uint64(n), 7)
	if g.rng.IntN(200) != 0 {
		return "tx_" + g.date + "_" + num
	}
	var id string
	switch g.rng.IntN(10) {
	case 0:
		id = `tx_` + g.date + `_` + num + `"quoted"`
	case 1:
		id = "tx/" + g.date + "/" + num
	case 2:
		id = "../tx_" + g.date + "_" + num
	case 3:
		id = `tx\` + g.date + `\` + num
	case 4:
		id = "tx_ünïcødé_" + g.date + "_" + num
	case 5:
		id = "tx 🎮 " + g.date + " " + num
	case 6:
		id = "tx," + g.date + "," + num
	case 7:
		id = "tx'" + g.date + "'" + num
	case 8:
		id = "tx_" + g.date + "_" + num + "?a=1&b=2#frag"
	default:
		id = "%2e%2e/tx_" + g.date + "_" + num
	}
	return id
}

// pad formats n in decimal with at least width digits.
func pad(n uint64, width int) string {
	var buf [20]byte
	b := strconv.AppendUint(buf[:0], n, 10)
	if len(b) >= width {
		return string(b)
	}
	out := make([]byte, width)
	copy(out[width-len(b):], b)
	for i := range width - len(b) {
		out[i] = '0'
	}
	return string(out)
}

// timeLayout is how occurred_at is written: RFC 3339 with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// Write writes the day cfg describes to w in format (FormatAuto means CSV).
func Write(w io.Writer, format payments.Format, cfg Config) error {
	g, err := New(cfg)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var line []byte
	jsonl := format == payments.FormatJSONL
	if !jsonl {
		for i, f := range payments.Fields() {
			if i > 0 {
				line = append(line, ',')
			}
			line = append(line, f...)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("write sample: %w", err)
		}
	}
	for {
		p, ok := g.Next()
		if !ok {
			break
		}
		if jsonl {
			line = AppendJSON(line[:0], p)
		} else {
			line = AppendCSV(line[:0], p)
		}
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("write sample: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write sample: %w", err)
	}
	return nil
}

// AppendCSV appends p as one CSV record, in the order of payments.Fields,
// with its line end.
func AppendCSV(b []byte, p payments.Payment) []byte {
	b = appendCSVField(b, p.TransactionID)
	b = append(b, ',')
	b = appendCSVField(b, p.AccountID)
	b = append(b, ',')
	b = strconv.AppendInt(b, p.AmountMinor, 10)
	b = append(b, ',')
	b = appendCSVField(b, p.Currency)
	b = append(b, ',')
	b = appendCSVField(b, p.Status)
	b = append(b, ',')
	b = p.OccurredAt.AppendFormat(b, timeLayout)
	return append(b, '\n')
}

func appendCSVField(b []byte, s string) []byte {
	quote := s == "" || s[0] == ' '
	for i := 0; i < len(s) && !quote; i++ {
		switch s[i] {
		case ',', '"', '\r', '\n':
			quote = true
		}
	}
	if !quote {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// AppendJSON appends p as one JSON Lines object with its line end.
func AppendJSON(b []byte, p payments.Payment) []byte {
	b = append(b, `{"transaction_id":`...)
	b = appendJSONString(b, p.TransactionID)
	b = append(b, `,"account_id":`...)
	b = appendJSONString(b, p.AccountID)
	b = append(b, `,"amount_minor":`...)
	b = strconv.AppendInt(b, p.AmountMinor, 10)
	b = append(b, `,"currency":`...)
	b = appendJSONString(b, p.Currency)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, p.Status)
	b = append(b, `,"occurred_at":"`...)
	b = p.OccurredAt.AppendFormat(b, timeLayout)
	return append(b, "\"}\n"...)
}

// appendJSONString appends s as a JSON string. s must be valid UTF-8;
// non-ASCII characters are written as they are.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
