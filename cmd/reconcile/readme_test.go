package main

import (
	"os"
	"path/filepath"
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
