package limiter

import (
	"slices"
	"testing"
	"time"
)

// ms is a time offset from t0 in milliseconds.
func ms(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

func TestLocalReserve(t *testing.T) {
	t.Parallel()
	type want struct {
		act     action
		at      time.Time // zero: not checked
		slots   int       // left after the reservation
		expired int64
	}
	tests := []struct {
		name    string
		setup   func(s *local)
		now     time.Time
		rate    float64
		leasing bool
		want    want
	}{
		{"no slots: lease", func(*local) {}, ms(0), 100, false,
			want{act: actLease}},
		{"no slots, a lease in flight: await it", func(*local) {}, ms(0), 100, true,
			want{act: actAwait}},
		{"future slot: granted at its time", func(s *local) { s.slots = []time.Time{ms(30), ms(40)} }, ms(0), 100, false,
			want{act: actGrant, at: ms(30), slots: 1}},
		{"slot due now: granted now", func(s *local) { s.slots = []time.Time{ms(0)} }, ms(0), 100, false,
			want{act: actGrant, at: ms(0)}},
		{"late slot: paced one interval after the last grant", func(s *local) {
			s.slots = []time.Time{ms(10)}
			s.lastGrant = ms(15)
		}, ms(20), 100, false,
			want{act: actGrant, at: ms(25)}},
		{"late slot, last grant long ago: granted now", func(s *local) {
			s.slots = []time.Time{ms(10)}
			s.lastGrant = ms(0)
		}, ms(20), 100, false,
			want{act: actGrant, at: ms(20)}},
		{"slots older than the window expire", func(s *local) { s.slots = []time.Time{ms(0), ms(50), ms(150)} }, ms(140), 100, false,
			want{act: actGrant, at: ms(140), slots: 1, expired: 1}},
		{"slot exactly one window old is still good", func(s *local) { s.slots = []time.Time{ms(0)} }, ms(100), 100, false,
			want{act: actGrant, at: ms(100)}},
		{"every slot expired: lease", func(s *local) { s.slots = []time.Time{ms(0), ms(10)} }, ms(200), 100, false,
			want{act: actLease, expired: 2}},
		{"penalty: slots dropped, sleep until it ends", func(s *local) {
			s.slots = []time.Time{ms(10), ms(20)}
			s.penalty = ms(500)
		}, ms(0), 100, false,
			want{act: actSleep, at: ms(500)}},
		{"penalty: a slot after it is kept", func(s *local) {
			s.slots = []time.Time{ms(10), ms(600)}
			s.penalty = ms(500)
		}, ms(0), 100, false,
			want{act: actGrant, at: ms(600)}},
		{"quota exhausted: the row hears of it first, the slot after the reset is kept", func(s *local) {
			s.slots = []time.Time{ms(900), ms(1000)}
			s.exhausted(ms(1000), true)
		}, ms(970), 100, false,
			want{act: actLease, slots: 1}},
		{"quota exhausted, reported: the slot after the reset", func(s *local) {
			s.slots = []time.Time{ms(1000)}
			s.exhausted(ms(1000), true)
			s.takeReport()
		}, ms(970), 100, false,
			want{act: actGrant, at: ms(1000)}},
		{"penalty over: lease", func(s *local) { s.penalty = ms(500) }, ms(500), 100, false,
			want{act: actLease}},
		{"retry time ahead: sleep", func(s *local) { s.retryAt = ms(80) }, ms(0), 100, false,
			want{act: actSleep, at: ms(80)}},
		{"retry time ahead, lease in flight: sleep", func(s *local) { s.retryAt = ms(80) }, ms(0), 100, true,
			want{act: actSleep, at: ms(80)}},
		{"exhausted quota to report: lease at once, even in a penalty", func(s *local) { s.exhausted(ms(5000), false) }, ms(0), 100, false,
			want{act: actLease}},
		{"exhausted quota, lease in flight: sleep", func(s *local) { s.exhausted(ms(5000), false) }, ms(0), 100, true,
			want{act: actSleep, at: ms(5000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newLocal(100 * time.Millisecond)
			tt.setup(s)
			r := s.reserve(tt.now, tt.rate, tt.leasing)
			if r.act != tt.want.act {
				t.Fatalf("action %v, want %v", r.act, tt.want.act)
			}
			if !tt.want.at.IsZero() && !r.at.Equal(tt.want.at) {
				t.Errorf("at %v, want %v", r.at.Sub(t0), tt.want.at.Sub(t0))
			}
			if len(s.slots) != tt.want.slots {
				t.Errorf("%d slots left, want %d", len(s.slots), tt.want.slots)
			}
			if s.expired != tt.want.expired {
				t.Errorf("%d expired, want %d", s.expired, tt.want.expired)
			}
		})
	}
}

// TestLocalGrantSequence hands out a batch of slots reserved late: the
// first goes at once, the rest at the rate, never closer together.
func TestLocalGrantSequence(t *testing.T) {
	t.Parallel()
	s := newLocal(100 * time.Millisecond)
	s.slots = []time.Time{ms(0), ms(5), ms(10), ms(20), ms(30)}
	var got []time.Time
	for range 5 {
		r := s.reserve(ms(35), 100, false)
		if r.act != actGrant {
			t.Fatalf("action %v, want a grant", r.act)
		}
		got = append(got, r.at)
	}
	want := []time.Time{ms(35), ms(45), ms(55), ms(65), ms(75)}
	if !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("grants at %v, want %v", got, want)
	}
}

// TestLocalCancelPacesNothing reserves three slots, gives them all up and
// reserves the first again once it is late: a grant given up was no call,
// so the slot goes at once, not paced after the grants that never were.
func TestLocalCancelPacesNothing(t *testing.T) {
	t.Parallel()
	s := newLocal(100 * time.Millisecond)
	s.slots = []time.Time{ms(10), ms(35), ms(60)}
	var rs []reservation
	for range 3 {
		rs = append(rs, s.reserve(ms(0), 40, false))
	}
	for _, r := range rs { // in the order they were made, not the reverse
		s.cancel(r)
	}
	r := s.reserve(ms(20), 40, false)
	if r.act != actGrant || !r.at.Equal(ms(20)) {
		t.Errorf("late slot after three cancelled grants: %v at %v, want a grant at 20ms", r.act, r.at.Sub(t0))
	}
	if !s.commit(ms(20), r) {
		t.Fatal("commit without a penalty reported the slot void")
	}
	if r := s.reserve(ms(40), 40, false); !r.at.Equal(ms(45)) {
		t.Errorf("the next late slot at %v, want 45ms (one interval after the grant used)", r.at.Sub(t0))
	}
}

func TestLocalCancelAndCommit(t *testing.T) {
	t.Parallel()
	s := newLocal(100 * time.Millisecond)
	s.slots = []time.Time{ms(10), ms(20)}
	r := s.reserve(ms(0), 100, false)
	s.cancel(r)
	if !slices.EqualFunc(s.slots, []time.Time{ms(10), ms(20)}, time.Time.Equal) {
		t.Fatalf("after cancel: slots %v, want the reserved one back first", s.slots)
	}
	r = s.reserve(ms(0), 100, false)
	if !s.commit(ms(10), r) {
		t.Fatal("commit without a penalty reported the slot void")
	}
	if d := s.demand(ms(10)); d != 1 {
		t.Errorf("demand after one grant %d, want 1", d)
	}
	r = s.reserve(ms(10), 100, false)
	s.stop(ms(300)) // a throttle while the caller sleeps
	if s.commit(ms(20), r) {
		t.Error("commit during a penalty granted the slot")
	}
	if d := s.demand(ms(20)); d != 1 {
		t.Errorf("a void slot counted as demand: %d, want 1", d)
	}
}

func TestLocalLeaseSize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		grants  []int // commit times, ms
		now     int
		waiters int
		rate    float64
		burst   int
		want    int
	}{
		{"one waiter", nil, 0, 1, 100, 10, 1},
		{"waiters", nil, 0, 4, 100, 10, 4},
		{"at most the window of the rate", nil, 0, 50, 100, 100, 10},
		{"at most burst", nil, 0, 50, 1000, 3, 3},
		{"at least one, even at a low rate", nil, 0, 5, 1, 10, 1},
		{"demand of the current window", []int{0, 10, 20, 30, 40, 50}, 60, 1, 1000, 100, 6},
		{"demand of the previous window", []int{0, 10, 20, 30, 40, 50}, 150, 1, 1000, 100, 6},
		{"no demand after two idle windows", []int{0, 10, 20, 30, 40, 50}, 250, 1, 1000, 100, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newLocal(100 * time.Millisecond)
			for _, g := range tt.grants {
				s.commit(ms(g), reservation{act: actGrant, at: ms(g)})
			}
			if got := s.leaseSize(ms(tt.now), tt.waiters, tt.rate, tt.burst); got != tt.want {
				t.Errorf("leaseSize = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestLocalLeased(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		now       time.Time
		want      int
		res       leaseResult
		wantSlots []time.Time
		wantRetry time.Time
	}{
		{"tokens in the bucket: slots now, then at the rate", ms(0), 3,
			leaseResult{n: 3, avail: 1.5, t0: ms(0), row: rowState{EffectiveRate: 100}},
			[]time.Time{ms(0), ms(5), ms(15)}, time.Time{}},
		{"empty bucket: slots ahead", ms(0), 2,
			leaseResult{n: 2, avail: 0, t0: ms(0), row: rowState{EffectiveRate: 50}},
			[]time.Time{ms(20), ms(40)}, time.Time{}},
		{"nothing granted: back when the next token is due within the window", ms(0), 10,
			leaseResult{n: 0, avail: -5, t0: ms(0), row: rowState{EffectiveRate: 10}},
			nil, ms(500)},
		{"nothing granted, batch due soon: back in a millisecond at the earliest", ms(0), 1,
			leaseResult{n: 0, avail: 0.5, t0: ms(0), row: rowState{EffectiveRate: 100}},
			nil, ms(1)},
		// A grant reaching beyond the window (the row grants none now,
		// but a process does not rely on it): the slots beyond are
		// dropped, or the process would call for 200 ms without hearing
		// of another's pause.
		{"the lease lowered the rate: slots within the window only", ms(0), 5,
			leaseResult{n: 5, avail: 0, t0: ms(0), row: rowState{EffectiveRate: 20}},
			[]time.Time{ms(50), ms(100)}, time.Time{}},
		// 3 tokens granted 10 in debt at 20/s (as above, not a grant the
		// row makes now): the first slot is 550 ms away and dropped with
		// the others. The process comes back when the row's next token,
		// the 4th, is due within the window, not at once into the same
		// debt.
		{"every slot beyond the window: none kept, back when the row's next token is due within it", ms(0), 3,
			leaseResult{n: 3, avail: -10, t0: ms(0), row: rowState{EffectiveRate: 20}},
			nil, ms(600)},
		{"penalised: back when the penalty ends", ms(0), 5,
			leaseResult{n: 0, penalised: true, penaltyUntil: ms(2000), t0: ms(0), row: rowState{EffectiveRate: 100}},
			nil, ms(2000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newLocal(100 * time.Millisecond)
			s.leased(tt.now, tt.want, tt.res)
			if !slices.EqualFunc(s.slots, tt.wantSlots, time.Time.Equal) {
				t.Errorf("slots %v, want %v", s.slots, tt.wantSlots)
			}
			if !s.retryAt.Equal(tt.wantRetry) {
				t.Errorf("retry at %v, want %v", s.retryAt.Sub(t0), tt.wantRetry.Sub(t0))
			}
		})
	}
}

func TestLocalReport(t *testing.T) {
	t.Parallel()
	s := newLocal(100 * time.Millisecond)
	s.succeeded()
	s.hinted(30, ms(20))
	s.hinted(20, ms(10)) // of an earlier call: the later one's stands
	s.exhausted(ms(500), false)
	r := s.takeReport()
	if want := (report{success: true, accepted: 1, hintRate: 30, hintAt: ms(20), hintStop: ms(500)}); r != want {
		t.Fatalf("report %+v, want %+v", r, want)
	}
	if s.pending != (report{}) {
		t.Fatalf("after takeReport pending %+v, want empty", s.pending)
	}
	// The lease failed; meanwhile a later hint, an earlier stop and
	// another success arrived: the accepted calls add up, the later hint
	// and the later stop stand.
	s.succeeded()
	s.hinted(40, ms(30))
	s.exhausted(ms(400), false)
	s.restore(r)
	if want := (report{success: true, accepted: 2, hintRate: 40, hintAt: ms(30), hintStop: ms(500)}); s.pending != want {
		t.Errorf("after restore %+v, want %+v", s.pending, want)
	}
	// Headers saying no request is left imply rate 0: the smallest rate.
	s.hinted(0, ms(40))
	if s.pending.hintRate != minRate {
		t.Errorf("after a zero hint: %v, want minRate", s.pending.hintRate)
	}
}
