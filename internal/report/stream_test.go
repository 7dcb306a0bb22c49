package report

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/ledger"
)

// TestStreamWritesWhatEncodingJSONWrites streams reports with every
// combination of empty and filled sections and compares each with
// encoding/json's indented encoding of the same report: the v1 format is
// unchanged by writing it row by row.
func TestStreamWritesWhatEncodingJSONWrites(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 10, 25, 3, 0, 0, 0, time.FixedZone("CET", 3600))
	status := 400
	for mask := range 64 {
		rep := Report{Format: FormatVersion, Run: Run{ReconciliationID: "nightly-<2026>", BusinessDate: "2026-10-24", Generation: 1,
			CreatedAt: at, CompletedAt: &at}, Discrepancies: []Discrepancy{}, Missing: []Item{}, DeadLetters: []DeadLetter{},
			Unexpected: []Unexpected{}}
		if mask&1 != 0 {
			rep.Discrepancies = []Discrepancy{{TransactionID: "a&b", Field: "amount_minor", Expected: "1", CheckedAt: &at}, {TransactionID: "c"}}
		}
		if mask&2 != 0 {
			rep.Missing = []Item{{TransactionID: "m", CheckedAt: &at}}
		}
		if mask&4 != 0 {
			rep.DeadLetters = []DeadLetter{{TransactionID: "d", HTTPStatus: &status, DeadLetteredAt: &at}, {TransactionID: "e"}}
		}
		if mask&8 != 0 {
			rep.Items = []Item{{TransactionID: "i", CheckedAt: &at}, {TransactionID: "j"}}
		}
		if mask&32 != 0 {
			rep.Unexpected = []Unexpected{{TransactionID: "u", ProviderAmountMinor: 4200, ListedAt: &at}, {TransactionID: "v"}}
		}
		if mask&16 != 0 {
			rep.Providers = []ledger.ProviderTotal{{Provider: "stripe", Items: 3}, {Provider: "", Items: 1}}
		}
		var got bytes.Buffer
		if err := rep.WriteJSON(&got); err != nil {
			t.Fatal(err)
		}
		// The reference: the whole report through encoding/json, times in
		// UTC as the format says.
		utc := rep
		utc.Run.CreatedAt, utc.Run.CompletedAt = at.UTC(), utcPtr(&at)
		utc.Discrepancies = append([]Discrepancy{}, rep.Discrepancies...)
		for i := range utc.Discrepancies {
			utc.Discrepancies[i].CheckedAt = utcPtr(utc.Discrepancies[i].CheckedAt)
		}
		for _, list := range []*[]Item{&utc.Missing, &utc.Items} {
			if *list != nil {
				*list = append([]Item{}, (*list)...)
				for i := range *list {
					(*list)[i].CheckedAt = utcPtr((*list)[i].CheckedAt)
				}
			}
		}
		utc.DeadLetters = append([]DeadLetter{}, rep.DeadLetters...)
		for i := range utc.DeadLetters {
			utc.DeadLetters[i].DeadLetteredAt = utcPtr(utc.DeadLetters[i].DeadLetteredAt)
		}
		utc.Unexpected = append([]Unexpected{}, rep.Unexpected...)
		for i := range utc.Unexpected {
			utc.Unexpected[i].ListedAt = utcPtr(utc.Unexpected[i].ListedAt)
		}
		var want bytes.Buffer
		if err := writeJSON(&want, utc); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("sections %s: stream\n%s\nwant encoding/json's\n%s", fmt.Sprintf("%06b", mask), got.String(), want.String())
		}
	}
}

func TestStreamRefusesRowsOutOfOrder(t *testing.T) {
	t.Parallel()
	s, err := NewStream(&bytes.Buffer{}, "json", Run{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(DeadLetter{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Missing(Item{}); err == nil {
		t.Error("a missing item after a dead letter was written")
	}
	s, err = NewStream(&bytes.Buffer{}, "json", Run{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Unexpected(Unexpected{}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(DeadLetter{}); err == nil {
		t.Error("a dead letter after an unexpected record was written")
	}
	if _, err := NewStream(&bytes.Buffer{}, "xml", Run{}); err == nil {
		t.Error("format xml accepted")
	}
}
