package circuit

import (
	"fmt"
	"time"
)

// runJudge judges the first answers of each run together (see NotFound):
// a wrong base URL answers every id "not found", and a night must not be
// recorded as missing on its word. It is pure state, part of a Breaker.
//
// A run is judged when the rule is on (n > 0) and it has at least n items.
// Its evidence is the distinct items answered about (Found, Answered,
// NotFound) and those answered NotFound:
//
//  1. A Found answer proves the run.
//  2. n distinct items answered, not all NotFound, prove it too: the first
//     n answers were not all "not found".
//  3. n distinct items all answered NotFound stop the calls.
//  4. Until then a NotFound answer is held: asked again after a wait that
//     doubles from base to limit, at most maxHolds times, after which it
//     is recorded as answered (a run whose other items never answer
//     cannot hold it forever).
//
// Proven runs are remembered; the evidence of an unproven run outlives the
// circuit closing, since it is the run's.
type runJudge struct {
	n           int
	base, limit time.Duration
	judged      map[string]*runEvidence
	proven      map[string]struct{}
}

type runEvidence struct {
	seen     map[string]struct{} // items answered about
	notFound map[string]struct{} // of which NotFound
	holds    map[string]int      // times each item was held
}

// Bounds of what a runJudge remembers. A consumer serves a run or two at a
// time, a few a day; past these, the evidence is dropped wholesale (an
// unproven run is judged afresh, a proven one can be judged again).
const (
	maxJudgedRuns = 64
	maxProvenRuns = 1024
)

// maxHolds is how many times one item is held: its waits, from ProbeBase
// doubling to ProbeCap (1 s to 30 s by default), add up to about three
// minutes, long enough for the run's other first items to be answered at
// any limit a provider has, short enough that an item does not wait a
// night.
const maxHolds = 10

func newRunJudge(cfg Config) *runJudge {
	return &runJudge{n: cfg.NotFoundRun, base: cfg.ProbeBase, limit: cfg.ProbeCap,
		judged: map[string]*runEvidence{}, proven: map[string]struct{}{}}
}

// judges reports whether ev's run is judged: the rule is on, the run is
// big enough and not proven.
func (r *runJudge) judges(ev Event) bool {
	if r.n == 0 || ev.RunItems < r.n {
		return false
	}
	_, ok := r.proven[ev.Run]
	return !ok
}

// prove records that run is proven.
func (r *runJudge) prove(run string) {
	delete(r.judged, run)
	if len(r.proven) >= maxProvenRuns {
		clear(r.proven)
	}
	r.proven[run] = struct{}{}
}

func (r *runJudge) evidence(run string) *runEvidence {
	e := r.judged[run]
	if e == nil {
		if len(r.judged) >= maxJudgedRuns {
			clear(r.judged)
		}
		e = &runEvidence{seen: map[string]struct{}{}, notFound: map[string]struct{}{}, holds: map[string]int{}}
		r.judged[run] = e
	}
	return e
}

// answered takes an answer about ev's item that is not "not found".
func (r *runJudge) answered(ev Event) {
	if !r.judges(ev) {
		return
	}
	e := r.evidence(ev.Run)
	e.seen[ev.Item] = struct{}{}
	if len(e.seen) >= r.n {
		r.prove(ev.Run)
	}
}

// judgement is what a runJudge makes of a NotFound answer.
type judgement int

const (
	// recordIt: the answer is the item's; record it.
	recordIt judgement = iota
	// hold: ask again after the wait, recording nothing.
	hold
	// stop: the run's first items were all not found; stop the calls.
	stop
)

// notFound takes a NotFound answer and returns what to do with it: the
// wait of a hold, or the cause of a stop.
func (r *runJudge) notFound(ev Event) (judgement, time.Duration, string) {
	if !r.judges(ev) {
		return recordIt, 0, ""
	}
	e := r.evidence(ev.Run)
	e.seen[ev.Item] = struct{}{}
	e.notFound[ev.Item] = struct{}{}
	switch {
	case len(e.notFound) >= r.n:
		return stop, 0, fmt.Sprintf("the first %d items of run %s were all answered not found, none in the provider's own not-found shape: %s",
			len(e.notFound), ev.Run, ev.Cause)
	case len(e.seen) >= r.n:
		r.prove(ev.Run)
		return recordIt, 0, ""
	}
	e.holds[ev.Item]++
	held := e.holds[ev.Item]
	if held > maxHolds {
		return recordIt, 0, ""
	}
	wait := r.base
	for i := 1; i < held && wait < r.limit; i++ {
		wait *= 2
	}
	return hold, min(wait, r.limit), ""
}

// suspect reports whether a NotFound answer of ev's run is suspect while
// the circuit is open: it adds to the run's evidence and does not prove
// the provider back.
func (r *runJudge) suspect(ev Event) bool {
	if !r.judges(ev) {
		return false
	}
	e := r.evidence(ev.Run)
	e.seen[ev.Item] = struct{}{}
	e.notFound[ev.Item] = struct{}{}
	return true
}
