package ledger

import (
	"errors"
	"slices"
	"strings"
)

// State is an item's state.
type State string

// Item states. Queued and RetryScheduled are open; the rest are terminal.
// [States] lists them all.
const (
	Queued         State = "queued"
	RetryScheduled State = "retry_scheduled"
	Matched        State = "matched"
	Mismatched     State = "mismatched"
	Missing        State = "missing"
	DeadLettered   State = "dead_lettered"
	// Cancelled is the outcome of an item whose run was withdrawn before
	// it was checked: `reconcile cancel`, or a newer generation superseding
	// it (see [CancelItems]).
	Cancelled State = "cancelled"
	// Unexpected is the outcome of a record the provider listed for the
	// run's date that the payment file lacks (list mode): an item of its
	// own, recorded terminal by [RecordUnexpected].
	Unexpected State = "unexpected"
)

// States returns every item state, the open ones first and then the
// terminal ones, in the order reports and metrics list them. It is the one
// list of states: the SQL fragments of this package and the metrics labels
// are built from it, and a test compares it with the CHECK constraint on
// items.state. Each call returns a new slice.
func States() []State {
	return append(OpenStates(), TerminalStates()...)
}

// OpenStates returns the states of an item still waiting for a provider
// call, in the order of [States]. Each call returns a new slice.
func OpenStates() []State {
	return []State{Queued, RetryScheduled}
}

// TerminalStates returns the final outcomes, in the order of [States]. The
// completion counters have one column per terminal state. Each call returns
// a new slice.
func TerminalStates() []State {
	return []State{Matched, Mismatched, Missing, DeadLettered, Cancelled, Unexpected}
}

// Terminal reports whether s is a final outcome.
func (s State) Terminal() bool {
	return slices.Contains(TerminalStates(), s)
}

// ErrConflict is returned when an item is not in the state a change expects:
// another delivery of the same message recorded its outcome first.
var ErrConflict = errors.New("item is no longer in the expected state")

// ErrNotFound is returned when a run or item does not exist.
var ErrNotFound = errors.New("not found")

// ErrDuplicateItem is returned by [InsertItems] when a transaction id occurs
// twice in a run.
var ErrDuplicateItem = errors.New("a transaction id occurs twice")

// sqlList renders states as an SQL list: ('matched', 'mismatched').
func sqlList(states []State) string {
	quoted := make([]string, len(states))
	for i, s := range states {
		quoted[i] = s.literal()
	}
	return "(" + strings.Join(quoted, ", ") + ")"
}

// perTerminal renders format once per terminal state, with every %s
// replaced by the state's name (which is also its counter column's), and
// joins the results with sep.
func perTerminal(format, sep string) string {
	parts := make([]string, 0, len(TerminalStates()))
	for _, s := range TerminalStates() {
		parts = append(parts, strings.ReplaceAll(format, "%s", string(s)))
	}
	return strings.Join(parts, sep)
}

// unmatched lists the terminal states run_breakdown counts: all but
// matched, the outcome of most items, so that recording a match costs no
// breakdown row.
func unmatched() []State { return []State{Mismatched, Missing, DeadLettered, Cancelled} }

// atStake lists the outcomes whose expected amounts run_breakdown sums:
// the items that did not match, cancelled ones aside.
func atStake() []State { return []State{Mismatched, Missing, DeadLettered} }

// perState formats format once per state of states, each %s replaced by
// the state's name, and joins the results with sep.
func perState(states []State, format, sep string) string {
	parts := make([]string, 0, len(states))
	for _, s := range states {
		parts = append(parts, strings.ReplaceAll(format, "%s", string(s)))
	}
	return strings.Join(parts, sep)
}

// literal renders s as an SQL string literal.
func (s State) literal() string { return "'" + string(s) + "'" }
