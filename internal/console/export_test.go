package console

import (
	"archive/zip"
	"bytes"
	"encoding/csv"
	"io"
	"net/http"
	"strings"
	"testing"
)

// spreadsheetFormulas are transaction ids that a spreadsheet would run.
var spreadsheetFormulas = []string{"=1+1", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "=HYPERLINK(\"http://evil.example\")"}

// zipFile reads one file of a zip.
func zipFile(t *testing.T, body []byte, name string) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(body), int64(len(body)))
	if err != nil {
		t.Fatalf("bundle is not a zip: %v", err)
	}
	f, err := zr.Open(name)
	if err != nil {
		t.Fatalf("bundle has no %s: %v", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExportsRunNoFormula exports a run whose ids start like formulas, as
// the dead-letter CSV and as the audit bundle's report.csv and
// transitions.csv: no cell a spreadsheet would run.
func TestExportsRunNoFormula(t *testing.T) {
	t.Parallel()
	b := setupDeadLetters(t, spreadsheetFormulas)
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	w := b.do(t, "GET", run+"/dead-letters?format=csv", bob, nil)
	wantStatus(t, w, http.StatusOK, "dead-letter export")
	files := map[string][]byte{"dead-letters.csv": w.Body.Bytes()}
	w = b.do(t, "GET", "/audit/bundle?run="+b.runID.String(), bob, nil)
	wantStatus(t, w, http.StatusOK, "bundle")
	for _, name := range []string{"report.csv", "transitions.csv"} {
		files[name] = zipFile(t, w.Body.Bytes(), name)
	}
	for name, body := range files {
		rows, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		quoted := 0
		for _, row := range rows {
			for _, cell := range row {
				if cell != "" && strings.ContainsRune("=+-@\t\r", rune(cell[0])) && !isNumber(cell) {
					t.Errorf("%s holds a formula: %q", name, cell)
				}
				if strings.HasPrefix(cell, "'=") || strings.HasPrefix(cell, "'+") || strings.HasPrefix(cell, "'@") {
					quoted++
				}
			}
		}
		if quoted < len(spreadsheetFormulas)-1 {
			t.Errorf("%s quotes %d formula cells, want the ids':\n%s", name, quoted, body)
		}
	}
}

// isNumber reports whether a cell is a plain decimal number.
func isNumber(s string) bool {
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	return whole != "" && strings.Trim(whole, "0123456789") == "" && strings.Trim(frac, "0123456789") == ""
}
