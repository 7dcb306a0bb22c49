package systemd_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecStartFlagsAreFlagsOfTheCommand builds reconcile and checks that
// every flag of every ExecStart is one its subcommand has (reconcile SUB
// -h).
func TestExecStartFlagsAreFlagsOfTheCommand(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "reconcile")
	build := exec.Command("go", "build", "-o", bin, "./cmd/reconcile")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build reconcile: %v\n%s", err, out)
	}
	for _, u := range units {
		exec := settings(t, u)["ExecStart"]
		if exec == "" {
			continue
		}
		fields := strings.Fields(exec)
		if fields[0] != "/usr/local/bin/reconcile" || len(fields) < 2 {
			t.Errorf("%s: ExecStart %q does not run reconcile", u, exec)
			continue
		}
		help := helpOf(t, bin, fields[1])
		for _, f := range fields[2:] {
			if strings.HasPrefix(f, "--") && !strings.Contains(help, "\n  "+f+" ") && !strings.Contains(help, "\n  "+f+"\n") {
				t.Errorf("%s: reconcile %s has no flag %s", u, fields[1], f)
			}
		}
	}
}

func helpOf(t *testing.T, bin, sub string) string {
	t.Helper()
	out, _ := exec.Command(bin, sub, "-h").CombinedOutput()
	if !strings.Contains(string(out), "Usage: reconcile "+sub) {
		t.Fatalf("reconcile %s is not a subcommand:\n%s", sub, out)
	}
	return string(out)
}
