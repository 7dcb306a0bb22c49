package providersim

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"strconv"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/provider"
)

// Fault is what the simulator does to one transaction.
type Fault int

// String returns a short name: none, mismatch, missing, bad_request,
// bad_body, transient.
func (f Fault) String() string {
	switch f {
	case FaultNone:
		return "none"
	case FaultMismatch:
		return "mismatch"
	case FaultMissing:
		return "missing"
	case FaultBadRequest:
		return "bad_request"
	case FaultBadBody:
		return "bad_body"
	case FaultTransient:
		return "transient"
	default:
		return "Fault(" + strconv.Itoa(int(f)) + ")"
	}
}

// Shares are the fractions of transactions given each fault, chosen
// deterministically per transaction id from Config.Seed. Their sum must not
// exceed 1.
type Shares struct {
	Mismatch   float64
	Missing    float64
	BadRequest float64
	BadBody    float64
	Transient  float64
}

func (s Shares) sum() float64 { return s.Mismatch + s.Missing + s.BadRequest + s.BadBody + s.Transient }

// Expected is the correct final outcome of one transaction.
type Expected struct {
	// Outcome is the item's terminal state: ledger.Matched, Mismatched,
	// Missing or DeadLettered.
	Outcome ledger.State
	// Fault is the fault the transaction was given.
	Fault Fault
	// Fields lists the differing fields of a mismatch (amount_minor,
	// currency or status).
	Fields []string
	// Provider is the record the simulator serves (on success).
	Provider provider.Record
	// Reason is why a dead-lettered item is dead-lettered: http_400, or
	// max_attempts for an unreadable body. A transient transaction is
	// expected to succeed: Truth assumes the client allows more attempts
	// than Config.TransientCalls.
	Reason string
}

// ClearFaults makes every known transaction answer its correct record from
// now on (and unknown ones 404); the transient rate drops to 0. Truth
// changes accordingly.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.faultsCleared, s.transientRate = true, 0
	s.mu.Unlock()
	s.logger.Info("simulator faults cleared")
}

// fault returns the fault of id (before ClearFaults), from a hash of the
// seed and the id, independent of the dataset's order.
func (s *Server) fault(id string) Fault {
	u := unit(s.hash(id, 0))
	sh := s.cfg.Shares
	for _, f := range []struct {
		share float64
		fault Fault
	}{{sh.Mismatch, FaultMismatch}, {sh.Missing, FaultMissing}, {sh.BadRequest, FaultBadRequest}, {sh.BadBody, FaultBadBody}, {sh.Transient, FaultTransient}} {
		if u < f.share {
			return f.fault
		}
		u -= f.share
	}
	return FaultNone
}

func (s *Server) hash(id string, salt uint64) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], s.cfg.Seed)
	binary.LittleEndian.PutUint64(b[8:], salt)
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	return mix(h.Sum64())
}

// mix is splitmix64's finaliser: spreads FNV's weak low bits.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

var currencies = []string{"EUR", "USD", "GBP", "JPY", "SEK", "CHF"}

// mismatch returns r with one field changed, chosen from the id's hash.
func (s *Server) mismatch(r provider.Record) (provider.Record, string) {
	h := s.hash(r.ID, 1)
	switch h % 3 {
	case 0:
		delta := int64(1 + (h>>8)%999)
		if r.AmountMinor > math.MaxInt64-delta {
			delta = -delta
		}
		r.AmountMinor += delta
		return r, "amount_minor"
	case 1:
		for i := range currencies {
			if c := currencies[(int(h>>8%uint64(len(currencies)))+i)%len(currencies)]; c != r.Currency {
				r.Currency = c
				break
			}
		}
		return r, "currency"
	default:
		// A word every shape has for the record's kind.
		a, b := payments.StatusSucceeded, payments.StatusRefunded
		switch s.kindOf(r.ID) {
		case payments.KindRefund:
			b = payments.StatusFailed
		case payments.KindDispute:
			a = payments.StatusDisputed
		}
		if r.Status == a {
			r.Status = b
		} else {
			r.Status = a
		}
		return r, "status"
	}
}

// Truth returns the correct final outcome of id under the current
// configuration (see ClearFaults).
func (s *Server) Truth(id string) Expected {
	rec, known := s.records[id]
	s.mu.Lock()
	cleared := s.faultsCleared
	s.mu.Unlock()
	if !known {
		return Expected{Outcome: ledger.Missing, Fault: FaultMissing}
	}
	f := s.fault(id)
	if cleared {
		f = FaultNone
	}
	e := Expected{Fault: f, Provider: rec, Outcome: ledger.Matched}
	switch f {
	case FaultMismatch:
		var field string
		e.Provider, field = s.mismatch(rec)
		e.Outcome, e.Fields = ledger.Mismatched, []string{field}
	case FaultMissing:
		e = Expected{Outcome: ledger.Missing, Fault: f}
	case FaultBadRequest:
		e = Expected{Outcome: ledger.DeadLettered, Fault: f, Reason: "http_400"}
	case FaultBadBody:
		e = Expected{Outcome: ledger.DeadLettered, Fault: f, Reason: "max_attempts"}
	}
	return e
}

// partialCapture returns what a card payment of r authorised beyond what it
// captured, in r's minor units: 0 for most records and for those not
// captured, and for one in five captured payments (chosen from the id's
// hash) up to a quarter more than the amount, so a day has partial
// captures that a profile reading the authorised amount gets wrong.
func (s *Server) partialCapture(r provider.Record) int64 {
	if s.kindOf(r.ID) != payments.KindPayment || !captured(r.Status) || r.AmountMinor <= 0 {
		return 0
	}
	h := s.hash(r.ID, 2)
	if h%5 != 0 {
		return 0
	}
	return 1 + int64((h>>8)%uint64(max(r.AmountMinor/4, 1)))
}
