package ledger

import "strings"

// ExampleQueries returns a few queries an auditor can run against the
// ledger's views (docs/ledger.md is the handbook of them all), the last one
// the history of transactionID: the demo prints them.
func ExampleQueries(transactionID string) []string {
	return []string{
		`SELECT reconciliation_id, item_count, matched, mismatched, missing, dead_lettered, provider_calls, throttles, duration FROM run_summary;`,
		`SELECT transaction_id, account_id, field, expected, provider FROM discrepancies ORDER BY transaction_id LIMIT 10;`,
		`SELECT seq, at, from_state, to_state, attempt, http_status, reason FROM transaction_history WHERE transaction_id = '` +
			strings.ReplaceAll(transactionID, "'", "''") + `' ORDER BY seq;`,
	}
}
