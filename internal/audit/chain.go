package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/google/uuid"
)

// appendPayload appends the canonical encoding of the row to buf: the
// fields joined by the unit separator 0x1F, exactly as the SQL function
// transition_payload builds them (NULLs as empty strings, the time as
// microseconds since the Unix epoch).
func (t *transitionRow) appendPayload(buf []byte, item itemRow) []byte {
	const sep = 0x1f
	buf = append(buf, item.runID.String()...)
	buf = append(buf, sep)
	buf = append(buf, item.transactionID...)
	buf = append(buf, sep)
	buf = strconv.AppendInt(buf, int64(*t.seq), 10)
	buf = append(buf, sep)
	buf = append(buf, deref(t.fromState)...)
	buf = append(buf, sep)
	buf = append(buf, deref(t.toState)...)
	buf = append(buf, sep)
	buf = strconv.AppendInt(buf, derefInt(t.atMicros), 10)
	buf = append(buf, sep)
	buf = strconv.AppendInt(buf, int64(derefInt(t.attempt)), 10)
	buf = append(buf, sep)
	if t.httpStatus != nil {
		buf = strconv.AppendInt(buf, int64(*t.httpStatus), 10)
	}
	buf = append(buf, sep)
	buf = append(buf, deref(t.reason)...)
	buf = append(buf, sep)
	if t.retryAfterMS != nil {
		buf = strconv.AppendInt(buf, *t.retryAfterMS, 10)
	}
	buf = append(buf, sep)
	buf = append(buf, deref(t.details)...)
	buf = append(buf, sep)
	buf = append(buf, deref(t.actor)...)
	return buf
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt[T int | int64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}

// chain walks one item's transitions in seq order.
type chain struct {
	active        bool
	runID         uuid.UUID
	transactionID string
	state         string
	historyLen    int
	historyHead   []byte

	seen   int    // rows read
	head   []byte // recomputed hash of the last good row
	lastTo string // to_state of the last row
	broken *Break
}

func (c *chain) start(item itemRow) {
	*c = chain{active: true, runID: item.runID, transactionID: item.transactionID, state: item.state,
		historyLen: item.historyLen, historyHead: item.historyHead}
}

func (c *chain) fail(seq int, kind Kind, format string, args ...any) {
	if c.broken == nil {
		c.broken = &Break{RunID: c.runID, TransactionID: c.transactionID, Seq: seq, Kind: kind,
			Detail: fmt.Sprintf(format, args...)}
	}
}

// add checks the next row of the chain; payload is its canonical encoding.
func (c *chain) add(t *transitionRow, payload []byte) {
	seq := *t.seq
	if c.broken != nil {
		return // only the first break of an item is reported
	}
	want := c.seen + 1
	switch {
	case seq > c.historyLen:
		c.fail(seq, KindExtra, "row seq %d is beyond items.history_len %d", seq, c.historyLen)
		return
	case seq != want:
		c.fail(want, KindMissing, "row seq %d is absent (the next stored row is seq %d)", want, seq)
		return
	}
	if !bytes.Equal(t.prevHash, c.head) {
		c.fail(seq, KindPrevHash, "prev_hash %s is not the hash of seq %d (%s)", hexOrNull(t.prevHash), seq-1, hexOrNull(c.head))
		return
	}
	h := sha256.New()
	h.Write(c.head)
	h.Write(payload)
	sum := h.Sum(nil)
	if !bytes.Equal(sum, t.hash) {
		c.fail(seq, KindHash, "stored hash %x, recomputed %x: the row was changed after it was written", t.hash, sum)
		return
	}
	c.seen = seq
	c.head = sum
	c.lastTo = deref(t.toState)
}

func hexOrNull(b []byte) string {
	if b == nil {
		return "NULL"
	}
	return hex.EncodeToString(b)
}

// finish checks the end of the chain against the item row.
func (c *chain) finish() (Break, bool) {
	if c.broken == nil {
		switch {
		case c.seen < c.historyLen:
			c.fail(c.seen+1, KindMissing, "items.history_len is %d but the chain ends at seq %d", c.historyLen, c.seen)
		case !bytes.Equal(c.head, c.historyHead):
			c.fail(c.seen, KindHead, "items.history_head %s is not the hash of the last row (%s)", hexOrNull(c.historyHead), hexOrNull(c.head))
		case c.seen > 0 && c.lastTo != c.state:
			c.fail(c.seen, KindState, "items.state is %s but the last transition moved to %s", c.state, c.lastTo)
		case c.seen == 0 && c.state != "queued":
			c.fail(0, KindState, "items.state is %s but the item has no transitions", c.state)
		}
	}
	c.active = false
	if c.broken != nil {
		return *c.broken, false
	}
	return Break{}, true
}
