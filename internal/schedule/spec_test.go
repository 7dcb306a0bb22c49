package schedule_test

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/reconcile/reconcile/internal/schedule"
)

// firings returns the first n firings of next after t.
func firings(next func(time.Time) time.Time, t time.Time, n int) []time.Time {
	var out []time.Time
	for range n {
		t = next(t)
		out = append(out, t)
	}
	return out
}

func sameInstants(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// TestRobfigAcrossDST pins what robfig/cron v3.0.1's own Next does with a
// Location on Europe/Berlin's change days, which is why Spec.Next does not
// use it directly.
func TestRobfigAcrossDST(t *testing.T) {
	t.Parallel()
	s, err := cron.ParseStandard("30 2 * * *")
	if err != nil {
		t.Fatal(err)
	}
	s.(*cron.SpecSchedule).Location = berlin
	cet, cest := time.FixedZone("CET", 3600), time.FixedZone("CEST", 7200)

	// Spring forward: no firing at all on 2026-03-29.
	got := firings(s.Next, time.Date(2026, 3, 27, 12, 0, 0, 0, berlin), 2)
	want := []time.Time{time.Date(2026, 3, 28, 2, 30, 0, 0, cet), time.Date(2026, 3, 30, 2, 30, 0, 0, cest)}
	if !sameInstants(got, want) {
		t.Errorf("robfig spring forward: %v, want %v (the day skipped)", got, want)
	}
	// Fall back: two firings on 2026-10-25.
	got = firings(s.Next, time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), 2)
	want = []time.Time{time.Date(2026, 10, 25, 2, 30, 0, 0, cest), time.Date(2026, 10, 25, 2, 30, 0, 0, cet)}
	if !sameInstants(got, want) {
		t.Errorf("robfig fall back: %v, want %v (twice)", got, want)
	}
}

func TestSpecNextFiresOncePerDayAcrossDST(t *testing.T) {
	t.Parallel()
	cet, cest := time.FixedZone("CET", 3600), time.FixedZone("CEST", 7200)
	tests := []struct {
		name  string
		expr  string
		from  time.Time
		want  []time.Time
		dates []string // business dates with offset -1
	}{
		{
			name: "spring forward: 02:30 does not exist, fires at 03:30 CEST",
			expr: "30 2 * * *",
			from: time.Date(2026, 3, 27, 12, 0, 0, 0, berlin),
			want: []time.Time{
				time.Date(2026, 3, 28, 2, 30, 0, 0, cet),
				time.Date(2026, 3, 29, 3, 30, 0, 0, cest),
				time.Date(2026, 3, 30, 2, 30, 0, 0, cest),
			},
			dates: []string{"2026-03-27", "2026-03-28", "2026-03-29"},
		},
		{
			name: "fall back: 02:30 happens twice, fires once",
			expr: "30 2 * * *",
			from: time.Date(2026, 10, 24, 12, 0, 0, 0, berlin),
			want: []time.Time{
				time.Date(2026, 10, 25, 2, 30, 0, 0, cet),
				time.Date(2026, 10, 26, 2, 30, 0, 0, cet),
			},
			dates: []string{"2026-10-24", "2026-10-25"},
		},
		{
			name: "fall back: started inside the repeated hour, before the firing",
			expr: "30 2 * * *",
			from: time.Date(2026, 10, 25, 2, 45, 0, 0, cest),
			want: []time.Time{
				time.Date(2026, 10, 25, 2, 30, 0, 0, cet),
				time.Date(2026, 10, 26, 2, 30, 0, 0, cet),
			},
			dates: []string{"2026-10-24", "2026-10-25"},
		},
		{
			name: "ordinary days",
			expr: "0 2 * * *",
			from: time.Date(2026, 6, 1, 2, 0, 0, 0, berlin),
			want: []time.Time{
				time.Date(2026, 6, 2, 2, 0, 0, 0, cest),
				time.Date(2026, 6, 3, 2, 0, 0, 0, cest),
			},
			dates: []string{"2026-06-01", "2026-06-02"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			spec, err := schedule.ParseSpec(tt.expr, berlin)
			if err != nil {
				t.Fatal(err)
			}
			got := firings(spec.Next, tt.from, len(tt.want))
			if !sameInstants(got, tt.want) {
				t.Fatalf("firings %v, want %v", got, tt.want)
			}
			for i, at := range got {
				if d := spec.DateOf(at, -1).String(); d != tt.dates[i] {
					t.Errorf("tick %s reconciles %s, want %s", at, d, tt.dates[i])
				}
			}
		})
	}
}

func TestParseSpecZone(t *testing.T) {
	t.Parallel()
	s, err := schedule.ParseSpec("0 2 * * *", nil)
	if err != nil || s.Location != time.UTC {
		t.Fatalf("no zone: %v %v, want UTC", s.Location, err)
	}
	s, err = schedule.ParseSpec("CRON_TZ=Europe/Berlin 0 2 * * *", nil)
	if err != nil || s.Location.String() != "Europe/Berlin" {
		t.Fatalf("CRON_TZ: %v %v", s.Location, err)
	}
	if got := s.Next(time.Date(2026, 10, 23, 12, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 10, 24, 2, 0, 0, 0, berlin)) {
		t.Fatalf("CRON_TZ next = %v", got)
	}
	if _, err := schedule.ParseSpec("CRON_TZ=Europe/Berlin 0 2 * * *", berlin); err != nil {
		t.Fatalf("same zone twice: %v", err)
	}
	if _, err := schedule.ParseSpec("CRON_TZ=America/New_York 0 2 * * *", berlin); err == nil {
		t.Fatal("conflicting zones accepted")
	}
	if _, err := schedule.ParseSpec("0 2 * *", nil); err == nil {
		t.Fatal("four fields accepted")
	}
	s, err = schedule.ParseSpec("@every 1h", berlin)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next(time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC)); !got.Equal(time.Date(2026, 10, 24, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("@every next = %v", got)
	}
}
