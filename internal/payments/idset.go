package payments

import "hash/maphash"

// idSet remembers the transaction ids of a file compactly: 16 bytes per slot
// (at most twice as many slots as ids) whatever the ids' length, instead of
// the ids themselves, which may be up to 255 bytes each.
//
// An id is kept as a 96-bit fingerprint: a 64-bit hash that also picks the
// slot and 32 bits of a second, independently seeded hash, plus the line
// where the id was first seen. Equal ids always have equal fingerprints, so
// a duplicate is never missed. Two different ids are taken for a duplicate
// only if both hashes collide: for a million ids the chance that this
// happens anywhere in the file is about 6e-18, far below the rate of
// undetected memory or disk errors. The seeds are random per Reader, so
// colliding ids cannot be crafted in advance. Behind this check the
// database's primary key on (run_id, transaction_id) still refuses a
// duplicate that would reach it by another path.
//
// The zero idSet is not usable; call newIDSet.
type idSet struct {
	seed1, seed2 maphash.Seed
	slots        []idSlot // open addressing, linear probing; len is a power of two
	n            int
}

// idSlot is one slot of an idSet; h1 == 0 marks an empty slot.
type idSlot struct {
	h1     uint64
	h2line uint64 // high 32 bits: second hash; low 32 bits: first line
}

func newIDSet() *idSet {
	return &idSet{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), slots: make([]idSlot, 1024)}
}

// add records id as seen on line. If an id with the same fingerprint was seen
// before, it returns the line of its first occurrence and true instead.
func (s *idSet) add(id string, line int) (firstLine int, dup bool) {
	h1 := maphash.String(s.seed1, id)
	if h1 == 0 {
		h1 = 1
	}
	h2 := maphash.String(s.seed2, id) >> 32
	mask := uint64(len(s.slots) - 1)
	for i := h1 & mask; ; i = (i + 1) & mask {
		sl := &s.slots[i]
		if sl.h1 == 0 {
			sl.h1 = h1
			sl.h2line = h2<<32 | uint64(uint32(min(line, 1<<32-1)))
			s.n++
			if s.n*4 > len(s.slots)*3 {
				s.grow()
			}
			return 0, false
		}
		if sl.h1 == h1 && sl.h2line>>32 == h2 {
			return int(uint32(sl.h2line)), true
		}
	}
}

func (s *idSet) grow() {
	old := s.slots
	s.slots = make([]idSlot, 2*len(old))
	mask := uint64(len(s.slots) - 1)
	for _, sl := range old {
		if sl.h1 == 0 {
			continue
		}
		i := sl.h1 & mask
		for s.slots[i].h1 != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = sl
	}
}
