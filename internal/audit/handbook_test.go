package audit_test

import (
	"context"
	"os"
	"strings"
	"testing"
)

// handbookQueries returns the ```sql blocks of docs/ledger.md.
func handbookQueries(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/ledger.md")
	if err != nil {
		t.Fatal(err)
	}
	var queries []string
	rest := string(doc)
	for {
		start := strings.Index(rest, "```sql\n")
		if start < 0 {
			return queries
		}
		rest = rest[start+len("```sql\n"):]
		end := strings.Index(rest, "```")
		if end < 0 {
			t.Fatal("docs/ledger.md: unterminated ```sql block")
		}
		queries = append(queries, rest[:end])
		rest = rest[end+3:]
	}
}

// TestHandbookQueries runs every SQL example of the handbook as a member of
// reconcile_auditor against a populated ledger: each must succeed and answer
// with at least one row, so the documentation cannot drift from the schema.
func TestHandbookQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	queries := handbookQueries(t)
	if len(queries) < 11 {
		t.Fatalf("docs/ledger.md has %d sql blocks, want the chain check and ten questions at least", len(queries))
	}
	db := newDB(t)
	seed(t, db)
	auditor := loginAsAuditor(t, db)
	for i, q := range queries {
		rows, err := auditor.Query(ctx, q)
		if err != nil {
			t.Errorf("query %d failed: %v\n%s", i+1, err, q)
			continue
		}
		n := 0
		// filled records which columns had a value in some row: a column
		// that is empty in every row reads a key or a field that is never
		// written.
		filled := make([]bool, len(rows.FieldDescriptions()))
		for rows.Next() {
			n++
			vals, err := rows.Values()
			if err != nil {
				t.Errorf("query %d: %v", i+1, err)
			}
			for j, v := range vals {
				if v != nil && v != "" {
					filled[j] = true
				}
			}
			// The chain check must find every row intact and linked.
			if strings.Contains(q, "transition_payload") && (vals[3] != true || vals[4] != true) {
				t.Errorf("query %d: chain check row %v, want intact and linked", i+1, vals)
			}
		}
		if err := rows.Err(); err != nil {
			t.Errorf("query %d failed: %v\n%s", i+1, err, q)
		} else if n == 0 {
			t.Errorf("query %d answered no rows\n%s", i+1, q)
		}
		for j, ok := range filled {
			if n > 0 && !ok {
				t.Errorf("query %d: column %s is empty in every row\n%s", i+1, rows.FieldDescriptions()[j].Name, q)
			}
		}
	}
}
