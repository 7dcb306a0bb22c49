package providersim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Step is one rate of a [Schedule]: from At (since the schedule started) the
// simulator allows Rate calls per second. A Rate of 0 means unlimited.
type Step struct {
	At   time.Duration
	Rate float64
}

// Schedule is a rate limit that changes over time: steps in increasing At
// order, the first at 0. An empty schedule is unlimited.
type Schedule []Step

// ParseSchedule parses "20@0s,10@30s,30@60s": RATE@OFFSET steps separated by
// commas, RATE calls per second (a number, or "none"/0 for unlimited) from
// OFFSET on. A bare RATE is RATE@0s. "", "0" and "none" are unlimited.
func ParseSchedule(v string) (Schedule, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" || strings.EqualFold(v, "none") {
		return nil, nil
	}
	var s Schedule
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		rateText, atText, hasAt := strings.Cut(part, "@")
		var st Step
		if hasAt {
			at, err := time.ParseDuration(strings.TrimSpace(atText))
			if err != nil || at < 0 {
				return nil, fmt.Errorf("parse limit %q: step %q: offset %q is not a duration like 30s", v, part, atText)
			}
			st.At = at
		}
		rateText = strings.TrimSpace(rateText)
		if !strings.EqualFold(rateText, "none") {
			r, err := strconv.ParseFloat(rateText, 64)
			if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
				return nil, fmt.Errorf("parse limit %q: step %q: rate %q is not a number of calls per second", v, part, rateText)
			}
			st.Rate = r
		}
		if len(s) == 0 && st.At != 0 {
			return nil, fmt.Errorf("parse limit %q: the first step must start at 0s", v)
		}
		if len(s) > 0 && st.At <= s[len(s)-1].At {
			return nil, fmt.Errorf("parse limit %q: step %q: offsets must increase", v, part)
		}
		s = append(s, st)
	}
	return s, nil
}

// String formats s in the form ParseSchedule reads; "none" when unlimited.
func (s Schedule) String() string {
	if len(s) == 0 {
		return "none"
	}
	parts := make([]string, len(s))
	for i, st := range s {
		rate := "none"
		if st.Rate > 0 {
			rate = strconv.FormatFloat(st.Rate, 'f', -1, 64)
		}
		parts[i] = rate + "@" + st.At.String()
	}
	return strings.Join(parts, ",")
}

// RateAt returns the rate in force at offset d; 0 means unlimited.
func (s Schedule) RateAt(d time.Duration) float64 {
	rate := 0.0
	for _, st := range s {
		if st.At > d {
			break
		}
		rate = st.Rate
	}
	return rate
}

// accrue returns the tokens earned between offsets from and to, and whether
// an unlimited step lies in between (which refills the bucket completely).
func (s Schedule) accrue(from, to time.Duration) (tokens float64, unlimited bool) {
	if len(s) == 0 {
		return 0, true
	}
	for i, st := range s {
		end := time.Duration(math.MaxInt64)
		if i+1 < len(s) {
			end = s[i+1].At
		}
		lo, hi := max(from, st.At), min(to, end)
		if hi <= lo {
			continue
		}
		if st.Rate == 0 {
			return 0, true
		}
		tokens += st.Rate * (hi - lo).Seconds()
	}
	return tokens, false
}
