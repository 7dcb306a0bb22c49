package report

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/outbox"
)

// Announcement is one announcement of a run to webhooks (the morning
// message) and where its deliveries stand.
type Announcement struct {
	EventID uuid.UUID `json:"event_id"`
	// Type is run.completed or run.deadline_missed.
	Type string `json:"type"`
	// Round is the completion round; omitted for a missed deadline.
	Round      int       `json:"round,omitempty"`
	RecordedAt time.Time `json:"recorded_at"`
	// Deliveries are empty until a process with a webhook takes the
	// announcement up.
	Deliveries []Delivery `json:"deliveries"`
}

// Delivery is one announcement's delivery to one webhook.
type Delivery struct {
	// Webhook is the URL with its path hidden.
	Webhook string `json:"webhook"`
	Format  string `json:"format"`
	// State is pending, delivered or failed (given up).
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	// LastStatus and LastError describe the latest failed attempt.
	LastStatus int    `json:"last_status,omitempty"`
	LastError  string `json:"last_error,omitempty"`
	// NextAttemptAt is when a pending delivery is tried next.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// FinishedAt is when it was delivered or given up.
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// addAnnouncements fills in each run's deadline and announcements, and
// warns about open runs past their deadline and deliveries given up.
func (st *Status) addAnnouncements(ctx context.Context, pool *pgxpool.Pool, now time.Time) error {
	ids := make([]uuid.UUID, len(st.Runs))
	for i, r := range st.Runs {
		ids[i] = r.RunID
	}
	as, err := outbox.ForRuns(ctx, pool, ids)
	if err != nil {
		return err
	}
	byRun := map[uuid.UUID][]Announcement{}
	for _, a := range as {
		out := Announcement{EventID: a.ID, Type: a.Type, Round: a.Round, RecordedAt: a.CreatedAt, Deliveries: []Delivery{}}
		for _, d := range a.Deliveries {
			dl := Delivery{Webhook: d.Target, Format: d.Format, State: d.State, Attempts: d.Attempts,
				LastStatus: d.LastStatus, LastError: d.LastError}
			if d.State == outbox.Pending {
				dl.NextAttemptAt = &d.NextAttemptAt
			} else {
				dl.FinishedAt = &d.FinishedAt
			}
			if d.State == outbox.Failed {
				st.Warnings = append(st.Warnings, fmt.Sprintf("the announcement %s of run %s to %s was given up after %d attempts: %s",
					a.Type, a.RunID, d.Target, d.Attempts, d.LastError))
			}
			out.Deliveries = append(out.Deliveries, dl)
		}
		byRun[a.RunID] = append(byRun[a.RunID], out)
	}
	for i := range st.Runs {
		r := &st.Runs[i]
		r.Announcements = byRun[r.RunID]
		if at := r.DeadlineAt; at != nil {
			if r.Open > 0 && now.After(*at) {
				st.Warnings = append(st.Warnings, fmt.Sprintf("%s is past its deadline %s with %d open items.",
					r.ReconciliationID, at.UTC().Format(time.RFC3339), r.Open))
			}
		}
	}
	return nil
}
