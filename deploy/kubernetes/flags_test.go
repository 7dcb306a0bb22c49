package kubernetes_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestArgsAreFlagsOfTheCommand builds reconcile and checks that every flag
// a container passes is one its subcommand has (reconcile SUB -h), so a
// misspelt flag fails here and not in a pod at 02:00.
func TestArgsAreFlagsOfTheCommand(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "reconcile")
	build := exec.Command("go", "build", "-o", bin, "./cmd/reconcile")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build reconcile: %v\n%s", err, out)
	}
	m := decode(t, render(t))
	var args [][]string
	for _, d := range m.deployments {
		args = append(args, d.Spec.Template.Spec.Containers[0].Args)
	}
	for _, j := range m.jobs {
		args = append(args, j.Spec.Template.Spec.Containers[0].Args)
	}
	for _, c := range m.cronJobs {
		args = append(args, c.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args)
	}
	for _, a := range args {
		help, _ := exec.Command(bin, a[0], "-h").CombinedOutput()
		if !strings.Contains(string(help), "Usage: reconcile "+a[0]) {
			t.Errorf("reconcile %s is not a subcommand:\n%s", a[0], help)
			continue
		}
		for _, arg := range a[1:] {
			name, _, _ := strings.Cut(arg, "=")
			if !strings.HasPrefix(name, "--") || !strings.Contains(string(help), "\n  "+name+" ") && !strings.Contains(string(help), "\n  "+name+"\n") {
				t.Errorf("reconcile %s has no flag %s", a[0], name)
			}
		}
	}
}
