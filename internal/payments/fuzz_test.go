package payments

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// addSeeds adds the test files with one of the extensions, and a slice of
// the sample day, to the seed corpus. The seeds run as ordinary tests.
func addSeeds(f *testing.F, ext string) {
	f.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "bad", "*"+ext))
	if err != nil {
		f.Fatal(err)
	}
	files = append(files, filepath.Join("..", "..", "testdata", "payments-2026-10-24"+ext))
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		if len(data) > 4096 {
			// The first rows of the sample day, cut at a line end.
			data = data[:bytes.LastIndexByte(data[:4096], '\n')+1]
		}
		f.Add(data)
	}
}

func FuzzCSVReader(f *testing.F) {
	addSeeds(f, ".csv")
	f.Add([]byte(header + `"tx ""q"" \ ../é",a,-1,EUR,failed,2026-10-24T10:00:00+02:00` + "\n"))
	f.Add([]byte("\ufeff" + header + "tx_1,a,1,EUR,failed,2026-10-24T10:00:00Z\r\ntx_1,a,1,EUR,failed,2026-10-24T10:00:00Z"))
	f.Add([]byte(header + "\"unterminated,a,1,EUR,failed,2026-10-24T10:00:00Z\n"))
	f.Add([]byte(header[:len(header)-1] + ",kind,provider\nre_1,a,-1,EUR,succeeded,2026-10-24T10:00:00Z,refund,stripe\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkReader(t, data, FormatCSV)
	})
}

func FuzzJSONLReader(f *testing.F) {
	addSeeds(f, ".jsonl")
	f.Add([]byte(`{"transaction_id":"tx_\ud83c\udfae\"\\","account_id":"a","amount_minor":"-5","currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}`))
	f.Add([]byte(`{"transaction_id":"dp_1","account_id":"a","amount_minor":-5,"currency":"EUR","status":"disputed","occurred_at":"2026-10-24T10:00:00Z","kind":"dispute"}`))
	f.Add([]byte(`{"transaction_id":"\udfae\ud83c","account_id":"a","amount_minor":-0,"currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n{}\n[]\nnull\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkReader(t, data, FormatJSONL)
	})
}

// checkReader reads data and checks the invariants: no panic, no error but
// io.EOF on an in-memory input, every payment valid and in the business
// date, ids unique, lines increasing, problems well formed.
func checkReader(t *testing.T, data []byte, format Format) {
	rd, err := NewReader(bytes.NewReader(data), "f", Options{BusinessDate: day, Format: format, MaxRecordBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	start, end := day.Start(rd.opts.Location), day.End(rd.opts.Location)
	seen := map[string]bool{}
	lastLine := 0
	for {
		p, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		if msg := CheckID(p.TransactionID); msg != "" {
			t.Fatalf("accepted transaction id %q: %s", p.TransactionID, msg)
		}
		if msg := CheckID(p.AccountID); msg != "" {
			t.Fatalf("accepted account id %q: %s", p.AccountID, msg)
		}
		if strings.IndexByte(p.TransactionID, 0) >= 0 || len(p.TransactionID) > MaxIDBytes {
			t.Fatalf("accepted transaction id %q", p.TransactionID)
		}
		if !IsCurrency(p.Currency) || !IsStatus(p.Status) {
			t.Fatalf("accepted currency %q status %q", p.Currency, p.Status)
		}
		if p.Kind != "" && !IsKind(p.Kind) || p.Provider != "" && CheckProvider(p.Provider) != "" {
			t.Fatalf("accepted kind %q provider %q", p.Kind, p.Provider)
		}
		if p.OccurredAt.Before(start) || !p.OccurredAt.Before(end) {
			t.Fatalf("accepted occurred_at %v outside %v", p.OccurredAt, day)
		}
		if seen[p.TransactionID] {
			t.Fatalf("transaction id %q returned twice", p.TransactionID)
		}
		seen[p.TransactionID] = true
		if p.Line <= lastLine {
			t.Fatalf("line %d after line %d", p.Line, lastLine)
		}
		lastLine = p.Line
	}
	problems := rd.Problems()
	if problems.Total < len(problems.Items) || len(problems.Items) > 20 {
		t.Fatalf("problems: %d items, total %d", len(problems.Items), problems.Total)
	}
	if len(seen) == 0 && problems.Empty() {
		t.Fatal("no payments and no problem")
	}
	for _, p := range problems.Items {
		if p.Line < 1 || p.File != "f" || p.Msg == "" {
			t.Fatalf("malformed problem %+v", p)
		}
	}
	if _, err := rd.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after EOF: %v", err)
	}
}
