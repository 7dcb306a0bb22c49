// Package prometheus_test checks the alert rules of this directory with
// promtool (Debian's prometheus package; .ci/run installs it): they parse,
// every rule has a unit test that makes it fire, and the unit tests pass.
package prometheus_test

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"sigs.k8s.io/yaml"
)

// ruleFile is the part of a rule file the tests read.
type ruleFile struct {
	Groups []struct {
		Name  string
		Rules []struct {
			Alert, Record, Expr string
		}
	}
}

// testFile is the part of a promtool test file the tests read.
type testFile struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func promtool(t *testing.T, args ...string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed (Debian package prometheus): the rules cannot be checked")
	}
	if out, err := exec.Command(path, args...).CombinedOutput(); err != nil {
		t.Fatalf("promtool %v: %v\n%s", args, err, out)
	}
}

func TestRulesParse(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "rules", "alerts.yaml")
}

func TestRulesUnitTests(t *testing.T) {
	t.Parallel()
	promtool(t, "test", "rules", "alerts_test.yaml")
}

// TestEveryRuleIsMadeToFire checks that each alert has a case where it
// fires (and so can be wrong), not only cases where it stays quiet.
func TestEveryRuleIsMadeToFire(t *testing.T) {
	t.Parallel()
	var rules ruleFile
	readYAML(t, "alerts.yaml", &rules)
	var tests testFile
	readYAML(t, "alerts_test.yaml", &tests)
	fired := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fired[a.Alertname] = true
			}
		}
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts = append(alerts, r.Alert)
			if !fired[r.Alert] {
				t.Errorf("alert %s has no test case in which it fires", r.Alert)
			}
		}
	}
	for name := range fired {
		if !slices.Contains(alerts, name) {
			t.Errorf("alerts_test.yaml tests %s, which alerts.yaml lacks", name)
		}
	}
	if len(alerts) < 6 {
		t.Errorf("%d alerts, want at least the six the deployment documents", len(alerts))
	}
}
