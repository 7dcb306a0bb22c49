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
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
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

// verify checks the runs f selects in the snapshot of db (Verify's
// transaction) and returns what it found:
//
//   - each run's number of items against runs.item_count: a KindItemCount
//     break, reported before the run's items' breaks;
//   - each item's chain, row by row in seq order (no row missing or beyond
//     items.history_len, prev_hash the previous row's recomputed hash, hash
//     the hash of the row's canonical encoding), then its end against the
//     item row (length, history_head, state): the first break of each
//     item, at most MaxBreaks of them in all;
//   - each run's digest over its items' recomputed chain heads, in byte
//     order of transaction id.
//
// It reads the runs, then every item with its transitions in one stream
// (readChains), so memory is independent of the runs' size. An error is a
// failed read, never a broken chain.
func verify(ctx context.Context, db Querier, f Filter) (Report, error) {
	runs, err := readRuns(ctx, db, f)
	if err != nil || len(runs) == 0 {
		return Report{}, err
	}
	v := newVerification(runs)
	if err := readChains(ctx, db, f, v.add); err != nil {
		return v.rep, err
	}
	v.finish()
	return v.rep, nil
}

// verification is the state of one verify: the report being built and
// where the walk over the items' chains stands.
type verification struct {
	rep Report
	// index finds a run's place in rep.Runs.
	index map[uuid.UUID]int
	// countBreaks holds each run's item count break (nil when right), and
	// reported how many runs' have been reported: a run's comes before its
	// items'.
	countBreaks []*Break
	reported    int
	// run is the place of the run being walked, -1 before the first, and
	// digest hashes its items' chain heads.
	run    int
	digest hash.Hash
	// item is the chain being walked, payload the buffer of its rows'
	// canonical encoding.
	item    chain
	payload []byte
}

// newVerification starts a verification of runs, with their item count
// checked.
func newVerification(runs []storedRun) *verification {
	v := &verification{index: make(map[uuid.UUID]int, len(runs)), run: -1, digest: sha256.New()}
	for i, r := range runs {
		var b *Break
		if r.storedItems != r.Items {
			b = &Break{RunID: r.RunID, Kind: KindItemCount,
				Detail: fmt.Sprintf("runs.item_count is %d but the run has %d items", r.storedItems, r.Items)}
		}
		v.countBreaks = append(v.countBreaks, b)
		v.index[r.RunID] = i
		v.rep.Runs = append(v.rep.Runs, r.Run)
	}
	return v
}

// add takes the next row of readChains: an item and one of its transitions
// (nil columns for an item without any).
func (v *verification) add(item itemRow, t *transitionRow) error {
	if !v.item.active || item.runID != v.item.runID || item.transactionID != v.item.transactionID {
		v.endItem()
		if item.runID != v.item.runID || v.run < 0 {
			v.enterRun(item.runID)
		}
		v.item.start(item)
	}
	if t.seq == nil {
		return nil // an item without transitions
	}
	v.rep.Transitions++
	v.rep.Runs[v.run].Transitions++
	v.payload = t.appendPayload(v.payload[:0], item)
	v.item.add(t, v.payload)
	return nil
}

// endItem checks the end of the item being walked, if any, and adds its
// chain head to the run's digest.
func (v *verification) endItem() {
	if !v.item.active {
		return
	}
	if b, ok := v.item.finish(); !ok {
		v.rep.Runs[v.run].BrokenItems++
		v.rep.BrokenItems++
		v.rep.addBreak(b)
	}
	fmt.Fprintf(v.digest, "%s\x1f%x\n", v.item.transactionID, v.item.head)
}

// enterRun ends the run being walked and starts run id, reporting the item
// count breaks of the runs up to it.
func (v *verification) enterRun(id uuid.UUID) {
	v.endRun()
	v.digest.Reset()
	v.run = v.index[id]
	v.reportCountBreaks(v.run + 1)
}

// endRun records the digest of the run being walked, if any.
func (v *verification) endRun() {
	if v.run >= 0 {
		v.rep.Runs[v.run].Digest = hex.EncodeToString(v.digest.Sum(nil))
	}
}

// reportCountBreaks reports the item count breaks of the runs before place
// n not reported yet.
func (v *verification) reportCountBreaks(n int) {
	for ; v.reported < n; v.reported++ {
		if b := v.countBreaks[v.reported]; b != nil {
			v.rep.BrokenRuns++
			v.rep.addBreak(*b)
		}
	}
}

// finish ends the last item and run, reports the count breaks of runs
// without items and totals the items.
func (v *verification) finish() {
	v.endItem()
	v.endRun()
	v.reportCountBreaks(len(v.rep.Runs))
	for _, r := range v.rep.Runs {
		v.rep.Items += r.Items
	}
}

func (r *Report) addBreak(b Break) {
	if len(r.Breaks) < MaxBreaks {
		r.Breaks = append(r.Breaks, b)
	}
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
