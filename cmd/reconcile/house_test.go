package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// owners says which package (directory, or file) may run SQL on each table
// and view: a package owns its tables, and others read them through its
// named read functions. Tests, migrations and benchmarks are not checked.
var owners = map[string][]string{
	// The ledger, its completion bookkeeping and the auditor's views. The
	// audit package reads runs, items and transitions for its verification,
	// through the documented reads of one file.
	"runs":                {"internal/ledger", "internal/audit/ledger.go"},
	"items":               {"internal/ledger", "internal/audit/ledger.go"},
	"transitions":         {"internal/ledger", "internal/audit/ledger.go"},
	"run_shards":          {"internal/ledger"},
	"account_progress":    {"internal/ledger"},
	"run_completions":     {"internal/ledger"},
	"account_completions": {"internal/ledger"},
	"completion_rounds":   {"internal/ledger"},
	"run_breakdown":       {"internal/ledger"},
	"run_summary":         {"internal/ledger"},
	"discrepancies":       {"internal/ledger"},
	"dead_lettered_items": {"internal/ledger"},
	"account_completion":  {"internal/ledger"},
	"transaction_history": {"internal/ledger"},
	// The provider's own records of a run's day (list mode) are the
	// ledger's; the listing of a run (its cursor and lease) is the listing
	// package's, whose state the ledger's completion reads (a run is not
	// complete while its listing goes on).
	"provider_records": {"internal/ledger"},
	"run_listings":     {"internal/listing", "internal/ledger/complete.go"},
	// The queue.
	"queue_messages": {"internal/queue"},
	// The shared limiters.
	"rate_limiters":        {"internal/limiter"},
	"rate_limiter_history": {"internal/limiter"},
	// The consumers' heartbeats and the providers' circuits, which the
	// consumers write.
	"consumers":         {"internal/consume"},
	"provider_circuits": {"internal/consume"},
	// The console's sessions and failed logins.
	"console_sessions":       {"internal/console"},
	"console_login_failures": {"internal/console"},
	// The scheduler's record of its ticks.
	"schedule_ticks": {"internal/schedule"},
	// The announcements of runs to webhooks and their deliveries: the
	// ledger adds an announcement in the transaction that completes a run,
	// through the outbox's functions.
	"notifications":           {"internal/outbox"},
	"notification_deliveries": {"internal/outbox"},
}

// sqlTable finds a table named after an SQL keyword that takes one: FROM,
// JOIN, UPDATE, INTO (INSERT, COPY), TABLE, REFERENCES. The project writes
// its SQL keywords in capitals, so prose ("items from the file") does not
// match.
var sqlTable = regexp.MustCompile(`\b(?:FROM|JOIN|UPDATE|INTO|TABLE|REFERENCES)\s+(?:ONLY\s+)?"?([a-z_][a-z0-9_]*)"?`)

// TestTablesAreReadThroughTheirOwner checks the house rule that a package
// owns its tables: every string literal of the product's Go code (string
// concatenations joined) that names a table after an SQL keyword lives in
// the table's owner. Other packages call the owner's read functions.
func TestTablesAreReadThroughTheirOwner(t *testing.T) {
	t.Parallel()
	for _, v := range sqlViolations(t, "../..") {
		t.Error(v)
	}
}

// TestSQLViolationsFindsOutsiders checks the check: SQL on a ledger table
// outside the ledger is found, in a plain literal and in a concatenation,
// and the owner's own SQL and prose are not.
func TestSQLViolationsFindsOutsiders(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(path, src string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("internal/report/report.go", "package report\n"+
		"const a = `SELECT count(*) FROM items WHERE run_id = $1`\n"+
		"const b = \"SELECT \" + cols + \"\\n  FROM \" + `runs r`\n"+
		"var msg = \"read items from the file\"\n")
	write("internal/ledger/items.go", "package ledger\nconst c = `UPDATE items SET state = $1`\n")
	write("internal/report/report_test.go", "package report\nconst d = `DELETE FROM transitions`\n")
	write("internal/audit/ledger.go", "package audit\nconst e = `SELECT 1 FROM transitions`\n")
	write("internal/audit/audit.go", "package audit\nconst f = `SELECT 1 FROM transitions`\n")
	got := sqlViolations(t, root)
	want := []string{
		"internal/audit/audit.go:2: SQL on transitions belongs to internal/ledger, internal/audit/ledger.go",
		"internal/report/report.go:2: SQL on items belongs to internal/ledger, internal/audit/ledger.go",
		"internal/report/report.go:3: SQL on runs belongs to internal/ledger, internal/audit/ledger.go",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// sqlViolations parses every non-test Go file under root outside bench/,
// migrations/ and e2e/ and returns one line per string (a literal, or a
// concatenation of literals and other expressions) that names a table its
// file's package does not own.
func sqlViolations(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == "bench" || rel == "migrations" || rel == "e2e" || rel == "testdata",
				strings.HasPrefix(d.Name(), ".") && rel != ".":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, s := range fileStrings(f) {
			for _, m := range sqlTable.FindAllStringSubmatch(s.text, -1) {
				allowed, owned := owners[m[1]]
				if !owned || ownedBy(rel, allowed) {
					continue
				}
				out = append(out, rel+":"+strconv.Itoa(fset.Position(s.pos).Line)+": SQL on "+m[1]+
					" belongs to "+strings.Join(allowed, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ownedBy reports whether the file at rel is one of the owners: a
// directory (its package) or the file itself.
func ownedBy(rel string, owners []string) bool {
	for _, o := range owners {
		if rel == o || filepath.ToSlash(filepath.Dir(rel)) == o {
			return true
		}
	}
	return false
}

// goString is the text of a string expression and where it starts.
type goString struct {
	pos  token.Pos
	text string
}

// fileStrings returns the file's string literals, each concatenation of
// literals (a + b + c, with non-literal parts as a space) as one string.
func fileStrings(f *ast.File) []goString {
	var out []goString
	ast.Inspect(f, func(n ast.Node) bool {
		switch e := n.(type) {
		case *ast.BinaryExpr:
			if e.Op != token.ADD {
				return true
			}
			var b strings.Builder
			if joinStrings(e, &b) {
				out = append(out, goString{e.Pos(), b.String()})
				return false
			}
		case *ast.BasicLit:
			if e.Kind == token.STRING {
				if s, err := strconv.Unquote(e.Value); err == nil {
					out = append(out, goString{e.Pos(), s})
				}
			}
		}
		return true
	})
	return out
}

// joinStrings writes the concatenation e to b and reports whether it holds
// a string literal; other operands become a space.
func joinStrings(e ast.Expr, b *strings.Builder) bool {
	switch x := e.(type) {
	case *ast.BinaryExpr:
		if x.Op == token.ADD {
			l := joinStrings(x.X, b)
			r := joinStrings(x.Y, b)
			return l || r
		}
	case *ast.ParenExpr:
		return joinStrings(x.X, b)
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			if s, err := strconv.Unquote(x.Value); err == nil {
				b.WriteString(s)
				return true
			}
		}
	}
	b.WriteString(" ")
	return false
}
