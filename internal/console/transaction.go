package console

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/ledger"
)

// itemRecord is one item with its expected record and the provider's values.
type itemRecord struct {
	TransactionID  string
	AccountID      string
	IdempotencyKey string
	AmountMinor    int64
	Currency       string
	Status         string
	OccurredAt     time.Time
	State          string
	Attempts       int
	Throttles      int
	ProvAmount     *int64
	ProvCurrency   *string
	ProvStatus     *string
	Differences    string
	LastHTTPStatus *int
	LastReason     *string
	FirstAttemptAt *time.Time
	UpdatedAt      time.Time
	TerminalAt     *time.Time
}

// otherRun is another run that holds the same transaction id.
type otherRun struct {
	RunID            uuid.UUID
	ReconciliationID string
	State            string
}

type transactionData struct {
	Run    runRow
	Item   itemRecord
	Chain  audit.ItemChain
	Others []otherRun
	// Redrivable is true for a dead letter an operator may redrive.
	Redrivable bool
	MessageID  int64
}

// transactionPage shows one item: the expected record, the provider's
// values and every transition with its hash-chain link verified by
// audit.VerifyItem in the page's snapshot.
func (h *Handler) transactionPage(w http.ResponseWriter, r *http.Request, u User) error {
	id, err := runParam(r)
	if err != nil {
		return err
	}
	txID := r.PathValue("tx")
	if txID == "" {
		txID = r.URL.Query().Get("id") // the form txLink gives the ids . and ..
	}
	var d transactionData
	err = h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		if d.Run, err = loadRun(r.Context(), rd, id); err != nil {
			return err
		}
		it := &d.Item
		err = rd.QueryRow(r.Context(), `
			SELECT transaction_id, account_id, idempotency_key, amount_minor, currency, status, occurred_at, state,
			       attempts, throttles, provider_amount_minor, provider_currency, provider_status,
			       coalesce(differences::text, ''), last_http_status, last_reason, first_attempt_at, updated_at, terminal_at
			  FROM items WHERE run_id = $1 AND transaction_id = $2`, id, txID).
			Scan(&it.TransactionID, &it.AccountID, &it.IdempotencyKey, &it.AmountMinor, &it.Currency, &it.Status,
				&it.OccurredAt, &it.State, &it.Attempts, &it.Throttles, &it.ProvAmount, &it.ProvCurrency, &it.ProvStatus,
				&it.Differences, &it.LastHTTPStatus, &it.LastReason, &it.FirstAttemptAt, &it.UpdatedAt, &it.TerminalAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("run %s has no transaction %q", d.Run.ReconciliationID, txID)
		}
		if err != nil {
			return fmt.Errorf("read item %q: %w", txID, err)
		}
		// VerifyItem's two queries run in the page's transaction.
		if d.Chain, err = audit.VerifyItem(r.Context(), rd, id, txID); err != nil {
			return err
		}
		if it.State == string(ledger.DeadLettered) {
			err := rd.QueryRow(r.Context(), `SELECT message_id FROM queue_messages
				WHERE state = 'dead' AND run_id = $1 AND transaction_id = $2`, id, txID).Scan(&d.MessageID)
			d.Redrivable = err == nil
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read message of %q: %w", txID, err)
			}
		}
		rows, err := rd.Query(r.Context(), `
			SELECT r.run_id, r.reconciliation_id, i.state FROM items i JOIN runs r USING (run_id)
			 WHERE i.transaction_id = $1 AND i.run_id <> $2
			 ORDER BY r.business_date DESC, r.generation DESC LIMIT 20`, txID, id)
		if err != nil {
			return fmt.Errorf("read other runs of %q: %w", txID, err)
		}
		d.Others, err = pgx.CollectRows(rows, pgx.RowToStructByPos[otherRun])
		return err
	})
	if err != nil {
		return err
	}
	h.render(w, r, http.StatusOK, "transaction", view{Title: "Transaction " + txID, User: &u, Data: d})
	return nil
}

// transactionSearch finds the runs holding a transaction id and goes to
// the newest one.
func (h *Handler) transactionSearch(w http.ResponseWriter, r *http.Request, u User) error {
	txID := strings.TrimSpace(r.URL.Query().Get("id"))
	if txID == "" {
		return badRequest("give a transaction id")
	}
	var found []otherRun
	err := h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		rows, err := rd.Query(r.Context(), `
			SELECT r.run_id, r.reconciliation_id, i.state FROM items i JOIN runs r USING (run_id)
			 WHERE i.transaction_id = $1 ORDER BY r.business_date DESC, r.generation DESC LIMIT 1`, txID)
		if err != nil {
			return fmt.Errorf("find transaction %q: %w", txID, err)
		}
		found, err = pgx.CollectRows(rows, pgx.RowToStructByPos[otherRun])
		return err
	})
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return notFound("no run holds transaction %q", txID)
	}
	http.Redirect(w, r, txLink(found[0].RunID, txID), http.StatusSeeOther)
	return nil
}
