package main

import (
	"testing"
	"time"
)

func TestBusinessDate(t *testing.T) {
	t.Parallel()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// 00:30 in Berlin on the 26th is still the 25th in UTC; the day after
	// the fall-back night is 25 hours long.
	now := time.Date(2026, 10, 26, 0, 30, 0, 0, berlin)
	for _, tc := range []struct {
		in, want string
		now      time.Time
	}{
		{"yesterday", "2026-10-25", now},
		{"today", "2026-10-26", now},
		{"yesterday", "2026-10-24", now.UTC()},
		{"2026-10-24", "2026-10-24", now},
		{"tomorrow", "", now},
		{"2026-13-01", "", now},
	} {
		d, err := businessDate(tc.in, tc.now)
		if tc.want == "" {
			if err == nil {
				t.Errorf("businessDate(%q) = %s, want an error", tc.in, d)
			}
			continue
		}
		if err != nil || d.String() != tc.want {
			t.Errorf("businessDate(%q, %v) = %s, %v; want %s", tc.in, tc.now, d, err, tc.want)
		}
	}
}
