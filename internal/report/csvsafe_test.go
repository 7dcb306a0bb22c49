package report

import (
	"bytes"
	"encoding/csv"
	"slices"
	"strings"
	"testing"
)

func TestSafeCell(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"tx_1": "tx_1", "": "", "=1+1": "'=1+1", "+cmd": "'+cmd", "-2+3": "'-2+3", "@SUM(A1)": "'@SUM(A1)",
		"\t=1": "'\t=1", "\r=1": "'\r=1", "-1500": "-1500", "-12.50": "-12.50", "15": "15", "a=1": "a=1",
		`=HYPERLINK("http://evil.example","x")`: `'=HYPERLINK("http://evil.example","x")`, "-": "'-",
	} {
		if got := SafeCell(in); got != want {
			t.Errorf("SafeCell(%q) = %q, want %q", in, got, want)
		}
	}
}

// formulaIDs are ids, accounts and notes a spreadsheet would run.
var formulaIDs = []string{"=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\r=1", `=HYPERLINK("http://evil.example")`}

// TestReportCSVRunsNoFormula writes a report whose text cells all start
// like a formula: every such cell comes out quoted with a leading ', every
// number (a negative amount included) as it was.
func TestReportCSVRunsNoFormula(t *testing.T) {
	t.Parallel()
	status := 400
	rep := Report{Run: Run{ReconciliationID: "nightly-2026-10-24", BusinessDate: "2026-10-24", Generation: 1}}
	for i, s := range formulaIDs {
		rep.Discrepancies = append(rep.Discrepancies, Discrepancy{TransactionID: s, AccountID: s, Field: "amount_minor",
			Expected: "-1500", Provider: s, AmountMinor: -1500, Currency: "EUR", Status: "refunded", ProviderAmountMinor: -1499})
		rep.Missing = append(rep.Missing, Item{TransactionID: s + "m", AccountID: s, AmountMinor: int64(-i), Currency: "EUR",
			Status: "succeeded", Outcome: "missing", LastReason: s})
		rep.DeadLetters = append(rep.DeadLetters, DeadLetter{TransactionID: s + "d", AccountID: s, Reason: s, Detail: s,
			HTTPStatus: &status, AmountMinor: -7, Currency: "EUR", Status: "succeeded"})
		rep.Unexpected = append(rep.Unexpected, Unexpected{TransactionID: s + "u", ProviderAmountMinor: -9, ProviderCurrency: s,
			ProviderStatus: s})
	}
	var buf bytes.Buffer
	if err := rep.WriteCSV(&buf); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	numeric := map[string]bool{"generation": true, "amount_minor": true, "http_status": true, "attempts": true,
		"throttles": true, "provider_amount_minor": true}
	for _, row := range rows[1:] {
		for i, cell := range row {
			col := CSVHeader[i]
			switch {
			case numeric[col]:
				if strings.HasPrefix(cell, "'") {
					t.Errorf("numeric column %s changed: %q", col, cell)
				}
			case cell != "" && strings.ContainsRune(formulaStarts, rune(cell[0])) && !plainNumber.MatchString(cell):
				t.Errorf("column %s holds a formula: %q", col, cell)
			}
		}
	}
	if !slices.Contains(rows[1], "-1500") || !slices.Contains(rows[1], "-1499") || !slices.Contains(rows[1], "'=1+1") {
		t.Errorf("first discrepancy row %q: want the amounts as numbers and the id quoted", rows[1])
	}
}
