// Package audit checks that the ledger's history was not rewritten and gives
// login roles read-only access to it.
//
// Every row of the transitions table is chained to the previous row of the
// same item by a SHA-256 hash computed by the database when the row is
// inserted (the transitions_chain trigger of the first migration). Verify
// recomputes those chains here, in Go, from the rows' fields, so a check does
// not trust any code stored in the database it is checking. The chain is per
// item rather than per run: a per-run chain would make every consumer
// transaction of a run wait for one chain-head row, while the per-item chain
// is written under the item row lock the state change holds anyway. Verify
// still covers whole runs: it checks every item of every run it is given,
// cross-checks each chain's length and head against items.history_len and
// items.history_head, and each run's item count against runs.item_count.
package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AuditorRole is the read-only group role created by the migrations.
const AuditorRole = "reconcile_auditor"

// ConsoleRole is the web console's group role created by the migrations:
// the auditor's reads, the queue's and limiter's rows the console shows,
// its sessions and the writes of its actions.
const ConsoleRole = "reconcile_console"

// MaxBreaks caps Report.Breaks; further broken items are only counted.
const MaxBreaks = 100

// Kind names what is wrong with a chain.
type Kind string

// The kinds of broken link Verify reports.
const (
	// KindHash: the row's stored hash is not the hash of its content and the
	// previous hash, so the row was edited after it was written.
	KindHash Kind = "hash"
	// KindPrevHash: the row's prev_hash is not the previous row's hash.
	KindPrevHash Kind = "prev_hash"
	// KindMissing: a row of the chain is absent (deleted), in the middle or
	// at the end (items.history_len counts more rows than exist).
	KindMissing Kind = "missing"
	// KindExtra: a row beyond items.history_len exists (inserted behind the
	// trigger's back).
	KindExtra Kind = "extra"
	// KindHead: items.history_head is not the hash of the chain's last row.
	KindHead Kind = "history_head"
	// KindState: items.state is not the state the last transition moved to.
	KindState Kind = "state"
	// KindItemCount: the run has a different number of items than
	// runs.item_count says (an item was deleted or added).
	KindItemCount Kind = "item_count"
)

// Filter selects the runs to verify. The zero Filter selects every run; with
// both fields set a run must match both.
type Filter struct {
	// BusinessDate selects the runs (every generation) of one business date;
	// only its year, month and day are used. Defaults to every date.
	BusinessDate *time.Time
	// RunID selects one run. Defaults to every run.
	RunID *uuid.UUID
}

// Break is one broken link: the first thing found wrong with one item's chain
// (or, for KindItemCount, with a run).
type Break struct {
	RunID         uuid.UUID `json:"run_id"`
	TransactionID string    `json:"transaction_id,omitempty"`
	// Seq is the position in the item's chain of the offending (or absent)
	// row; 0 when the break is not about one row.
	Seq    int    `json:"seq,omitempty"`
	Kind   Kind   `json:"kind"`
	Detail string `json:"detail"`
}

// String renders the break for a terminal.
func (b Break) String() string {
	s := "run " + b.RunID.String()
	if b.TransactionID != "" {
		s += " transaction " + strconv.Quote(b.TransactionID)
	}
	if b.Seq > 0 {
		s += " seq " + strconv.Itoa(b.Seq)
	}
	return s + ": " + string(b.Kind) + ": " + b.Detail
}

// Run is what Verify found for one run.
type Run struct {
	RunID            uuid.UUID `json:"run_id"`
	ReconciliationID string    `json:"reconciliation_id"`
	BusinessDate     string    `json:"business_date"`
	Generation       int       `json:"generation"`
	Items            int64     `json:"items"`
	Transitions      int64     `json:"transitions"`
	BrokenItems      int64     `json:"broken_items"`
	// Digest is the hex SHA-256 over every item's recomputed chain head, in
	// byte order of transaction id. It changes whenever any transition of
	// the run is added, removed or altered: record it outside the database
	// once the run is complete, and compare later.
	Digest string `json:"digest"`
}

