// Package cmdcheck builds the reconcile binary and checks the command lines
// that the deployment files pass to it against each command's own -h, so a
// misspelt flag fails a test and not a pod or a unit at 02:00.
package cmdcheck

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Build builds reconcile from the repository at root (relative to the
// test's directory) into a temporary directory and returns the binary's
// path.
func Build(t testing.TB, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "reconcile")
	build := exec.Command("go", "build", "-o", bin, "./cmd/reconcile")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build reconcile: %v\n%s", err, out)
	}
	return bin
}

// UnknownFlags returns the flags in args (a subcommand, then its
// arguments, `--name value` or `--name=value`) that the subcommand's -h
// does not list. It fails t when args[0] is not a subcommand.
func UnknownFlags(t testing.TB, bin string, args []string) []string {
	t.Helper()
	out, _ := exec.Command(bin, args[0], "-h").CombinedOutput()
	help := string(out)
	if !strings.Contains(help, "Usage: reconcile "+args[0]) {
		t.Errorf("reconcile %s is not a subcommand:\n%s", args[0], help)
		return nil
	}
	var unknown []string
	for _, arg := range args[1:] {
		name, _, _ := strings.Cut(arg, "=")
		if strings.HasPrefix(name, "--") && !strings.Contains(help, "\n  "+name+" ") && !strings.Contains(help, "\n  "+name+"\n") {
			unknown = append(unknown, name)
		}
	}
	return unknown
}
