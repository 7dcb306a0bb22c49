package circuit

import "time"

// DefaultWarnEvery is the default interval of [Warnings].
const DefaultWarnEvery = 30 * time.Second

// Warnings is the logging policy of an open circuit: warn at once, then at
// most once every Every with the number of events since the last warning,
// so an outage of an hour is a few lines, not thousands. The zero value
// warns every 30s. It is not safe for concurrent use.
type Warnings struct {
	// Every is the least time between two warnings. Defaults to 30s.
	Every time.Duration

	active bool
	last   time.Time
	count  int
}

// Note records one event (a failed call, a failed probe) at now. It returns
// true when the caller should log a warning now, with count, the number of
// events since the previous warning, this one included.
func (w *Warnings) Note(now time.Time) (warn bool, count int) {
	w.count++
	every := w.Every
	if every <= 0 {
		every = DefaultWarnEvery
	}
	if w.active && now.Sub(w.last) < every {
		return false, 0
	}
	w.active, w.last = true, now
	count, w.count = w.count, 0
	return true, count
}

// Reset ends the episode (the circuit closed): the next Note warns at once.
// It returns the events noted since the last warning, for a closing line.
func (w *Warnings) Reset() int {
	n := w.count
	w.active, w.count = false, 0
	return n
}
