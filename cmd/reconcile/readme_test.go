package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeLayoutListsEveryPackage keeps the README's layout section in
// step with the tree: every internal package is listed there, and nothing
// listed is gone.
func TestReadmeLayoutListsEveryPackage(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, layout, ok := strings.Cut(string(readme), "\n## Layout\n")
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

// TestDocsSpeakOfThePaymentFile keeps the documentation in the project's
// words: what a provider's answer is compared with is the payment file's
// record, not "the game's" (a reader who runs no game cannot tell what
// that is).
func TestDocsSpeakOfThePaymentFile(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	word := regexp.MustCompile(`(?i)\bgame`)
	for _, f := range append(files, "../../README.md") {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			if word.MatchString(line) {
				t.Errorf("%s:%d speaks of a game: %s", filepath.Base(f), i+1, line)
			}
		}
	}
}
