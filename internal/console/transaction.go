package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/reconcile/reconcile/internal/audit"
	"github.com/reconcile/reconcile/internal/ledger"
)

type transactionData struct {
	Run    runRow
	Item   ledger.Item
	Chain  audit.ItemChain
	Others []ledger.TransactionRun
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
		d.Item, err = ledger.FindItem(r.Context(), rd, id, txID)
		if errors.Is(err, ledger.ErrNotFound) {
			return notFound("run %s has no transaction %q", d.Run.ReconciliationID, txID)
		}
		if err != nil {
			return err
		}
		// VerifyItem's two queries run in the page's transaction.
		if d.Chain, err = audit.VerifyItem(r.Context(), rd, id, txID); err != nil {
			return err
		}
		if d.Item.State == ledger.DeadLettered {
			if d.MessageID, d.Redrivable, err = h.cfg.Queue.DeadLetterOf(r.Context(), rd, id, txID); err != nil {
				return err
			}
		}
		d.Others, err = ledger.RunsOfTransaction(r.Context(), rd, txID, id, 20)
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
	var found []ledger.TransactionRun
	err := h.read(r.Context(), h.cfg.StatementTimeout, func(rd *reader) error {
		var err error
		found, err = ledger.RunsOfTransaction(r.Context(), rd, txID, uuid.Nil, 1)
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
