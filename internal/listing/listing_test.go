package listing_test

import (
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/listing"
)

// TestWindowIsTheBusinessDayInItsZoneWidened checks the listed window: the
// date's midnight to the next in the run's time zone, a day of 23 hours
// when the clocks go forward, widened by the margin on both sides.
func TestWindowIsTheBusinessDayInItsZoneWidened(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		date     time.Time
		loc      *time.Location
		margin   time.Duration
		from, to string
	}{
		{time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), time.UTC, time.Hour, "2026-10-23T23:00:00Z", "2026-10-25T01:00:00Z"},
		{time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), berlin, 0, "2026-10-23T22:00:00Z", "2026-10-24T22:00:00Z"},
		// 29 March 2026: Berlin's clocks go forward, the day has 23 hours.
		{time.Date(2026, 3, 29, 0, 0, 0, 0, time.UTC), berlin, 30 * time.Minute, "2026-03-28T22:30:00Z", "2026-03-29T22:30:00Z"},
	} {
		from, to := listing.Window(c.date, c.loc, c.margin)
		if got := from.UTC().Format(time.RFC3339); got != c.from {
			t.Errorf("%s in %s ±%v: from %s, want %s", c.date.Format(time.DateOnly), c.loc, c.margin, got, c.from)
		}
		if got := to.UTC().Format(time.RFC3339); got != c.to {
			t.Errorf("%s in %s ±%v: to %s, want %s", c.date.Format(time.DateOnly), c.loc, c.margin, got, c.to)
		}
	}
}