// Report is the result of Verify.
type Report struct {
	Runs        []Run `json:"runs"`
	Items       int64 `json:"items"`
	Transitions int64 `json:"transitions"`
	BrokenItems int64 `json:"broken_items"`
	// BrokenRuns counts runs whose item count is not runs.item_count.
	BrokenRuns int64 `json:"broken_runs"`
	// Breaks holds the first break of each broken item (and each run whose
	// item count is wrong), in run and transaction order, at most MaxBreaks.
	Breaks []Break `json:"breaks"`
}

// OK reports whether every chain verified.
func (r Report) OK() bool { return r.BrokenItems == 0 && r.BrokenRuns == 0 }

// Beginner starts transactions: a *pgxpool.Pool or a *pgx.Conn.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Verify recomputes the hash chain of every item of the runs f selects and
// reports what is broken. It reads one consistent snapshot (a read-only
// repeatable-read transaction), so it may run while consumers work, and it
// streams the transitions: memory does not grow with the size of a run. A
// broken chain is not an error; it is in the Report.
func Verify(ctx context.Context, db Beginner, f Filter) (Report, error) {
	var rep Report
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var err error
			rep, err = verify(ctx, tx, f)
			return err
		})
	if err != nil {
		return Report{}, fmt.Errorf("verify ledger: %w", err)
	}
	return rep, nil
}

func filterArgs(f Filter) (any, any) {
	var date, run any
	if f.BusinessDate != nil {
		date = f.BusinessDate.Format(time.DateOnly)
	}
	if f.RunID != nil {
		run = *f.RunID
	}
	return date, run
}

func verify(ctx context.Context, tx pgx.Tx, f Filter) (Report, error) {
	var rep Report
	date, runID := filterArgs(f)
	// Runs first, with their stored and actual item counts.
	rows, err := tx.Query(ctx, `
		SELECT r.run_id, r.reconciliation_id, r.business_date::text, r.generation, r.item_count,
		       (SELECT count(*) FROM items i WHERE i.run_id = r.run_id)
		  FROM runs r
		 WHERE ($1::date IS NULL OR r.business_date = $1::date)
		   AND ($2::uuid IS NULL OR r.run_id = $2::uuid)
		 ORDER BY r.run_id`, date, runID)
	if err != nil {
		return rep, fmt.Errorf("list runs: %w", err)
	}
	index := map[uuid.UUID]int{}
	var runBreaks []*Break // per run, reported before the run's items
	for rows.Next() {
		var r Run
		var stored int64
		if err := rows.Scan(&r.RunID, &r.ReconciliationID, &r.BusinessDate, &r.Generation, &stored, &r.Items); err != nil {
			rows.Close()
			return rep, fmt.Errorf("list runs: %w", err)
		}
		var b *Break
		if stored != r.Items {
			b = &Break{RunID: r.RunID, Kind: KindItemCount,
				Detail: fmt.Sprintf("runs.item_count is %d but the run has %d items", stored, r.Items)}
		}
		runBreaks = append(runBreaks, b)
		index[r.RunID] = len(rep.Runs)
		rep.Runs = append(rep.Runs, r)
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("list runs: %w", err)
	}
	if len(rep.Runs) == 0 {
		return rep, nil
	}

	// Then every item with its transitions, in chain order. Items without
	// transitions come as one row with NULL transition columns.
	rows, err = tx.Query(ctx, `
		SELECT i.run_id, i.transaction_id, i.state, i.history_len, i.history_head,
		       t.seq, t.from_state, t.to_state, (extract(epoch FROM t.at) * 1000000)::bigint,
		       t.attempt, t.http_status, t.reason, t.retry_after_ms, t.details::text, t.actor,
		       t.prev_hash, t.hash
		  FROM items i
		  JOIN runs r ON r.run_id = i.run_id
		  LEFT JOIN transitions t ON t.run_id = i.run_id AND t.transaction_id = i.transaction_id
		 WHERE ($1::date IS NULL OR r.business_date = $1::date)
		   AND ($2::uuid IS NULL OR r.run_id = $2::uuid)
		 ORDER BY i.run_id, i.transaction_id COLLATE "C", t.seq`, date, runID)
	if err != nil {
		return rep, fmt.Errorf("read transitions: %w", err)
	}
	defer rows.Close()

	var (
		c       chain
		row     transitionRow
		runIdx  = -1
		digest  = sha256.New()
		payload []byte
		flushed int // runs whose run-level break was reported
	)
	// flushRuns reports the run-level breaks of the runs before index n.
	flushRuns := func(n int) {
		for ; flushed < n; flushed++ {
			if b := runBreaks[flushed]; b != nil {
				rep.BrokenRuns++
				rep.addBreak(*b)
			}
		}
	}
	finishRun := func() {
		if runIdx >= 0 {
			rep.Runs[runIdx].Digest = hex.EncodeToString(digest.Sum(nil))
		}
	}
	finishItem := func() {
		if !c.active {
			return
		}
		if b, ok := c.finish(); !ok {
			rep.Runs[runIdx].BrokenItems++
			rep.BrokenItems++
			rep.addBreak(b)
		}
		fmt.Fprintf(digest, "%s\x1f%x\n", c.transactionID, c.head)
	}
	for rows.Next() {
		var item itemRow
		if err := rows.Scan(&item.runID, &item.transactionID, &item.state, &item.historyLen, &item.historyHead,
			&row.seq, &row.fromState, &row.toState, &row.atMicros, &row.attempt, &row.httpStatus, &row.reason,
			&row.retryAfterMS, &row.details, &row.actor, &row.prevHash, &row.hash); err != nil {
			return rep, fmt.Errorf("read transitions: %w", err)
		}
		if !c.active || item.runID != c.runID || item.transactionID != c.transactionID {
			finishItem()
			if item.runID != c.runID || runIdx < 0 {
				finishRun()
				digest.Reset()
				runIdx = index[item.runID]
				flushRuns(runIdx + 1)
			}
			c.start(item)
		}
		if row.seq == nil {
			continue // an item without transitions
		}
		rep.Transitions++
		rep.Runs[runIdx].Transitions++
		payload = row.appendPayload(payload[:0], item)
		c.add(&row, payload)
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("read transitions: %w", err)
	}
	finishItem()
	finishRun()
	flushRuns(len(rep.Runs))
	for _, r := range rep.Runs {
		rep.Items += r.Items
	}
	return rep, nil
}

