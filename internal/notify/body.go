package notify

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/reconcile/reconcile/internal/outbox"
	"github.com/reconcile/reconcile/internal/profile"
)

// standardEvent is the body of a standard webhook: the Standard Webhooks
// envelope around the announcement.
type standardEvent struct {
	Type string `json:"type"`
	// Timestamp is when the announced thing happened, not when this attempt
	// was sent (that is the webhook-timestamp header).
	Timestamp time.Time `json:"timestamp"`
	Data      eventData `json:"data"`
}

// eventData is the announcement with the console's page of the run.
type eventData struct {
	outbox.Run
	ConsoleURL string `json:"console_url,omitempty"`
}

// Body returns what a webhook of format receives for e. consoleURL, when
// not empty, is the console's base URL; the body links the run's page.
// The same event, format and console give the same bytes, so every attempt
// of a delivery sends the same body.
func Body(e outbox.Event, format, consoleURL string) ([]byte, error) {
	link := runLink(consoleURL, e.Run)
	switch format {
	case Standard:
		return json.Marshal(standardEvent{Type: e.Type, Timestamp: e.CreatedAt.UTC(), Data: eventData{Run: e.Run, ConsoleURL: link}})
	case Slack:
		return json.Marshal(slackMessage(e, link))
	}
	return nil, fmt.Errorf("format %q: want standard or slack", format)
}

// runLink is the console's page of the run, or "" without a console.
func runLink(consoleURL string, r outbox.Run) string {
	if consoleURL == "" {
		return ""
	}
	return strings.TrimRight(consoleURL, "/") + "/runs/" + r.RunID.String()
}

// slackBody is a Slack message: the text is the notification's fallback,
// the blocks what Slack shows.
type slackBody struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type string     `json:"type"`
	Text *slackText `json:"text,omitempty"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func section(markdown string) slackBlock {
	return slackBlock{Type: "section", Text: &slackText{Type: "mrkdwn", Text: markdown}}
}

// slackMessage says in a few lines what the announcement says.
func slackMessage(e outbox.Event, link string) slackBody {
	r := e.Run
	headline := Headline(e)
	blocks := []slackBlock{section("*" + slackEscape(headline) + "*")}
	blocks = append(blocks, section(slackEscape(outcomeLine(r))))
	if len(r.AtStake) > 0 {
		blocks = append(blocks, section("At stake: "+slackEscape(atStakeLine(r.AtStake))))
	}
	if len(r.DeadLetters) > 0 {
		blocks = append(blocks, section("Dead letters: "+slackEscape(reasonsLine(r.DeadLetters))))
	}
	if link != "" {
		blocks = append(blocks, section("<"+link+"|Open the run in the console>"))
	}
	return slackBody{Text: headline, Blocks: blocks}
}

// Headline is the announcement in one line: "nightly-2026-10-24 complete
// (round 2): 18000 items, 12 mismatched, 3 missing, 1 dead-lettered, in
// 1h02m" or "nightly-2026-10-24 missed its deadline ...".
func Headline(e outbox.Event) string {
	r := e.Run
	took := (time.Duration(r.DurationSeconds) * time.Second).String()
	switch e.Type {
	case outbox.DeadlineMissed:
		deadline := ""
		if r.DeadlineAt != nil {
			deadline = " " + r.DeadlineAt.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("%s missed its deadline%s: %d of %d items still open", r.ReconciliationID, deadline, r.Open, r.Items)
	default:
		round := ""
		if r.Round > 1 {
			round = fmt.Sprintf(" (round %d)", r.Round)
		}
		problems := r.Outcomes["mismatched"] + r.Outcomes["missing"] + r.Outcomes["dead_lettered"] + r.Outcomes["unexpected"]
		verdict := "all matched"
		if problems > 0 {
			verdict = fmt.Sprintf("%d to look at", problems)
		}
		if r.Outcomes["cancelled"] > 0 {
			verdict = fmt.Sprintf("cancelled (%d items)", r.Outcomes["cancelled"])
		}
		return fmt.Sprintf("%s complete%s: %d items, %s, in %s", r.ReconciliationID, round, r.Items, verdict, took)
	}
}

// outcomeLine lists the counts by outcome, in the ledger's order.
func outcomeLine(r outbox.Run) string {
	var parts []string
	for _, o := range []string{"matched", "mismatched", "missing", "dead_lettered", "cancelled", "unexpected"} {
		if n := r.Outcomes[o]; n > 0 || o == "matched" {
			parts = append(parts, fmt.Sprintf("%d %s", n, strings.ReplaceAll(o, "_", "-")))
		}
	}
	if r.Open > 0 {
		parts = append(parts, fmt.Sprintf("%d open", r.Open))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf("; %d provider calls, %d throttled", r.ProviderCalls, r.Throttles)
}

// atStakeLine lists the amounts at stake, each in its currency's decimal
// form (ISO 4217 exponent).
func atStakeLine(amounts []outbox.Amount) string {
	parts := make([]string, len(amounts))
	for i, a := range amounts {
		parts[i] = a.Currency + " " + profile.MinorToDecimal(a.Total(), profile.ISOExponent(a.Currency))
	}
	return strings.Join(parts, ", ")
}

// reasonsLine lists dead letters by reason, the most frequent first.
func reasonsLine(byReason map[string]int) string {
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if byReason[a] != byReason[b] {
			return byReason[b] - byReason[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = strconv.Itoa(byReason[r]) + " " + r
	}
	return strings.Join(parts, ", ")
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
