package payments

import (
	"slices"
	"testing"
)

// TestProviderField: the optional provider field.
func TestProviderField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input, file string
		opts              Options
		want              []string // providers of the valid rows
		problems          []string
	}{
		{name: "csv without the column", file: "day.csv",
			input: header + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z\n", want: []string{""}},
		{name: "csv", file: "day.csv",
			input: "transaction_id,account_id,amount_minor,currency,status,occurred_at,Provider\n" +
				"tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,stripe\n" +
				"tx2,a,100,EUR,succeeded,2026-10-24T10:00:00Z,\n" +
				"tx3,a,100,EUR,succeeded,2026-10-24T10:00:00Z,legacy_gw-2\n",
			want: []string{"stripe", "", "legacy_gw-2"}},
		{name: "csv bad name", file: "day.csv",
			input:    header[:len(header)-1] + ",provider\n" + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,Stripe\n",
			problems: []string{`day.csv:2: provider "Stripe": not a provider name: want a lower-case word such as stripe or paypal (letters, digits, _ and -, at most 64 bytes)`}},
		{name: "csv column twice", file: "day.csv",
			input:    header[:len(header)-1] + ",provider,provider\n" + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,a,b\n",
			problems: []string{"day.csv:1: column provider appears twice (columns 7 and 8)"}},
		{name: "unknown to the providers file", file: "day.csv", opts: Options{Providers: []string{"stripe", "paypal"}, ProvidersSource: "providers.json"},
			input: header[:len(header)-1] + ",provider\n" + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,stripe\n" +
				"tx2,a,100,EUR,succeeded,2026-10-24T10:00:00Z,legacy\n" + "tx3,a,100,EUR,succeeded,2026-10-24T10:00:00Z,\n",
			want:     []string{"stripe", ""},
			problems: []string{`day.csv:3: provider "legacy": not in providers.json (known: stripe, paypal)`}},
		{name: "jsonl", file: "day.jsonl",
			input: `{"transaction_id":"tx1","account_id":"a","amount_minor":1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z","provider":"paypal"}` + "\n" +
				`{"transaction_id":"tx2","account_id":"a","amount_minor":1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z","provider":null}` + "\n" +
				`{"transaction_id":"tx3","account_id":"a","amount_minor":1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z"}` + "\n",
			want: []string{"paypal", "", ""}},
		{name: "jsonl not a string", file: "day.jsonl",
			input:    `{"transaction_id":"tx1","account_id":"a","amount_minor":1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z","provider":7}` + "\n",
			problems: []string{`day.jsonl:1: provider "7": not a JSON string`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkOptional(t, tc.input, tc.file, tc.opts, func(p Payment) string { return p.Provider }, tc.want, tc.problems)
		})
	}
}

func TestKindField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, input, file string
		want              []string // kinds of the valid rows
		problems          []string
	}{
		{name: "csv without the column", file: "day.csv",
			input: header + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z\n", want: []string{""}},
		{name: "csv", file: "day.csv",
			input: "transaction_id,account_id,amount_minor,currency,status,occurred_at,Kind,provider\n" +
				"pi_1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,payment,stripe\n" +
				"re_1,a,-100,EUR,succeeded,2026-10-24T10:00:00Z,refund,stripe\n" +
				"dp_1,a,-100,EUR,disputed,2026-10-24T10:00:00Z,dispute,\n" +
				"tx_4,a,100,EUR,succeeded,2026-10-24T10:00:00Z,,\n",
			want: []string{"payment", "refund", "dispute", ""}},
		{name: "csv bad kind", file: "day.csv",
			input:    header[:len(header)-1] + ",kind\n" + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,Refund\n",
			problems: []string{`day.csv:2: kind "Refund": not a kind: want one of payment, refund, dispute (or leave it empty)`}},
		{name: "csv column twice", file: "day.csv",
			input:    header[:len(header)-1] + ",kind,kind\n" + "tx1,a,100,EUR,succeeded,2026-10-24T10:00:00Z,refund,refund\n",
			problems: []string{"day.csv:1: column kind appears twice (columns 7 and 8)"}},
		{name: "jsonl", file: "day.jsonl",
			input: `{"transaction_id":"re_1","account_id":"a","amount_minor":-1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z","kind":"refund"}` + "\n" +
				`{"transaction_id":"tx2","account_id":"a","amount_minor":1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z","kind":null}` + "\n",
			want: []string{"refund", ""}},
		{name: "jsonl not a string", file: "day.jsonl",
			input:    `{"transaction_id":"tx1","account_id":"a","amount_minor":1,"currency":"EUR","status":"succeeded","occurred_at":"2026-10-24T10:00:00Z","kind":2}` + "\n",
			problems: []string{`day.jsonl:1: kind "2": not a JSON string`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkOptional(t, tc.input, tc.file, Options{}, func(p Payment) string { return p.Kind }, tc.want, tc.problems)
		})
	}
}

// checkOptional reads input and compares an optional field of the valid
// rows, and the problems, with what is wanted.
func checkOptional(t *testing.T, input, file string, opts Options, field func(Payment) string, want, problems []string) {
	t.Helper()
	ps, got := readAll(t, input, file, opts)
	var values, msgs []string
	for _, p := range ps {
		values = append(values, field(p))
	}
	for _, p := range got.Items {
		msgs = append(msgs, p.Error())
	}
	if !slices.Equal(values, want) || !slices.Equal(msgs, problems) {
		t.Errorf("values %q, problems %q; want %q, %q", values, msgs, want, problems)
	}
}
