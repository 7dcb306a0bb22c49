// Package logthrottle keeps a failure that repeats, such as a database that
// is down for minutes, from writing one log line per attempt: the first
// failure of a kind is logged at once, the following ones are counted and
// summarised at most once per interval, with the count and the outage's
// first error, and the first success after failures logs the recovery once,
// at info.
//
// The decision is a value, State, whose methods take the time; Logger is the
// thin part that feeds it and writes the lines.
package logthrottle

import (
	"cmp"
	"log/slog"
	"sync"
	"time"
)

// DefaultInterval is how often a failing kind is logged at most.
const DefaultInterval = 30 * time.Second

// State is the log policy of one kind of failure. The zero value is a kind
// that has not failed. It is not safe for concurrent use.
type State struct {
	failing    bool
	since      time.Time // first failure of the outage
	first      string    // text of that failure
	total      int       // failures in the outage
	pending    int       // failures not yet logged
	lastLogged time.Time
}

// Line is what to log about a failure.
type Line struct {
	// Failures counts the failures since the previous line, this one
	// included.
	Failures int
	// Total counts the failures of the outage.
	Total int
	// Since is the time of the outage's first failure.
	Since time.Time
	// FirstErr is the text of the outage's first failure.
	FirstErr string
}

// Fail records a failure with text errText at now and reports whether to log
// a line about it: yes for the first failure of an outage and for the first
// one at least interval after the previous line.
func (s *State) Fail(now time.Time, interval time.Duration, errText string) (Line, bool) {
	if !s.failing {
		*s = State{failing: true, since: now, first: errText}
	}
	s.total++
	s.pending++
	if s.total > 1 && now.Sub(s.lastLogged) < interval {
		return Line{}, false
	}
	l := Line{Failures: s.pending, Total: s.total, Since: s.since, FirstErr: s.first}
	s.pending, s.lastLogged = 0, now
	return l, true
}

// Recovery describes the outage a success ended.
type Recovery struct {
	// Failures counts the failures of the outage.
	Failures int
	// Lasted is the time from the first failure to the success.
	Lasted time.Duration
}

// OK records a success at now and reports the outage it ended, if any.
func (s *State) OK(now time.Time) (Recovery, bool) {
	if !s.failing {
		return Recovery{}, false
	}
	r := Recovery{Failures: s.total, Lasted: now.Sub(s.since)}
	*s = State{}
	return r, true
}

// Config configures a Logger.
type Config struct {
	// Interval is the shortest time between two lines of one kind. Defaults
	// to DefaultInterval.
	Interval time.Duration
	// Now tells the time. Defaults to time.Now.
	Now func() time.Time
}

// Logger writes throttled lines to a slog.Logger, keeping a State per kind
// of failure. A kind is the line's message, such as "queue listener
// unavailable; polling". It is safe for concurrent use.
type Logger struct {
	log   *slog.Logger
	cfg   Config
	mu    sync.Mutex
	kinds map[string]*State
}

// New returns a Logger writing to log.
func New(log *slog.Logger, cfg Config) *Logger {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Logger{log: log, cfg: cfg, kinds: map[string]*State{}}
}

// Fail records a failure of kind and, when the policy says so, logs it at
// warn with the failures since the previous line ("failures"), the outage's
// first error ("first_err"), the latest one when it differs ("err") and
// attrs. err's text must not carry argument values (see
// dbconn.ElideValues).
func (l *Logger) Fail(kind string, err error, attrs ...any) {
	text := err.Error()
	l.mu.Lock()
	s := l.kinds[kind]
	if s == nil {
		s = &State{}
		l.kinds[kind] = s
	}
	line, ok := s.Fail(l.cfg.Now(), l.cfg.Interval, text)
	l.mu.Unlock()
	if !ok {
		return
	}
	args := []any{"failures", line.Failures, "first_err", line.FirstErr}
	if line.Total > 1 {
		args = append(args, "failures_total", line.Total, "since", line.Since)
	}
	if text != line.FirstErr {
		args = append(args, "err", text)
	}
	l.log.Warn(kind, append(args, attrs...)...)
}

// OK records a success of kind and, when it ends an outage, logs msg at info
// with the outage's failure count and duration and attrs.
func (l *Logger) OK(kind, msg string, attrs ...any) {
	l.mu.Lock()
	s := l.kinds[kind]
	var r Recovery
	ok := false
	if s != nil {
		r, ok = s.OK(l.cfg.Now())
	}
	l.mu.Unlock()
	if ok {
		l.log.Info(msg, append([]any{"failures", r.Failures, "outage", r.Lasted.Round(time.Millisecond)}, attrs...)...)
	}
}
