package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestStatsMarksEstimates checks what `stats` says of the acked messages:
// counted on a table without statistics, marked ~ as an estimate once the
// table has them, and counted again, per run too, with --exact; a run's
// acked messages are shown as not counted without it.
func TestStatsMarksEstimates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, conn := deadLetteredRun(t) // one message ready, two dead
	if _, err := conn.Exec(ctx, `UPDATE queue_messages SET state = 'acked' WHERE transaction_id = 'tx3'`); err != nil {
		t.Fatal(err)
	}
	stats := func(args ...string) string {
		t.Helper()
		stdout.Reset()
		if err := cmdStats(ctx, e, append(args, "--log-level", "error")); err != nil {
			t.Fatal(err)
		}
		return stdout.String()
	}
	row := func(out, name string) []string {
		t.Helper()
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == name {
				return f
			}
		}
		t.Fatalf("no row %s in:\n%s", name, out)
		return nil
	}

	out := stats()
	if all, run := row(out, "all"), row(out, "nightly-2026-10-24"); all[5] != "1" || all[6] != "3" || run[5] != "-" ||
		!strings.Contains(out, "- not counted per run") || strings.Contains(out, "~") {
		t.Errorf("stats on a table without statistics:\n%s", out)
	}
	if _, err := conn.Exec(ctx, `ANALYZE queue_messages`); err != nil {
		t.Fatal(err)
	}
	out = stats()
	if all := row(out, "all"); all[5] != "~1" || all[6] != "~3" || !strings.Contains(out, "~ an estimate from the table's statistics") {
		t.Errorf("stats on a table with statistics:\n%s", out)
	}
	out = stats("--exact")
	if all, run := row(out, "all"), row(out, "nightly-2026-10-24"); all[5] != "1" || run[5] != "1" || run[6] != "3" ||
		strings.Contains(out, "acked:") {
		t.Errorf("stats --exact:\n%s", out)
	}

	var js struct {
		Acked          *int64 `json:"acked"`
		AckedEstimated bool   `json:"acked_estimated"`
		Runs           []struct {
			Acked        *int64 `json:"acked"`
			DeadLettered int64  `json:"dead_lettered"`
		} `json:"runs"`
	}
	if err := json.Unmarshal([]byte(stats("--json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.Acked == nil || *js.Acked != 1 || !js.AckedEstimated || len(js.Runs) != 1 || js.Runs[0].Acked != nil ||
		js.Runs[0].DeadLettered != 2 {
		t.Errorf("stats --json: %+v", js)
	}
}
