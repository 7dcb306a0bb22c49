package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/enqueue"
)

// readmeMaxLines is the longest the README may be: a newcomer reads it in
// five minutes; longer material belongs in docs/.
const readmeMaxLines = 250

// The README and the docs, from this package's directory.
const (
	readmePath = "../../README.md"
	docsDir    = "../../docs"
)

// TestReadmeLayoutListsEveryPackage keeps the README's layout section in
// step with the tree: every internal package is listed there, and nothing
// listed is gone.
func TestReadmeLayoutListsEveryPackage(t *testing.T) {
	t.Parallel()
	readme := readFile(t, readmePath)
	_, layout, ok := strings.Cut(readme, "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no ## Layout section")
	}
	layout, _, _ = strings.Cut(layout, "\n## ")
	listed := map[string]bool{}
	for _, line := range strings.Split(layout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "internal/") {
			listed[strings.TrimSuffix(f[0], "/")] = true
		}
	}
	dirs, err := filepath.Glob("../../internal/*")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			name := "internal/" + filepath.Base(d)
			have[name] = true
			if !listed[name] {
				t.Errorf("README.md's layout does not list %s", name)
			}
		}
	}
	for name := range listed {
		if !have[name] {
			t.Errorf("README.md's layout lists %s, which does not exist", name)
		}
	}
}

// TestReadmeIsShort keeps the README to what a newcomer reads first.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	if n := strings.Count(readFile(t, readmePath), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail to a docs/*.md file and link it", n, readmeMaxLines)
	}
}

// TestReadmeLinksEveryDoc makes every docs/*.md file reachable from the
// README.
func TestReadmeLinksEveryDoc(t *testing.T) {
	t.Parallel()
	linked := map[string]bool{}
	for _, l := range markdownLinks(readFile(t, readmePath)) {
		target, _, _ := strings.Cut(l.target, "#")
		linked[filepath.Clean(target)] = true
	}
	docs, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatalf("no docs/*.md found from %s", docsDir)
	}
	for _, d := range docs {
		if name := "docs/" + filepath.Base(d); !linked[name] {
			t.Errorf("README.md does not link %s", name)
		}
	}
}

// TestDocLinksResolve checks every relative link of the README and the docs:
// the file it names exists and, for a Markdown file, so does the heading
// its #fragment names.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	docs, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // cleaned path → its heading anchors
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		a := headingAnchors(readFile(t, path))
		anchors[path] = a
		return a
	}
	for _, file := range append([]string{readmePath}, docs...) {
		name := strings.TrimPrefix(filepath.ToSlash(file), "../../")
		for _, l := range markdownLinks(readFile(t, file)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			target, fragment, _ := strings.Cut(l.target, "#")
			path := filepath.Clean(file)
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %q: %s does not exist", name, l.line, l.target, target)
					continue
				}
			}
			if fragment != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[fragment] {
				t.Errorf("%s:%d: link %q: %s has no heading #%s", name, l.line, l.target, filepath.Base(path), fragment)
			}
		}
	}
}

// TestHeadingAnchor pins the anchors TestDocLinksResolve expects to GitHub's
// rule, so a link that resolves here resolves on GitHub.
func TestHeadingAnchor(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Limit discovery": "limit-discovery",
		"Several providers in one night: the providers file": "several-providers-in-one-night-the-providers-file",
		"Retention: `reconcile prune`":                       "retention-reconcile-prune",
		"LISTEN through a pooler: `--listen-url`":            "listen-through-a-pooler---listen-url",
		"runs — one per reconciliation":                      "runs--one-per-reconciliation",
	} {
		if got := headingAnchor(heading); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", heading, got, want)
		}
	}
	a := headingAnchors("# A\n\n## Figures\n\n```\n# not a heading\n```\n\n### Figures\n")
	for _, want := range []string{"a", "figures", "figures-1"} {
		if !a[want] {
			t.Errorf("headingAnchors: no %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("headingAnchors took a line of a code block for a heading")
	}
}

// A link is the target of one Markdown link or image, with its line.
type link struct {
	target string
	line   int
}

// linkPattern matches an inline link or image: ](target) or ](target "title").
var linkPattern = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// markdownLinks returns the inline links of doc outside fenced code blocks.
func markdownLinks(doc string) []link {
	var out []link
	for i, line := range proseLines(doc) {
		for _, m := range linkPattern.FindAllStringSubmatch(line, -1) {
			out = append(out, link{target: m[1], line: i + 1})
		}
	}
	return out
}

// proseLines returns doc's lines with those of fenced code blocks (and
// their fences) blanked, so line numbers stay right.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	code := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			code = !code
			lines[i] = ""
			continue
		}
		if code {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub gives doc's headings, a repeated
// one numbered -1, -2, … as GitHub does.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(doc) {
		hashes := len(line) - len(strings.TrimLeft(line, "#"))
		if hashes == 0 || hashes > 6 || !strings.HasPrefix(line[hashes:], " ") {
			continue
		}
		a := headingAnchor(strings.TrimSpace(line[hashes:]))
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// headingAnchor is GitHub's anchor of a heading: lower case, letters,
// digits, hyphens and underscores kept, spaces turned into hyphens, the rest
// dropped.
func headingAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsSpeakOfThePaymentFile keeps the documentation in the project's
// words: what a provider's answer is compared with is the payment file's
// record, not "the game's" (a reader who runs no game cannot tell what
// that is).
func TestDocsSpeakOfThePaymentFile(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(docsDir, "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	word := regexp.MustCompile(`(?i)\bgame`)
	for _, f := range append(files, readmePath) {
		for i, line := range strings.Split(readFile(t, f), "\n") {
			if word.MatchString(line) {
				t.Errorf("%s:%d speaks of a game: %s", filepath.Base(f), i+1, line)
			}
		}
	}
}

// TestReadmeNightByHand keeps the README's night by hand one a newcomer can
// follow: it says where a database comes from without one of their own,
// sets the provider's limit before the first consumer runs (a night at the
// default 10/s against a provider that allows 50/s takes five times as
// long), and shows enqueue's line as enqueue prints it.
func TestReadmeNightByHand(t *testing.T) {
	t.Parallel()
	readme := readFile(t, readmePath)
	_, section, ok := strings.Cut(readme, "\n## A night, by hand\n")
	if !ok {
		t.Fatal(`README.md has no "## A night, by hand" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	if !strings.Contains(section, "reconcile demo --keep") || !strings.Contains(section, "DATABASE_URL") {
		t.Error("the night by hand does not say how to get a database (reconcile demo --keep) and export DATABASE_URL")
	}
	limit, consume := strings.Index(section, "\nreconcile limit set --rate "), strings.Index(section, "\nreconcile consume ")
	if limit < 0 || consume < 0 || limit > consume {
		t.Error("the night by hand does not set the provider's limit (reconcile limit set --rate) before reconcile consume")
	}
	const runID = "8cf1a5d2-0c3e-4f6b-9a7d-1e2f3a4b5c6d"
	res := enqueue.Result{RunID: uuid.MustParse(runID), ReconciliationID: "nightly-2026-10-24", Generation: 1,
		Items: 18000, Elapsed: 341 * time.Millisecond}
	eta := estimateConsumers([]providerPace{{items: 18000, rate: 50, from: "the configured"}})
	want := "# " + strings.Replace(enqueuedLine(res, eta), runID, "8cf1…", 1)
	if !slices.Contains(strings.Split(section, "\n"), want) {
		t.Errorf("the night by hand does not show enqueue's line for 18,000 items in 341ms at the configured 50/s as enqueue prints it:\n%s", want)
	}
}
