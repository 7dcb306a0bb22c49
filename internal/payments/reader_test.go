package payments

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

var day = Date{Year: 2026, Month: time.October, Day: 24}

const header = "transaction_id,account_id,amount_minor,currency,status,occurred_at\n"

// readAll reads every payment of input and returns them with the problems.
func readAll(t testing.TB, input, name string, opts Options) ([]Payment, ProblemList) {
	t.Helper()
	if opts.BusinessDate.IsZero() {
		opts.BusinessDate = day
	}
	rd, err := NewReader(strings.NewReader(input), name, opts)
	if err != nil {
		t.Fatal(err)
	}
	var ps []Payment
	for {
		p, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return ps, rd.Problems()
		}
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
}

// TestBadFiles reads each invalid file in testdata/bad and checks the exact
// report: file, line, field and message.
func TestBadFiles(t *testing.T) {
	t.Parallel()
	want := map[string]string{
		"amount-overflow.csv":      `amount-overflow.csv:3: amount_minor "9223372036854775808": out of range for a 64-bit integer`,
		"bad-currency.csv":         `bad-currency.csv:4: currency "eur": not a currency code: want 3 upper-case letters such as EUR`,
		"bad-kind.csv":             `bad-kind.csv:3: kind "chargeback": not a kind: want one of payment, refund, dispute (or leave it empty)`,
		"bad-status.csv":           `bad-status.csv:2: status "Succeeded": not a status: want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed`,
		"unknown-status.csv":       `unknown-status.csv:2: status "settled": not a status: want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed`,
		"bad-timestamp.csv":        `bad-timestamp.csv:2: occurred_at "2026-10-24 10:00:00": not an RFC 3339 timestamp (want 2026-10-24T13:45:00Z or 2026-10-24T15:45:00+02:00)`,
		"bare-quote.csv":           `bare-quote.csv:2: malformed CSV: bare " in non-quoted-field (at byte 4 of the line)`,
		"duplicate-id.csv":         `duplicate-id.csv:4: transaction_id "tx_1": duplicate: first seen on line 2`,
		"empty-id.csv":             `empty-id.csv:3: transaction_id "": empty`,
		"empty.csv":                `empty.csv:1: empty file: no header row and no payments`,
		"empty.jsonl":              `empty.jsonl:1: empty file: no payments`,
		"header-only.csv":          `header-only.csv:1: no payments: the file has a header row only`,
		"id-not-string.jsonl":      `id-not-string.jsonl:1: transaction_id "12345": not a JSON string`,
		"invalid-utf8-id.csv":      `invalid-utf8-id.csv:2: transaction_id "tx_\xff": not valid UTF-8`,
		"lone-surrogate.jsonl":     `lone-surrogate.jsonl:1: transaction_id "tx_\\ud800": contains an invalid escape (a lone UTF-16 surrogate)`,
		"long-id.csv":              `long-id.csv:2: transaction_id "` + strings.Repeat("x", 48) + `"... (256 bytes): longer than 255 bytes`,
		"malformed.jsonl":          `malformed.jsonl:2: malformed JSON at byte 45: unexpected end of JSON input`,
		"missing-column.csv":       `missing-column.csv:1: missing required columns: currency, status`,
		"missing-field.jsonl":      `missing-field.jsonl:1: account_id: missing`,
		"newline-in-id.csv":        `newline-in-id.csv:3: transaction_id "tx\n2": contains the control character U+000A`,
		"non-integer-amount.csv":   `non-integer-amount.csv:3: amount_minor "12.5": not an integer`,
		"non-integer-amount.jsonl": "non-integer-amount.jsonl:1: amount_minor \"12.5\": not an integer\nnon-integer-amount.jsonl:2: amount_minor \"1e3\": not an integer\nnon-integer-amount.jsonl:4: amount_minor \"true\": not an integer",
		"not-an-object.jsonl":      `not-an-object.jsonl:2: not a JSON object`,
		"nul-in-id.jsonl":          `nul-in-id.jsonl:2: transaction_id "tx_\x002": contains a NUL byte`,
		"outside-date.csv":         `outside-date.csv:3: occurred_at "2026-10-25T00:00:00Z": outside the business date 2026-10-24 in UTC`,
		"wrong-field-count.csv":    `wrong-field-count.csv:3: has 5 fields, the header has 6`,
	}
	var many strings.Builder
	for line := 2; line <= 21; line++ {
		fmt.Fprintf(&many, "many-problems.csv:%d: amount_minor \"1.5\": not an integer\n", line)
	}
	many.WriteString("and 5 more problems")
	want["many-problems.csv"] = many.String()

	files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "bad", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(want) {
		t.Errorf("testdata/bad has %d files, the test knows %d", len(files), len(want))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			w, ok := want[name]
			if !ok {
				t.Fatalf("no expectation for %s", name)
			}
			_, problems := readAll(t, string(data), name, Options{})
			if got := problems.Error(); got != w {
				t.Errorf("got\n%s\nwant\n%s", got, w)
			}
			if problems.Err() == nil {
				t.Error("Err() is nil for a bad file")
			}
		})
	}
}

