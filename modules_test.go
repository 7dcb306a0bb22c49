// The repository's root holds no package of its own; this test runs the
// tests of the modules nested in the tree (the image builder and the
// deployment checks under deploy/, the River comparison under bench/river),
// which `go test ./...` at the root does not reach, so that the README's one
// test command covers them too.
package reconcile_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestNestedModules(t *testing.T) {
	t.Parallel()
	var dirs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && path != "go.mod" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deploy", filepath.Join("bench", "river")} {
		if !slices.Contains(dirs, want) {
			t.Errorf("no module found in %s (found %v)", want, dirs)
		}
	}
	for _, dir := range dirs {
		t.Run(filepath.ToSlash(dir), func(t *testing.T) {
			cmd := exec.Command("go", "test", "-count=1", "./...")
			cmd.Dir = dir
			cmd.Env = os.Environ()
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go test ./... in %s: %v\n%s", dir, err, out)
			}
			t.Logf("go test ./... in %s:\n%s", dir, out)
		})
	}
}
