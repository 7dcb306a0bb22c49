package kubernetes_test

import (
	"testing"

	"github.com/reconcile/reconcile/deploy/internal/cmdcheck"
)

// TestArgsAreFlagsOfTheCommand builds reconcile and checks that every flag
// a container passes is one its subcommand has (reconcile SUB -h), so a
// misspelt flag fails here and not in a pod at 02:00.
func TestArgsAreFlagsOfTheCommand(t *testing.T) {
	t.Parallel()
	bin := cmdcheck.Build(t, "../..")
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
		for _, f := range cmdcheck.UnknownFlags(t, bin, a) {
			t.Errorf("reconcile %s has no flag %s", a[0], f)
		}
	}
}