// TestSampleDay reads the valid sample day in both formats: every row is
// accepted, the two files hold the same payments, and the digest is the
// file's.
func TestSampleDay(t *testing.T) {
	t.Parallel()
	var got [2][]Payment
	for i, ext := range []string{"csv", "jsonl"} {
		path := filepath.Join("..", "..", "testdata", "payments-2026-10-24."+ext)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := NewReader(bytes.NewReader(data), path, Options{BusinessDate: day})
		if err != nil {
			t.Fatal(err)
		}
		for {
			p, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p.Line = 0
			got[i] = append(got[i], p)
		}
		if p := rd.Problems(); !p.Empty() || p.Err() != nil {
			t.Fatalf("%s: %v", path, p)
		}
		if len(got[i]) != 3000 {
			t.Errorf("%s: %d payments, want 3000", path, len(got[i]))
		}
		sum := sha256.Sum256(data)
		if rd.SHA256() != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: SHA256() = %s, want %x", path, rd.SHA256(), sum)
		}
		if rd.Format() != Format(ext) {
			t.Errorf("%s: format %q", path, rd.Format())
		}
	}
	for i := range got[0] {
		if !got[0][i].OccurredAt.Equal(got[1][i].OccurredAt) {
			t.Fatalf("payment %d differs: %+v and %+v", i, got[0][i], got[1][i])
		}
		got[0][i].OccurredAt, got[1][i].OccurredAt = time.Time{}, time.Time{}
		if got[0][i] != got[1][i] {
			t.Fatalf("payment %d differs: %+v and %+v", i, got[0][i], got[1][i])
		}
	}
}

