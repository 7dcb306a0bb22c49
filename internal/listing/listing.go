// Package listing pages through a provider's own list of a run's business
// date (list mode) and stores it in the ledger: each page's records and the
// listing's cursor are written in one transaction, so a crash resumes from
// the last stored page, and a lease on the listing (one row of
// run_listings per run and provider, as a message's lease) lets one process
// at a time fetch pages, so the fleet never fetches a page twice. Pages go
// through the provider's shared limiter, honour Retry-After and back off
// after failures. The last page's transaction also records the records no
// item has as unexpected items (ledger.RecordUnexpected).
//
// The package owns run_listings: all SQL on it is here.
package listing

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reconcile/reconcile/internal/ledger"
	"github.com/reconcile/reconcile/internal/limiter"
	"github.com/reconcile/reconcile/internal/pause"
	"github.com/reconcile/reconcile/internal/provider"
)

// State is where a run's listing stands.
type State string

// Listing states.
const (
	// Listing: pages remain.
	Listing State = "listing"
	// Done: every page and the unexpected items are stored.
	Done State = "done"
	// Failed: the provider refused the listing; the run's items are looked
	// up one by one.
	Failed State = "failed"
)

// ErrAuth is returned when the provider refuses the credentials on a page.
var ErrAuth = errors.New("provider refused the credentials on a list page")

// Defaults of [Lister].
const (
	// DefaultMargin widens the business date's window on both sides, for
	// payments booked near midnight on another clock.
	DefaultMargin = time.Hour
	// DefaultLease is how long a listing's lease lasts without a stored
	// page; a page's transaction renews it.
	DefaultLease = 30 * time.Second
	// maxPageAttempts is how many failed fetches of one page (5xx,
	// timeouts, unreadable pages) a process makes before it gives the
	// listing up as failed.
	maxPageAttempts = 8
)

// Lister lists runs for one provider.
type Lister struct {
	// Pool is the database.
	Pool *pgxpool.Pool
	// Provider is the provider's name on its items; empty for the default.
	Provider string
	// Client fetches the pages; its profile must have a list.
	Client *provider.Client
	// Limiter paces the pages with the provider's other calls.
	Limiter *limiter.Shared
	// Actor names this process in the lease and the transitions.
	Actor string
	// Margin widens the window; defaults to DefaultMargin.
	Margin time.Duration
	// Lease is the listing lease; defaults to DefaultLease.
	Lease time.Duration
	// Logger receives progress; defaults to discarding it.
	Logger *slog.Logger
	// Poll is how often a process waiting for another's listing looks
	// again; defaults to a second.
	Poll time.Duration
}

// Result is what a listing stored.
type Result struct {
	State   State
	Pages   int
	Records int
	// Calls counts the page requests this process made.
	Calls int
	// Unexpected counts the unexpected items recorded (by this process).
	Unexpected int
}

// Window returns the listed window of a business date in a time zone,
// widened by margin: [midnight - margin, next midnight + margin).
func Window(date time.Time, loc *time.Location, margin time.Duration) (from, to time.Time) {
	start := time.Date(date.Year(), date.Month(), date.Day(), 0, 0, 0, 0, loc)
	return start.Add(-margin), start.AddDate(0, 0, 1).Add(margin)
}

// List lists run runID to its end: it takes the listing's lease and fetches
// pages until the last, or waits while another process holds the lease and
// takes over if that process stops renewing it. It returns once the
// listing is done or failed, or with ctx's error or ErrAuth.
//
// stored, when not nil, is called with the record ids of each page this
// process stored, once the page's transaction committed and before the
// next page is asked for: list mode judges the page's items meanwhile. It
// runs on List's goroutine, so it paces the listing.
func (l *Lister) List(ctx context.Context, runID uuid.UUID, stored func(ctx context.Context, ids []string)) (Result, error) {
	logger := cmp.Or(l.Logger, slog.New(slog.DiscardHandler)).With("run_id", runID, "provider", l.Provider)
	if err := l.open(ctx, runID); err != nil {
		return Result{}, err
	}
	var res Result
	for {
		lease, err := l.acquire(ctx, runID)
		if err != nil {
			return res, err
		}
		if lease.state != Listing {
			res.State, res.Pages, res.Records = lease.state, lease.pages, lease.records
			return res, nil
		}
		if lease.token == uuid.Nil {
			if err := pause.For(ctx, cmp.Or(l.Poll, time.Second)); err != nil {
				return res, err
			}
			continue
		}
		logger.Info("listing the provider's records", "from", lease.from, "to", lease.to, "pages_stored", lease.pages)
		if err := l.fetch(ctx, runID, lease, &res, stored, logger); err != nil {
			return res, err
		}
	}
}

