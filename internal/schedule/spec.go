package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/reconcile/reconcile/internal/payments"
)

// Spec is a parsed cron expression with the time zone it is read in.
type Spec struct {
	// Expr is the expression as given.
	Expr string
	// Location is the zone in which the expression's hours and days are
	// read, and in which a tick's business date is taken.
	Location *time.Location
	sched    cron.Schedule
}

// ParseSpec parses a standard five-field cron expression or a descriptor
// (@daily, @hourly, @every 1h) with cron.ParseStandard. The zone is tz when
// not nil, else the CRON_TZ= (or TZ=) prefix of expr, else UTC: never the
// machine's local zone, so two schedulers on differently configured machines
// agree. A CRON_TZ= prefix naming a zone other than tz is an error.
func ParseSpec(expr string, tz *time.Location) (Spec, error) {
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return Spec{}, fmt.Errorf("parse cron expression %q: %w", expr, err)
	}
	loc := time.UTC
	prefixed := strings.HasPrefix(expr, "CRON_TZ=") || strings.HasPrefix(expr, "TZ=")
	spec, isSpec := s.(*cron.SpecSchedule)
	if prefixed && isSpec {
		loc = spec.Location
	}
	if tz != nil {
		if prefixed && isSpec && loc.String() != tz.String() {
			return Spec{}, fmt.Errorf("parse cron expression %q: its zone %s differs from --tz %s", expr, loc, tz)
		}
		loc = tz
	}
	if isSpec {
		c := *spec
		c.Location = loc
		s = &c
	}
	return Spec{Expr: expr, Location: loc, sched: s}, nil
}

// Next returns the first firing time after t.
//
// A five-field expression is evaluated on wall-clock time in Location and
// fires once per matching wall-clock time, as cron(8) does across
// daylight-saving changes. robfig/cron v3.0.1's own Schedule.Next differs on
// both change days, which matters for a daily job that reconciles one date
// per tick:
//
//   - Spring forward (Europe/Berlin, 2026-03-29, 02:00 CET → 03:00 CEST): its
//     "30 2 * * *" skips the day altogether (the next firing after 2026-03-28
//     02:30 is 2026-03-30 02:30), so the date that tick would reconcile is
//     never enqueued. Here a wall-clock time inside the gap fires at the
//     same wall-clock offset after the jump: 03:30 CEST.
//   - Fall back (2026-10-25, 03:00 CEST → 02:00 CET): it fires at both 02:30
//     CEST and 02:30 CET. Here it fires once, at 02:30 CET (the instant Go's
//     time.Date picks for an ambiguous wall-clock time).
//
// Descriptors such as @every 1h are not tied to wall-clock time and use
// robfig/cron's Next unchanged.
func (s Spec) Next(t time.Time) time.Time {
	spec, ok := s.sched.(*cron.SpecSchedule)
	if !ok {
		return s.sched.Next(t)
	}
	// Evaluate the expression on the wall clock, represented as UTC (which
	// has no daylight saving), then map the wall-clock time back to an
	// instant in the zone.
	wallSpec := *spec
	wallSpec.Location = time.UTC
	// The scan starts two hours of wall-clock time early (more than any
	// daylight-saving shift) and keeps the first firing after t, so a start
	// inside the fall-back overlap still finds the firing later that hour.
	lt := t.In(s.Location)
	wall := time.Date(lt.Year(), lt.Month(), lt.Day(), lt.Hour(), lt.Minute(), lt.Second(), lt.Nanosecond(), time.UTC).
		Add(-2 * time.Hour)
	for range 1000 {
		wall = wallSpec.Next(wall)
		if wall.IsZero() {
			return time.Time{}
		}
		at := time.Date(wall.Year(), wall.Month(), wall.Day(), wall.Hour(), wall.Minute(), wall.Second(), 0, s.Location)
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// DateOf returns the business date a tick at t reconciles: t's calendar day
// in the spec's zone plus offset days.
func (s Spec) DateOf(t time.Time, offset int) payments.Date {
	return payments.DateOf(t.In(s.Location)).AddDays(offset)
}
