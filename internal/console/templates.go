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
)

// pages holds one template per page, each parsed together with the layout.
type pages struct {
	byName map[string]*template.Template
}

var templateFuncs = template.FuncMap{
	"n":        fmtInt,
	"capped":   fmtCapped,
	"time":     fmtTime,
	"timeptr":  fmtTimePtr,
	"dur":      fmtDuration,
	"rate":     func(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) },
	"rate1":    func(r float64) string { return strconv.FormatFloat(r, 'f', 1, 64) },
	"pct":      func(p float64) string { return strconv.FormatFloat(p, 'f', 1, 64) + "%" },
	"intptr":   fmtIntPtr,
	"money":    fmtMoney,
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

// fmtInt writes n with thousands separators: 1,000,000.
func fmtInt(n any) string {
	var v int64
	switch x := n.(type) {
	case int:
		v = int64(x)
	case int32:
		v = int64(x)
	case int64:
		v = x
	default:
		return fmt.Sprint(n)
	}
	s := strconv.FormatInt(v, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
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

func fmtDuration(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func fmtIntPtr(p *int) string {
	if p == nil {
		return "–"
	}
	return strconv.Itoa(*p)
}

// fmtMoney shows an amount in minor units with its currency.
func fmtMoney(minor int64, currency string) string {
	return fmtInt(minor) + " " + currency
}

func cmpDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