func (r *Report) addBreak(b Break) {
	if len(r.Breaks) < MaxBreaks {
		r.Breaks = append(r.Breaks, b)
	}
}

type itemRow struct {
	runID         uuid.UUID
	transactionID string
	state         string
	historyLen    int
	historyHead   []byte
}

// transitionRow holds one transitions row in the text forms the canonical
// encoding uses. Pointers are NULL-able columns (all NULL for an item without
// transitions).
type transitionRow struct {
	seq          *int
	fromState    *string
	toState      *string
	atMicros     *int64
	attempt      *int
	httpStatus   *int
	reason       *string
	retryAfterMS *int64
	details      *string
	actor        *string
	prevHash     []byte
	hash         []byte
}

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

// Grant makes the existing role a member of reconcile_auditor, so it can read
// the ledger and nothing else. The connected user needs the right to grant
// the role (superuser, CREATEROLE, or ADMIN OPTION on it). Granting twice is
// a no-op.
func Grant(ctx context.Context, db Execer, role string) error {
	return grant(ctx, db, AuditorRole, role)
}

// GrantConsole makes the existing role a member of reconcile_console, the
// role `reconcile ui` connects with: it may do what the console's pages and
// actions do and nothing else. The same rights as Grant are needed.
func GrantConsole(ctx context.Context, db Execer, role string) error {
	return grant(ctx, db, ConsoleRole, role)
}

func grant(ctx context.Context, db Execer, group, role string) error {
	if role == "" {
		return fmt.Errorf("grant %s: empty role name", group)
	}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
		return fmt.Errorf("grant %s to %q: look up role: %w", group, role, err)
	}
	if !exists {
		return fmt.Errorf("grant %s to %q: %w", group, role, ErrNoRole)
	}
	// GRANT takes no parameters: the name is quoted as an identifier.
	_, err := db.Exec(ctx, "GRANT "+pgx.Identifier{group}.Sanitize()+" TO "+pgx.Identifier{role}.Sanitize())
	if err != nil {
		return fmt.Errorf("grant %s to %q: %w", group, role, err)
	}
	return nil
}

// Execer runs statements: a *pgxpool.Pool, *pgx.Conn or pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNoRole is returned by Grant when the role does not exist.
var ErrNoRole = errors.New("no such role (create it first: CREATE ROLE name LOGIN PASSWORD '...')")