// TestCSVRules checks each validation rule on one row of a CSV file, with
// the line reported.
func TestCSVRules(t *testing.T) {
	t.Parallel()
	good := "tx_1,acct_1,1999,EUR,succeeded,2026-10-24T10:00:00Z\n"
	tests := []struct {
		name string
		rows string // after the header and one good row (line 2)
		want string // the problems; "" when the row is valid
	}{
		{"valid", "tx_2,acct_1,1,USD,refunded,2026-10-24T10:00:00Z\n", ""},
		{"negative amount", "tx_2,acct_1,-1999,USD,refunded,2026-10-24T10:00:00Z\n", ""},
		{"zero amount", "tx_2,acct_1,0,USD,failed,2026-10-24T10:00:00Z\n", ""},
		{"max amount", "tx_2,acct_1,9223372036854775807,USD,failed,2026-10-24T10:00:00Z\n", ""},
		{"min amount", "tx_2,acct_1,-9223372036854775808,USD,failed,2026-10-24T10:00:00Z\n", ""},
		{"status with underscore", "tx_2,acct_1,5,USD,partially_refunded,2026-10-24T10:00:00Z\n", ""},
		{"offset inside the day", "tx_2,acct_1,5,USD,failed,2026-10-25T01:59:59+02:00\n", ""},
		{"fraction of a second", "tx_2,acct_1,5,USD,failed,2026-10-24T00:00:00.000000001Z\n", ""},
		{"id of 255 bytes", strings.Repeat("é", 127) + "x,acct_1,5,USD,failed,2026-10-24T10:00:00Z\n", ""},
		{"nasty but valid id", `"tx ""q"" \ ../é🎮,%2e?",acct_1,5,USD,failed,2026-10-24T10:00:00Z` + "\n", ""},

		{"fraction", "tx_2,acct_1,12.5,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "12.5": not an integer`},
		{"exponent", "tx_2,acct_1,1e3,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "1e3": not an integer`},
		{"plus sign", "tx_2,acct_1,+5,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "+5": not an integer`},
		{"space in amount", "tx_2,acct_1, 5,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor " 5": not an integer`},
		{"underscore in amount", "tx_2,acct_1,1_000,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "1_000": not an integer`},
		{"hex amount", "tx_2,acct_1,0x10,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "0x10": not an integer`},
		{"lone minus", "tx_2,acct_1,-,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "-": not an integer`},
		{"empty amount", "tx_2,acct_1,,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "": empty`},
		{"leading zero", "tx_2,acct_1,007,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "007": not an integer: leading zeros are not allowed`},
		{"negative zero", "tx_2,acct_1,-0,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "-0": not an integer: negative zero is not allowed`},
		{"underflow", "tx_2,acct_1,-9223372036854775809,EUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: amount_minor "-9223372036854775809": out of range for a 64-bit integer`},
		{"lower-case currency", "tx_2,acct_1,5,eur,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: currency "eur": not a currency code: want 3 upper-case letters such as EUR`},
		{"long currency", "tx_2,acct_1,5,EURO,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: currency "EURO": not a currency code: want 3 upper-case letters such as EUR`},
		{"non-ASCII currency", "tx_2,acct_1,5,ÉUR,succeeded,2026-10-24T10:00:00Z\n", `t.csv:3: currency "ÉUR": not a currency code: want 3 upper-case letters such as EUR`},
		{"empty status", "tx_2,acct_1,5,EUR,,2026-10-24T10:00:00Z\n", `t.csv:3: status "": not a status: want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed`},
		{"status with space", "tx_2,acct_1,5,EUR,not ok,2026-10-24T10:00:00Z\n", `t.csv:3: status "not ok": not a status: want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed`},
		{"no offset", "tx_2,acct_1,5,EUR,failed,2026-10-24T10:00:00\n", `t.csv:3: occurred_at "2026-10-24T10:00:00": not an RFC 3339 timestamp (want 2026-10-24T13:45:00Z or 2026-10-24T15:45:00+02:00)`},
		{"date only", "tx_2,acct_1,5,EUR,failed,2026-10-24\n", `t.csv:3: occurred_at "2026-10-24": not an RFC 3339 timestamp (want 2026-10-24T13:45:00Z or 2026-10-24T15:45:00+02:00)`},
		{"unix time", "tx_2,acct_1,5,EUR,failed,1792843200\n", `t.csv:3: occurred_at "1792843200": not an RFC 3339 timestamp (want 2026-10-24T13:45:00Z or 2026-10-24T15:45:00+02:00)`},
		{"day before", "tx_2,acct_1,5,EUR,failed,2026-10-23T23:59:59.999Z\n", `t.csv:3: occurred_at "2026-10-23T23:59:59.999Z": outside the business date 2026-10-24 in UTC`},
		{"offset outside the day", "tx_2,acct_1,5,EUR,failed,2026-10-24T01:00:00+02:00\n", `t.csv:3: occurred_at "2026-10-24T01:00:00+02:00": outside the business date 2026-10-24 in UTC`},
		{"empty id", ",acct_1,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: transaction_id "": empty`},
		{"id of 256 bytes", strings.Repeat("é", 128) + ",acct_1,5,EUR,failed,2026-10-24T10:00:00Z\n",
			`t.csv:3: transaction_id "` + strings.Repeat("é", 24) + `"... (256 bytes): longer than 255 bytes`},
		{"tab in id", "tx\t2,acct_1,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: transaction_id "tx\t2": contains the control character U+0009`},
		{"DEL in id", "tx\x7f2,acct_1,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: transaction_id "tx\x7f2": contains the control character U+007F`},
		{"C1 control in id", "tx\u00852,acct_1,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: transaction_id "tx\u00852": contains the control character U+0085`},
		{"NUL in account", "tx_2,a\x00,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: account_id "a\x00": contains a NUL byte`},
		{"empty account", "tx_2,,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: account_id "": empty`},
		{"duplicate id", "tx_1,acct_2,5,EUR,failed,2026-10-24T10:00:00Z\n", `t.csv:3: transaction_id "tx_1": duplicate: first seen on line 2`},
		{"ids differ by case", "TX_1,acct_2,5,EUR,failed,2026-10-24T10:00:00Z\n", ""},
		{"every field bad", ",,x,x,X,x\n", strings.Join([]string{
			`t.csv:3: transaction_id "": empty`,
			`t.csv:3: account_id "": empty`,
			`t.csv:3: amount_minor "x": not an integer`,
			`t.csv:3: currency "x": not a currency code: want 3 upper-case letters such as EUR`,
			`t.csv:3: status "X": not a status: want one of succeeded, pending, failed, refunded, partially_refunded, canceled, disputed`,
			`t.csv:3: occurred_at "x": not an RFC 3339 timestamp (want 2026-10-24T13:45:00Z or 2026-10-24T15:45:00+02:00)`,
		}, "\n")},
		{"duplicate of a bad row", "tx_9,acct_1,x,EUR,failed,2026-10-24T10:00:00Z\ntx_9,acct_1,5,EUR,failed,2026-10-24T10:00:00Z\n",
			"t.csv:3: amount_minor \"x\": not an integer\nt.csv:4: transaction_id \"tx_9\": duplicate: first seen on line 3"},
		{"quoted field over two lines", "\"tx\n2\",acct_1,5,EUR,failed,2026-10-24T10:00:00Z\ntx_1,a,5,EUR,failed,2026-10-24T10:00:00Z\n",
			"t.csv:3: transaction_id \"tx\\n2\": contains the control character U+000A\nt.csv:5: transaction_id \"tx_1\": duplicate: first seen on line 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps, problems := readAll(t, header+good+tc.rows, "t.csv", Options{})
			if got := problems.Error(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if tc.want == "" && len(ps) != 2 {
				t.Errorf("read %d payments, want 2", len(ps))
			}
			if tc.want != "" && problems.Empty() {
				t.Error("Empty() with problems")
			}
		})
	}
}

// TestValidValuesKeptFaithfully checks that accepted values come out exactly
// as written.
func TestValidValuesKeptFaithfully(t *testing.T) {
	t.Parallel()
	ids := []string{`tx "quoted"`, `tx\back\slash`, "../../etc/passwd", "tx/ünïcødé/🎮", "%00%2e", " leading and trailing ", "tx,comma", "'; DROP TABLE items; --"}
	var csvIn, jsonIn strings.Builder
	csvIn.WriteString(header)
	for i, id := range ids {
		fmt.Fprintf(&csvIn, "\"%s\",acct_%d,-%d,JPY,refunded,2026-10-24T23:59:59.999999999Z\n", strings.ReplaceAll(id, `"`, `""`), i, i+1)
		fmt.Fprintf(&jsonIn, "{\"transaction_id\":%q,\"account_id\":\"acct_%d\",\"amount_minor\":-%d,\"currency\":\"JPY\",\"status\":\"refunded\",\"occurred_at\":\"2026-10-24T23:59:59.999999999Z\"}\n",
			id, i, i+1)
	}
	for _, in := range []struct{ name, text string }{{"t.csv", csvIn.String()}, {"t.jsonl", jsonIn.String()}} {
		ps, problems := readAll(t, in.text, in.name, Options{})
		if !problems.Empty() {
			t.Fatalf("%s: %v", in.name, problems)
		}
		if len(ps) != len(ids) {
			t.Fatalf("%s: %d payments, want %d", in.name, len(ps), len(ids))
		}
		for i, p := range ps {
			want := Payment{TransactionID: ids[i], AccountID: fmt.Sprintf("acct_%d", i), AmountMinor: -int64(i + 1), Currency: "JPY", Status: "refunded",
				OccurredAt: time.Date(2026, 10, 24, 23, 59, 59, 999999999, time.UTC), Line: i + 1}
			if in.name == "t.csv" {
				want.Line = i + 2
			}
			if p != want {
				t.Errorf("%s: got %+v, want %+v", in.name, p, want)
			}
		}
	}
}

// TestJSONLRules checks the JSON Lines specifics.
func TestJSONLRules(t *testing.T) {
	t.Parallel()
	const good = `{"transaction_id":"tx_1","account_id":"acct_1","amount_minor":1999,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z"}` + "\n"
	line := func(fields string) string {
		return `{"transaction_id":"tx_2","account_id":"acct_1","currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z",` + fields + "}\n"
	}
	tests := []struct {
		name, rows, want string
	}{
		{"valid", line(`"amount_minor":5`), ""},
		{"amount as string", line(`"amount_minor":"5"`), ""},
		{"unknown keys ignored", line(`"amount_minor":5,"note":{"a":[1,2]},"fee":1.5`), ""},
		{"keys in any case", `{"Transaction_ID":"tx_2","ACCOUNT_ID":"a","Amount_Minor":1,"Currency":"EUR","Status":"failed","Occurred_At":"2026-10-24T10:00:00Z"}` + "\n", ""},
		{"blank lines and CRLF", "\n  \r\n" + strings.TrimSuffix(line(`"amount_minor":5`), "\n") + "\r\n\n", ""},
		{"escaped id", `{"transaction_id":"tx_\u00e9\ud83c\udfae\"\\\/","account_id":"a","amount_minor":1,"currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n", ""},
		{"repeated key keeps the last", line(`"amount_minor":"x","amount_minor":5`), ""},
		{"float", line(`"amount_minor":12.5`), `t.jsonl:2: amount_minor "12.5": not an integer`},
		{"exponent", line(`"amount_minor":1E3`), `t.jsonl:2: amount_minor "1E3": not an integer`},
		{"float as string", line(`"amount_minor":"12.50"`), `t.jsonl:2: amount_minor "12.50": not an integer`},
		{"huge", line(`"amount_minor":123456789012345678901234567890`), `t.jsonl:2: amount_minor "123456789012345678901234567890": out of range for a 64-bit integer`},
		{"null amount", line(`"amount_minor":null`), `t.jsonl:2: amount_minor: missing`},
		{"object amount", line(`"amount_minor":{}`), `t.jsonl:2: amount_minor "{}": not an integer`},
		{"number currency", `{"transaction_id":"tx_2","account_id":"a","amount_minor":1,"currency":978,"status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n",
			`t.jsonl:2: currency "978": not a JSON string`},
		{"escaped newline in id", `{"transaction_id":"tx\n2","account_id":"a","amount_minor":1,"currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n",
			`t.jsonl:2: transaction_id "tx\n2": contains the control character U+000A`},
		{"invalid UTF-8 line", "{\"transaction_id\":\"tx_\xc3\"}\n", `t.jsonl:2: not valid UTF-8`},
		{"trailing garbage", line(`"amount_minor":5`)[:len(line(`"amount_minor":5`))-1] + "x\n", `t.jsonl:2: malformed JSON at byte 140: invalid character 'x' after top-level value`},
		{"array", "[1]\n", `t.jsonl:2: not a JSON object`},
		{"all missing", "{}\n", strings.Join([]string{
			"t.jsonl:2: transaction_id: missing", "t.jsonl:2: account_id: missing", "t.jsonl:2: amount_minor: missing",
			"t.jsonl:2: currency: missing", "t.jsonl:2: status: missing", "t.jsonl:2: occurred_at: missing"}, "\n")},
		{"duplicate id", good, `t.jsonl:2: transaction_id "tx_1": duplicate: first seen on line 1`},
		{"line numbers count blank lines", "\n\n" + line(`"amount_minor":5.0`), `t.jsonl:4: amount_minor "5.0": not an integer`},
		{"last line without line feed", strings.TrimSuffix(line(`"amount_minor":-5.5`), "\n"), `t.jsonl:2: amount_minor "-5.5": not an integer`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps, problems := readAll(t, good+tc.rows, "t.jsonl", Options{})
			if got := problems.Error(); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if tc.want == "" && len(ps) != 2 {
				t.Errorf("read %d payments, want 2", len(ps))
			}
		})
	}
}

// TestCSVHeader checks header handling: byte order mark, spaces, case,
// extra and reordered columns, CRLF line ends.
func TestCSVHeader(t *testing.T) {
	t.Parallel()
	in := "\ufeffNote, Status ,occurred_at,amount_minor,Currency,account_id,TRANSACTION_ID\r\n" +
		"hello,succeeded,2026-10-24T10:00:00Z,5,EUR,acct_1,tx_1\r\n"
	ps, problems := readAll(t, in, "t.csv", Options{})
	if !problems.Empty() {
		t.Fatal(problems)
	}
	want := Payment{TransactionID: "tx_1", AccountID: "acct_1", AmountMinor: 5, Currency: "EUR", Status: "succeeded",
		OccurredAt: time.Date(2026, 10, 24, 10, 0, 0, 0, time.UTC), Line: 2}
	if len(ps) != 1 || ps[0] != want {
		t.Fatalf("got %+v, want %+v", ps, want)
	}

	_, problems = readAll(t, "transaction_id,account_id,amount_minor,currency,status,occurred_at,Currency\n", "t.csv", Options{})
	if got, want := problems.Error(), "t.csv:1: column currency appears twice (columns 4 and 7)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	_, problems = readAll(t, "id,amount\n1,2\n", "t.csv", Options{})
	if got, want := problems.Error(), "t.csv:1: missing required columns: transaction_id, account_id, amount_minor, currency, status, occurred_at"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestTimeZone checks the business date window in a zone on the day clocks
// go back (25 hours) and with AllowOutsideDate.
func TestTimeZone(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	dstEnd := Date{Year: 2026, Month: time.October, Day: 25}
	in := header +
		"tx_1,a,1,EUR,failed,2026-10-24T22:00:00Z\n" + // 00:00 CEST: first instant
		"tx_2,a,1,EUR,failed,2026-10-25T22:59:59Z\n" + // 23:59:59 CET: last second (25-hour day)
		"tx_3,a,1,EUR,failed,2026-10-25T23:00:00Z\n" + // 00:00 next day
		"tx_4,a,1,EUR,failed,2026-10-24T21:59:59Z\n" // 23:59:59 the day before
	ps, problems := readAll(t, in, "t.csv", Options{BusinessDate: dstEnd, Location: berlin})
	want := "t.csv:4: occurred_at \"2026-10-25T23:00:00Z\": outside the business date 2026-10-25 in Europe/Berlin\n" +
		"t.csv:5: occurred_at \"2026-10-24T21:59:59Z\": outside the business date 2026-10-25 in Europe/Berlin"
	if got := problems.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if len(ps) != 2 {
		t.Errorf("read %d payments, want 2", len(ps))
	}
	ps, problems = readAll(t, in, "t.csv", Options{BusinessDate: dstEnd, Location: berlin, AllowOutsideDate: true})
	if !problems.Empty() || len(ps) != 4 {
		t.Errorf("AllowOutsideDate: %d payments, problems %v", len(ps), problems)
	}
}

// TestFormatChoice checks the format by extension, explicit and sniffed.
func TestFormatChoice(t *testing.T) {
	t.Parallel()
	const csvIn = header + "tx_1,a,1,EUR,failed,2026-10-24T10:00:00Z\n"
	const jsonIn = "\ufeff \n" + `{"transaction_id":"tx_1","account_id":"a","amount_minor":1,"currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n"
	tests := []struct {
		name   string
		format Format
		input  string
		want   Format
	}{
		{"-", FormatAuto, csvIn, FormatCSV},
		{"-", FormatAuto, jsonIn, FormatJSONL},
		{"export.txt", FormatAuto, jsonIn, FormatJSONL},
		{"export.NDJSON", FormatAuto, jsonIn, FormatJSONL},
		{"export.CSV", FormatAuto, csvIn, FormatCSV},
		{"-", FormatJSONL, jsonIn, FormatJSONL},
		{"x.csv", FormatJSONL, jsonIn, FormatJSONL},
	}
	for _, tc := range tests {
		rd, err := NewReader(strings.NewReader(tc.input), tc.name, Options{BusinessDate: day, Format: tc.format})
		if err != nil {
			t.Fatal(err)
		}
		p, err := rd.Next()
		if err != nil {
			t.Fatalf("%s %q: %v (%v)", tc.name, tc.format, err, rd.Problems())
		}
		if rd.Format() != tc.want || p.TransactionID != "tx_1" {
			t.Errorf("%s %q: format %q, payment %+v", tc.name, tc.format, rd.Format(), p)
		}
	}
	// A JSON Lines file read as CSV fails on its header.
	_, problems := readAll(t, jsonIn, "x.jsonl", Options{Format: FormatCSV})
	if problems.Empty() {
		t.Error("JSON Lines read as CSV: no problem")
	}
}

func TestParseFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Format{"": FormatAuto, "auto": FormatAuto, "CSV": FormatCSV, "jsonl": FormatJSONL, "ndjson": FormatJSONL} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseFormat("xml"); err == nil || err.Error() != `unknown format "xml": want csv, jsonl or auto` {
		t.Errorf("ParseFormat(xml): %v", err)
	}
}

func TestNewReaderOptions(t *testing.T) {
	t.Parallel()
	if _, err := NewReader(strings.NewReader(""), "p.csv", Options{}); err == nil || err.Error() != "open payments p.csv: no business date given" {
		t.Errorf("no date: %v", err)
	}
	if _, err := NewReader(strings.NewReader(""), "p.csv", Options{AllowOutsideDate: true}); err != nil {
		t.Errorf("no date but AllowOutsideDate: %v", err)
	}
	if _, err := NewReader(strings.NewReader(""), "p.csv", Options{BusinessDate: day, Format: "xml"}); err == nil {
		t.Error("format xml accepted")
	}
}

func TestParseDate(t *testing.T) {
	t.Parallel()
	d, err := ParseDate("2026-10-24")
	if err != nil || d != day || d.String() != "2026-10-24" {
		t.Fatalf("ParseDate: %v, %v", d, err)
	}
	for _, bad := range []string{"", "2026-10-32", "2026-02-29", "2026-13-01", "26-10-24", "2026-1-2", "2026/10/24", "2026-10-24T00:00:00Z", " 2026-10-24"} {
		_, err := ParseDate(bad)
		want := fmt.Sprintf("invalid date %q: want a calendar day written YYYY-MM-DD, such as 2026-10-24", bad)
		if err == nil || err.Error() != want {
			t.Errorf("ParseDate(%q): %v", bad, err)
		}
	}
	if got := day.AddDays(8); got != (Date{2026, time.November, 1}) {
		t.Errorf("AddDays(8) = %v", got)
	}
	if got := day.AddDays(-24); got != (Date{2026, time.September, 30}) {
		t.Errorf("AddDays(-24) = %v", got)
	}
	if (Date{}).IsZero() != true || day.IsZero() {
		t.Error("IsZero")
	}
}

// TestLongRecords checks that a row longer than MaxRecordBytes is reported
// without being buffered whole: in JSON Lines the next lines are still read.
func TestLongRecords(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10_000)
	jsonIn := `{"transaction_id":"tx_1","account_id":"a","amount_minor":1,"currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n" +
		`{"transaction_id":"` + long + `"}` + "\n" +
		`{"transaction_id":"tx_3","account_id":"a","amount_minor":1.5,"currency":"EUR","status":"failed","occurred_at":"2026-10-24T10:00:00Z"}` + "\n"
	_, problems := readAll(t, jsonIn, "t.jsonl", Options{MaxRecordBytes: 1000})
	want := "t.jsonl:2: line longer than 1000 bytes\nt.jsonl:3: amount_minor \"1.5\": not an integer"
	if got := problems.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for _, csvIn := range []string{
		header + "tx_1,a,1,EUR,failed,2026-10-24T10:00:00Z\n" + long + "\ntx_3,a,1,EUR,failed,2026-10-24T10:00:00Z\n",
		header + "tx_1,a,1,EUR,failed,2026-10-24T10:00:00Z\n\"" + strings.Repeat("x\n", 20_000) + "\"\n",
	} {
		_, problems = readAll(t, csvIn, "t.csv", Options{MaxRecordBytes: 1000})
		if got, want := problems.Error(), "t.csv:3: record longer than 1000 bytes"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// TestReadError checks that a failure to read is returned, not reported as
// a problem, and is sticky.
func TestReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("disk on fire")
	src := io.MultiReader(strings.NewReader(header+"tx_1,a,1,EUR,failed,2026-10-24T10:00:00Z\n"), iotest.ErrReader(boom))
	for _, format := range []Format{FormatCSV, FormatJSONL, FormatAuto} {
		rd, err := NewReader(src, "p.csv", Options{BusinessDate: day, Format: format})
		if err != nil {
			t.Fatal(err)
		}
		var last error
		for range 3 {
			if _, last = rd.Next(); last != nil && !errors.Is(last, boom) {
				t.Fatalf("%q: %v", format, last)
			}
		}
		if !errors.Is(last, boom) || !strings.HasPrefix(last.Error(), "read payments p.csv: ") {
			t.Errorf("%q: error %v", format, last)
		}
	}
}

func TestProblemListFormat(t *testing.T) {
	t.Parallel()
	l := ProblemList{Items: []Problem{{File: "a.csv", Line: 2, Msg: "bad"}}, Total: 2}
	if got, want := l.Error(), "a.csv:2: bad\nand 1 more problem"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if (ProblemList{}).Err() != nil || !(ProblemList{}).Empty() {
		t.Error("zero ProblemList is not empty")
	}
	_, problems := readAll(t, header+strings.Repeat(",a,1,EUR,failed,2026-10-24T10:00:00Z\n", 5), "t.csv", Options{MaxProblems: 2})
	if got, want := problems.Error(), "t.csv:2: transaction_id \"\": empty\nt.csv:3: transaction_id \"\": empty\nand 3 more problems"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestIDSet checks the duplicate set across many growths: no false
// duplicates among distinct ids, every repeat found with its first line.
func TestIDSet(t *testing.T) {
	t.Parallel()
	s := newIDSet()
	const n = 100_000
	for i := range n {
		if first, dup := s.add(fmt.Sprintf("tx_%d", i), i+1); dup {
			t.Fatalf("tx_%d reported as a duplicate of line %d", i, first)
		}
	}
	for i := 0; i < n; i += 997 {
		first, dup := s.add(fmt.Sprintf("tx_%d", i), n+i)
		if !dup || first != i+1 {
			t.Fatalf("tx_%d: dup %v first %d", i, dup, first)
		}
	}
	if s.n != n || len(s.slots) > 4*n/3*2 {
		t.Errorf("%d ids in %d slots", s.n, len(s.slots))
	}
}
