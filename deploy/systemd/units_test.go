// Package systemd_test checks the unit files of this directory with
// systemd-analyze verify (systemd's own parser: unknown keys, bad values,
// sandboxing options this systemd lacks) and checks what they promise.
package systemd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var units = []string{"reconcile-enqueue.service", "reconcile-enqueue.timer", "reconcile-consume.service", "reconcile-ui.service"}

// TestUnitsVerify runs systemd-analyze verify on copies of the units whose
// ExecStart names an executable that exists here (verify checks it; the
// units name /usr/local/bin/reconcile, which this machine need not have).
// Any complaint fails the test, a warning included.
func TestUnitsVerify(t *testing.T) {
	t.Parallel()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatal("systemd-analyze is not installed (Debian package systemd): the units cannot be verified")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, u)
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "/usr/local/bin/reconcile", exe)), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestUnitsAreSandboxedAndPersistent reads the settings the deployment
// relies on.
func TestUnitsAreSandboxedAndPersistent(t *testing.T) {
	t.Parallel()
	for _, u := range units {
		s := settings(t, u)
		if strings.HasSuffix(u, ".timer") {
			if s["Persistent"] != "true" || !strings.Contains(s["OnCalendar"], "02:00:00 Europe/Berlin") {
				t.Errorf("%s: Persistent=%q OnCalendar=%q", u, s["Persistent"], s["OnCalendar"])
			}
			continue
		}
		for k, want := range map[string]string{"DynamicUser": "yes", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
			"EnvironmentFile": "/etc/reconcile/env"} {
			if s[k] != want {
				t.Errorf("%s: %s=%q, want %q", u, k, s[k], want)
			}
		}
		if strings.Contains(s["ExecStart"], "DATABASE_URL") || strings.Contains(s["Environment"], "DATABASE_URL") {
			t.Errorf("%s names the database in the unit, not in its environment file", u)
		}
	}
	if s := settings(t, "reconcile-enqueue.service"); !strings.Contains(s["ExecStart"], "--date yesterday") ||
		!strings.Contains(s["ExecStart"], "{date}") {
		t.Errorf("the enqueue's ExecStart %q does not work the date out", s["ExecStart"])
	}
	if s := settings(t, "reconcile-consume.service"); s["TimeoutStopSec"] != "60s" || !strings.Contains(s["ExecStart"], "--grace 30s") {
		t.Errorf("the consumer stops within %s with %q: want longer than its --grace", s["TimeoutStopSec"], s["ExecStart"])
	}
}

// settings reads a unit's Key=Value lines (the last of a repeated key).
func settings(t *testing.T, unit string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	s := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			s[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return s
}
