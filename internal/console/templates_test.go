package console

import (
	"bytes"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pageData are the data each page template is rendered with.
var pageData = map[string]func() any{
	"runs":          func() any { return &runsData{} },
	"run":           func() any { return &runData{} },
	"discrepancies": func() any { return &discrepancyData{} },
	"deadletters":   func() any { return &deadLetterData{} },
	"transaction":   func() any { return &transactionData{} },
	"limits":        func() any { return &limitsData{} },
	"audit":         func() any { return &auditData{} },
	"action":        func() any { return &actionData{} },
	"login":         func() any { return &map[string]string{} },
	"error":         func() any { return new(struct{}) },
}

// TestTemplatesRenderNilValues renders every page twice, as an operator
// and as an auditor: with its data's zero value, where every pointer is
// nil (an item the provider never answered, a run never completed), and
// with every pointer set and every list holding an element. Neither may
// fail or print a Go value (a pointer's address, <nil>, a map, a format
// error) instead of what it stands for.
func TestTemplatesRenderNilValues(t *testing.T) {
	t.Parallel()
	p, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	for name := range p.byName {
		if pageData[name] == nil {
			t.Errorf("page %s has no data in pageData: add it", name)
		}
	}
	for name, data := range pageData {
		for _, filled := range []bool{false, true} {
			d := data()
			if filled {
				fill(reflect.ValueOf(d).Elem(), 0)
			}
			for _, u := range []User{{Name: "alice", Role: Operator}, {Name: "bob", Role: Auditor}} {
				var buf bytes.Buffer
				if err := p.execute(&buf, name, view{Title: name, User: &u, Data: reflect.ValueOf(d).Elem().Interface()}); err != nil {
					t.Errorf("%s (filled %v) as %s: %v", name, filled, u.Role, err)
					continue
				}
				if loc := goValue.FindStringIndex(buf.String()); loc != nil {
					t.Errorf("%s (filled %v) as %s prints a Go value: …%s…", name, filled, u.Role,
						buf.String()[max(0, loc[0]-80):min(buf.Len(), loc[1]+40)])
				}
			}
		}
	}
}

// goValue is what a template prints when it is given a Go value it cannot
// show: a pointer's address, nil, a format error, a missing key, a map.
var goValue = regexp.MustCompile(`0x[0-9a-f]{4,}|<nil>|%!|<no value>|map\[`)

// fillTime is the instant every time.Time of a filled page holds.
var fillTime = time.Date(2026, 10, 25, 2, 0, 0, 0, time.UTC)

// fill sets every settable part of v: pointers allocated, lists and maps
// given one element, strings a 64-character hex text (a hash's length),
// numbers 1, times fillTime. depth stops recursive types.
func fill(v reflect.Value, depth int) {
	if depth > 6 || !v.CanSet() {
		return
	}
	if v.Type() == reflect.TypeOf(time.Time{}) {
		v.Set(reflect.ValueOf(fillTime))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i), depth+1)
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), depth+1)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString(strings.Repeat("0123456789abcdef", 4))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Bool:
		v.SetBool(true)
	}
}

// TestTransactionPageShowsAmounts opens a mismatched item and a missing one:
// the expected and the provider's amounts in major units with their
// currency, a dash where the provider answered nothing.
func TestTransactionPageShowsAmounts(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	run := "/runs/" + b.runID.String()
	row := func(body, id string) string {
		return regexp.MustCompile(`(?s)<tr id="` + id + `">.*?</tr>`).FindString(body)
	}
	body := b.do(t, "GET", run+"/tx/tx_b", bob, nil).Body.String()
	if e, p := row(body, "expected"), row(body, "reported"); !strings.Contains(e, "15.00 EUR") || !strings.Contains(p, "14.99 EUR") ||
		goValue.MatchString(p) {
		t.Errorf("tx_b: expected row %q, provider row %q; want 15.00 EUR and 14.99 EUR", e, p)
	}
	body = b.do(t, "GET", run+"/tx/tx_c", bob, nil).Body.String()
	if e, p := row(body, "expected"), row(body, "reported"); !strings.Contains(e, "2.50 USD") || !strings.Contains(p, "<td class=\"num\">–</td>") {
		t.Errorf("tx_c (missing): expected row %q, provider row %q; want 2.50 USD and a dash", e, p)
	}
}
