package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCancelCommand: a changed file for an enqueued date is refused with
// the way out, cancel withdraws the run, a second cancel and an unknown
// date are told apart by their exit codes.
func TestCancelCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, _ := testEnv(t)
	dir := t.TempDir()
	write := func(name, rows string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at\n"+rows), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	day := write("day.csv", "tx1,acc,100,EUR,succeeded,2026-10-24T10:00:00Z\ntx2,acc,200,EUR,succeeded,2026-10-24T11:00:00Z\n")
	fixed := write("day-fixed.csv", "tx1,acc,100,EUR,succeeded,2026-10-24T10:00:00Z\ntx2,acc,250,EUR,succeeded,2026-10-24T11:00:00Z\n")
	run := func(cmd func(context.Context, *env, []string) error, args ...string) int {
		stdout.Reset()
		return exitCode(cmd(ctx, e, append(args, "--log-level", "error")), &bytes.Buffer{})
	}
	if code := run(cmdEnqueue, "--date", "2026-10-24", "--source", day); code != 0 {
		t.Fatalf("enqueue: exit %d", code)
	}
	if code := run(cmdEnqueue, "--date", "2026-10-24", "--source", day); code != 0 || !strings.Contains(stdout.String(), "nothing enqueued") {
		t.Errorf("same file again: exit %d, %q; want a no-op", code, stdout.String())
	}
	err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-24", "--source", fixed, "--log-level", "error"})
	if err == nil || exitCode(err, &bytes.Buffer{}) == 0 || !strings.Contains(err.Error(), "--rerun all") ||
		!strings.Contains(err.Error(), "reconcile cancel --date 2026-10-24") {
		t.Errorf("another file for the date: %v", err)
	}

	if code := run(cmdCancel, "--date", "2026-10-24"); code != 2 {
		t.Errorf("cancel without --reason: exit %d, want 2", code)
	}
	if code := run(cmdCancel, "--date", "2026-10-23", "--reason", "x"); code != 2 {
		t.Errorf("cancel of a date without a run: exit %d, want 2", code)
	}
	if code := run(cmdCancel, "--date", "2026-10-24", "--reason", "wrong export"); code != 0 ||
		!strings.Contains(stdout.String(), "2 open items cancelled, 2 queue messages dead-lettered") {
		t.Errorf("cancel: exit %d, %q", code, stdout.String())
	}
	if code := run(cmdCancel, "--date", "2026-10-24", "--reason", "again"); code != 0 || !strings.Contains(stdout.String(), "nothing cancelled") {
		t.Errorf("cancel of a complete run: exit %d, %q", code, stdout.String())
	}
	// status and report say the run was cancelled, by whom and why, and
	// count the cancelled items: not "2 items: 0 matched, ..., 0 queued".
	cancelled := regexp.MustCompile(`CANCELLED by \S+@\S+ at 20\d\d-\d\d-\d\dT[0-9:]+Z: wrong export`)
	for _, c := range []struct {
		cmd  func(context.Context, *env, []string) error
		args []string
		want string
	}{
		{cmdStatus, []string{"--date", "2026-10-24"}, "items     2: 0 matched, 0 mismatched, 0 missing, 0 dead-lettered, 2 cancelled, 0 queued"},
		{cmdReport, []string{"--date", "2026-10-24"}, "2 items: 0 matched, 0 mismatched, 0 missing, 0 dead-lettered, 2 cancelled, 0 open"},
	} {
		if code := run(c.cmd, c.args...); code != 0 || !cancelled.MatchString(stdout.String()) || !strings.Contains(stdout.String(), c.want) {
			t.Errorf("%v after the cancel: exit %d:\n%s", c.args, code, stdout.String())
		}
	}
	if code := run(cmdReport, "--date", "2026-10-24", "--format", "json"); code != 0 ||
		!strings.Contains(stdout.String(), `"cancelled": 2,`) || !strings.Contains(stdout.String(), `"cancel_reason": "wrong export"`) {
		t.Errorf("report --format json after the cancel: exit %d:\n%s", code, stdout.String())
	}
	// The new file becomes generation 2.
	if code := run(cmdEnqueue, "--date", "2026-10-24", "--source", fixed, "--rerun", "all"); code != 0 ||
		!strings.Contains(stdout.String(), "nightly-2026-10-24-g2") {
		t.Errorf("rerun all from the new file: exit %d, %q", code, stdout.String())
	}
}
