package logthrottle

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"
)

func TestStateLogsFirstThenAtMostEveryInterval(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 10, 24, 2, 0, 0, 0, time.UTC)
	type step struct {
		at      time.Duration // after t0
		fail    bool
		err     string
		logged  bool
		count   int // Line.Failures or Recovery.Failures
		firstEr string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"first failure at once", []step{{0, true, "a", true, 1, "a"}}},
		{"then counted until the interval", []step{
			{0, true, "a", true, 1, "a"},
			{time.Second, true, "b", false, 0, ""},
			{29 * time.Second, true, "b", false, 0, ""},
			{30 * time.Second, true, "c", true, 3, "a"},
			{31 * time.Second, true, "c", false, 0, ""},
			{61 * time.Second, true, "c", true, 2, "a"},
		}},
		{"recovery reports the outage", []step{
			{0, true, "a", true, 1, "a"},
			{time.Second, true, "a", false, 0, ""},
			{5 * time.Second, false, "", true, 2, ""},
			{6 * time.Second, false, "", false, 0, ""},
		}},
		{"a new outage starts afresh", []step{
			{0, true, "a", true, 1, "a"},
			{time.Second, false, "", true, 1, ""},
			{2 * time.Second, true, "z", true, 1, "z"},
		}},
		{"success without failure logs nothing", []step{{0, false, "", false, 0, ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var s State
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				if st.fail {
					l, ok := s.Fail(now, DefaultInterval, st.err)
					if ok != st.logged || l.Failures != st.count || l.FirstErr != st.firstEr {
						t.Fatalf("step %d: Fail = %+v, %v; want logged=%v failures=%d first=%q", i, l, ok, st.logged, st.count, st.firstEr)
					}
					continue
				}
				r, ok := s.OK(now)
				if ok != st.logged || r.Failures != st.count {
					t.Fatalf("step %d: OK = %+v, %v; want logged=%v failures=%d", i, r, ok, st.logged, st.count)
				}
			}
		})
	}
}

func TestLoggerWritesOneLinePerKindAndInterval(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2026, 10, 24, 2, 0, 0, 0, time.UTC)
	l := New(slog.New(slog.NewJSONHandler(&buf, nil)), Config{Now: func() time.Time { return now }})
	for range 1000 {
		l.Fail("claim failed", errors.New("connection refused"))
		l.Fail("listener unavailable", errors.New("no route"))
		now = now.Add(10 * time.Millisecond) // 10 s in all
	}
	now = now.Add(20 * time.Second)
	l.Fail("claim failed", errors.New("timeout"))
	l.OK("claim failed", "claims work again")
	l.OK("claim failed", "claims work again")
	var lines []map[string]any
	for _, b := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4:\n%s", len(lines), buf.String())
	}
	last := lines[2]
	if last["msg"] != "claim failed" || last["failures"] != 1000.0 || last["first_err"] != "connection refused" || last["err"] != "timeout" {
		t.Errorf("summary line: %v", last)
	}
	if rec := lines[3]; rec["level"] != "INFO" || rec["failures"] != 1001.0 {
		t.Errorf("recovery line: %v", rec)
	}
}
