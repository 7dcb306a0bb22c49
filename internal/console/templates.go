package console

import (
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/human"
	"github.com/reconcile/reconcile/internal/ledger"
)

// pages holds one template per page, each parsed together with the layout.
type pages struct {
	byName map[string]*template.Template
}

var templateFuncs = template.FuncMap{
	"n":       fmtInt,
	"number":  human.Number,
	"capped":  fmtCapped,
	"time":    fmtTime,
	"timeptr": fmtTimePtr,
	"dur":     fmtDuration,
	"rate":    human.Rate,
	"pct":     func(p float64) string { return strconv.FormatFloat(p, 'f', 1, 64) + "%" },
	"intptr":  fmtIntPtr,
	"money":   human.Money,
	"diff":    fmtDifference,
	"reportedCurrency": func(it ledger.Item) string {
		if it.Reported != nil && it.Reported.Currency != "" {
			return it.Reported.Currency
		}
		return it.Currency
	},
	"query":    queryString,
	"runlink":  func(id fmt.Stringer) string { return "/runs/" + id.String() },
	"txlink":   txLink,
	"dash":     func(s string) string { return cmpDash(s) },
	"add":      func(a, b int) int { return a + b },
	"contains": strings.Contains,
	"sub":      func(a, b int) int { return a - b },
	"int64":    int64Str,
}

func parsePages() (*pages, error) {
	layout, err := fs.ReadFile(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("console: read layout: %w", err)
	}
	files, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name == "layout" {
			continue
		}
		body, err := fs.ReadFile(templateFS, f)
		if err != nil {
			return nil, err
		}
		t := template.New("layout").Funcs(templateFuncs)
		if _, err := t.Parse(string(layout)); err != nil {
			return nil, fmt.Errorf("console: parse layout: %w", err)
		}
		if _, err := t.Parse(string(body)); err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", f, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

func (p *pages) execute(w io.Writer, name string, v view) error {
	t, ok := p.byName[name]
	if !ok {
		return fmt.Errorf("no page %q", name)
	}
	return t.ExecuteTemplate(w, "layout", v)
}

// fmtInt writes an integer of any size with thousands separators
// (human.Count): 1,000,000.
func fmtInt(n any) string {
	switch x := n.(type) {
	case int:
		return human.Count(int64(x))
	case int32:
		return human.Count(int64(x))
	case int64:
		return human.Count(x)
	}
	return fmt.Sprint(n)
}

// capped is a count that stopped counting past Cap.
type capped struct {
	N   int64
	Cap int64
}

// fmtCapped shows a count that reached its cap as "10,000+".
func fmtCapped(c capped) string {
	if c.Cap > 0 && c.N > c.Cap {
		return fmtInt(c.Cap) + "+"
	}
	return fmtInt(c.N)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "–"
	}
	return fmtTime(*t)
}

// fmtDuration writes a duration for people (human.Duration), "–" for none.
func fmtDuration(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return human.Duration(d)
}

func fmtIntPtr(p *int) string {
	if p == nil {
		return "–"
	}
	return strconv.Itoa(*p)
}

// fmtDifference writes a differing field's value: an amount_minor in its
// currency's major units (1499 EUR is 14.99 EUR), anything else as it is.
func fmtDifference(field, value, currency string) string {
	if v, err := strconv.ParseInt(value, 10, 64); err == nil && field == "amount_minor" && currency != "" {
		return human.Money(v, currency)
	}
	return value
}

func cmpDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