// open creates the run's listing row if there is none.
func (l *Lister) open(ctx context.Context, runID uuid.UUID) error {
	day, err := ledger.RunDayOf(ctx, l.Pool, runID)
	if err != nil {
		return err
	}
	loc, err := time.LoadLocation(day.TimeZone)
	if err != nil {
		return fmt.Errorf("run %s: time zone %q: %w", runID, day.TimeZone, err)
	}
	from, to := Window(day.Date, loc, cmp.Or(l.Margin, DefaultMargin))
	_, err = l.Pool.Exec(ctx, `
		INSERT INTO run_listings (run_id, provider, window_from, window_to) VALUES ($1, $2, $3, $4)
		ON CONFLICT (run_id, provider) DO NOTHING`, runID, l.Provider, from, to)
	if err != nil {
		return fmt.Errorf("open the listing of run %s: %w", runID, err)
	}
	return nil
}

// lease is a listing as acquire found it; token is uuid.Nil when another
// process holds its lease.
type lease struct {
	state          State
	token          uuid.UUID
	cursor         string
	pages, records int
	from, to       time.Time
}

// acquire takes the listing's lease when it is free or ran out.
func (l *Lister) acquire(ctx context.Context, runID uuid.UUID) (lease, error) {
	var ls lease
	var token *uuid.UUID
	err := l.Pool.QueryRow(ctx, `
		WITH took AS (
		    UPDATE run_listings SET leased_by = $3, lease_token = gen_random_uuid(),
		                            lease_until = now() + make_interval(secs => $4)
		     WHERE run_id = $1 AND provider = $2 AND state = 'listing'
		       AND (lease_until IS NULL OR lease_until < now())
		    RETURNING lease_token)
		SELECT l.state, (SELECT lease_token FROM took), l.cursor, l.pages, l.records, l.window_from, l.window_to
		  FROM run_listings l WHERE run_id = $1 AND provider = $2`,
		runID, l.Provider, l.Actor, cmp.Or(l.Lease, DefaultLease).Seconds()).
		Scan(&ls.state, &token, &ls.cursor, &ls.pages, &ls.records, &ls.from, &ls.to)
	if err != nil {
		return lease{}, fmt.Errorf("take the listing lease of run %s: %w", runID, err)
	}
	if token != nil {
		ls.token = *token
	}
	return ls, nil
}

// errLeaseLost ends fetch when another process took the listing over.
var errLeaseLost = errors.New("listing lease lost")

// fetch fetches and stores pages under the lease until the last page, a
// failure that ends the listing, or the lease is lost.
func (l *Lister) fetch(ctx context.Context, runID uuid.UUID, ls lease, res *Result, stored func(context.Context, []string),
	logger *slog.Logger) error {
	failures := 0
	calls := 0 // page requests not yet counted in the listing's row
	for {
		if err := l.Limiter.Wait(ctx); err != nil {
			return err
		}
		sent := time.Now()
		resp, page, err := l.Client.ListPage(ctx, provider.PageRequest{From: ls.from, To: ls.to, Cursor: ls.cursor})
		res.Calls++
		calls++
		if resp.Status != 0 {
			l.Limiter.Answered(time.Since(sent))
		}
		if resp.Header != nil {
			l.Limiter.Observe(limiter.ParseHints(resp.Header, sent))
		}
		var wait time.Duration
		switch {
		case provider.KindOf(err) == provider.KindCanceled:
			return ctx.Err()
		case errors.Is(err, provider.ErrNoList):
			return err
		case err == nil && resp.Status >= 200 && resp.Status < 300:
			l.Limiter.Succeeded()
			next, err := l.store(ctx, runID, ls, page, calls, res)
			if errors.Is(err, errLeaseLost) {
				logger.Warn("listing lease lost; another consumer continues from the stored cursor")
				return nil
			}
			if err != nil {
				return err
			}
			ls = next
			failures, calls = 0, 0
			if stored != nil && len(page.Records) > 0 {
				ids := make([]string, len(page.Records))
				for i, r := range page.Records {
					ids[i] = r.ID
				}
				stored(ctx, ids)
			}
			if ls.state != Listing {
				res.State = ls.state
				logger.Info("listing done", "pages", ls.pages, "records", ls.records, "unexpected", res.Unexpected)
				return nil
			}
			continue
		case resp.Status == http.StatusTooManyRequests:
			wait = max(resp.RetryAfter, time.Second)
			if err := l.Limiter.Throttled(ctx, wait, limiter.ThrottleKindOf(resp.Header)); err != nil {
				logger.Warn("throttle not shared with other consumers", "err", err)
			}
		case resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden:
			return fmt.Errorf("%w: %s answered %d", ErrAuth, l.Client.BaseURL(), resp.Status)
		case err == nil && resp.Status >= 400 && resp.Status < 500:
			return l.fail(ctx, runID, ls, calls, fmt.Sprintf("http_%d: %s", resp.Status, resp.BodyExcerpt), logger)
		default:
			failures++
			if failures >= maxPageAttempts {
				reason := fmt.Sprintf("http_%d", resp.Status)
				if err != nil {
					reason = err.Error()
				}
				return l.fail(ctx, runID, ls, calls, reason, logger)
			}
			wait = min(time.Second<<min(failures-1, 5), 30*time.Second)
			logger.Warn("list page failed; retrying", "status", resp.Status, "err", err, "retry_in", wait)
		}
		if err := l.renew(ctx, runID, ls.token, wait); err != nil {
			return err
		}
		if err := pause.For(ctx, wait); err != nil {
			return err
		}
	}
}

