package systemd_test

import (
	"strings"
	"testing"

	"github.com/reconcile/reconcile/deploy/internal/cmdcheck"
)

// TestExecStartFlagsAreFlagsOfTheCommand builds reconcile and checks that
// every flag of every ExecStart is one its subcommand has (reconcile SUB
// -h).
func TestExecStartFlagsAreFlagsOfTheCommand(t *testing.T) {
	t.Parallel()
	bin := cmdcheck.Build(t, "../..")
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
		for _, f := range cmdcheck.UnknownFlags(t, bin, fields[1:]) {
			t.Errorf("%s: reconcile %s has no flag %s", u, fields[1], f)
		}
	}
}