// renew extends the lease to cover a wait before the next page.
func (l *Lister) renew(ctx context.Context, runID uuid.UUID, token uuid.UUID, wait time.Duration) error {
	_, err := l.Pool.Exec(ctx, `
		UPDATE run_listings SET lease_until = now() + make_interval(secs => $4)
		 WHERE run_id = $1 AND provider = $2 AND lease_token = $3`,
		runID, l.Provider, token, (cmp.Or(l.Lease, DefaultLease) + wait).Seconds())
	if err != nil {
		return fmt.Errorf("renew the listing lease of run %s: %w", runID, err)
	}
	return nil
}

// store writes a page's records and moves the cursor past it, in one
// transaction, only while this process holds the lease and the cursor is
// still the one the page was asked with. The last page also records the
// unexpected items and ends the listing.
// calls is the number of page requests made since the last stored page,
// this one included.
func (l *Lister) store(ctx context.Context, runID uuid.UUID, ls lease, page provider.Page, calls int, res *Result) (lease, error) {
	recs := make([]ledger.Listed, len(page.Records))
	for i, r := range page.Records {
		recs[i] = ledger.Listed{ID: r.ID, AmountMinor: r.AmountMinor, Currency: r.Currency, Status: r.Status, Kind: r.Kind}
	}
	next := ls
	next.cursor, next.pages = page.Next, ls.pages+1
	if page.Next == "" {
		next.state = Done
	}
	var unexpected int
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		added, err := ledger.StoreListed(ctx, tx, runID, l.Provider, next.pages, recs)
		if err != nil {
			return err
		}
		next.records = ls.records + added
		tag, err := tx.Exec(ctx, `
			UPDATE run_listings
			   SET cursor = $5, pages = pages + 1, records = records + $6, calls = calls + $9, state = $7,
			       lease_until = CASE WHEN $7 = 'listing' THEN now() + make_interval(secs => $8) END,
			       leased_by = CASE WHEN $7 = 'listing' THEN leased_by END,
			       finished_at = CASE WHEN $7 = 'listing' THEN NULL ELSE now() END
			 WHERE run_id = $1 AND provider = $2 AND lease_token = $3 AND cursor = $4 AND state = 'listing'`,
			runID, l.Provider, ls.token, ls.cursor, next.cursor, added, string(next.state),
			cmp.Or(l.Lease, DefaultLease).Seconds(), calls)
		if err != nil {
			return fmt.Errorf("move the listing cursor of run %s: %w", runID, err)
		}
		if tag.RowsAffected() == 0 {
			return errLeaseLost
		}
		if next.state == Done {
			now := time.Now()
			if unexpected, err = ledger.RecordUnexpected(ctx, tx, runID, l.Provider, l.Actor, now); err != nil {
				return err
			}
			_, err = ledger.CompleteListed(ctx, tx, runID, now, l.Actor)
		}
		return err
	})
	if err != nil {
		return ls, err
	}
	res.Pages, res.Records, res.Unexpected = next.pages, next.records, res.Unexpected+unexpected
	return next, nil
}

// fail ends the listing as failed, so the run's items are looked up.
func (l *Lister) fail(ctx context.Context, runID uuid.UUID, ls lease, calls int, reason string, logger *slog.Logger) error {
	err := pgx.BeginFunc(ctx, l.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
			UPDATE run_listings SET state = 'failed', reason = $4, calls = calls + $5, finished_at = now(), leased_by = NULL,
			                        lease_until = NULL
			 WHERE run_id = $1 AND provider = $2 AND lease_token = $3 AND state = 'listing'`,
			runID, l.Provider, ls.token, reason, calls)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		// The items judged from the stored pages may be all the run had.
		_, err = ledger.CompleteListed(ctx, tx, runID, time.Now(), l.Actor)
		return err
	})
	if err != nil {
		return fmt.Errorf("end the listing of run %s: %w", runID, err)
	}
	logger.Warn("the provider refused the listing; the run's items are looked up one by one", "reason", reason)
	return nil
}

// Progress is one listing as `status` shows it.
type Progress struct {
	Provider       string
	State          State
	Pages, Records int
	Calls          int
	Reason         string
}

// ProgressOf returns the listings of a run, by provider.
func ProgressOf(ctx context.Context, db ledger.DB, runID uuid.UUID) ([]Progress, error) {
	rows, err := db.Query(ctx, `
		SELECT provider, state, pages, records, calls, coalesce(reason, '')
		  FROM run_listings WHERE run_id = $1 ORDER BY provider`, runID)
	if err != nil {
		return nil, fmt.Errorf("read the listings of run %s: %w", runID, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Progress])
	if err != nil {
		return nil, fmt.Errorf("read the listings of run %s: %w", runID, err)
	}
	return out, nil
}
