package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/pause"
)

// Listener lets an idle consumer sleep until there may be work: it holds a
// connection that LISTENs on Channel, and knows from the table when the next
// delayed retry or expiring lease becomes due (those make no notification).
// A Listener is not safe for concurrent use; give each waiting goroutine its
// own.
type Listener struct {
	q    *Queue
	conn *pgx.Conn // nil after a connection failure, until the next Wait reconnects
	// blocked, when set by a test, is called just before Wait blocks on the
	// connection.
	blocked func()
}

// Listen returns a Listener with its own connection taken out of the pool.
// Close it when done.
func (q *Queue) Listen(ctx context.Context) (*Listener, error) {
	l := &Listener{q: q}
	if err := l.connect(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Listener) connect(ctx context.Context) error {
	pc, err := l.q.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire listener connection: %w", err)
	}
	// The connection leaves the pool for good, so no other user ever sees
	// its notifications.
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("listen on %s: %w", Channel, err)
	}
	l.conn = conn
	return nil
}

func (l *Listener) drop(ctx context.Context) {
	if l.conn != nil {
		_ = l.conn.Close(context.WithoutCancel(ctx))
		l.conn = nil
	}
}

// Close releases the listener's connection.
func (l *Listener) Close(ctx context.Context) {
	l.drop(ctx)
}

// Wait returns when there may be messages to claim: at once if some are
// available now, on a notification that made some available, when the next
// delayed retry or expired lease becomes due, or after maxWait at the latest.
// It returns an error only when ctx ends. When the database cannot be reached
// it logs the problem, sleeps maxWait (polling as the fallback) and
// reconnects on the next call.
func (l *Listener) Wait(ctx context.Context, maxWait time.Duration) error {
	deadline := time.Now().Add(maxWait)
	if l.conn != nil && l.conn.IsClosed() {
		// An earlier Wait whose context ended mid-query left the connection
		// closed (pgx closes it on cancellation): that is no outage, so
		// reconnect without a warning.
		l.conn = nil
	}
	if l.conn == nil {
		if err := l.connect(ctx); err != nil {
			return l.fallback(ctx, deadline, err)
		}
	}
	for {
		due, err := l.nextDue(ctx)
		if err != nil {
			return l.fallback(ctx, deadline, err)
		}
		if due <= 0 {
			return nil
		}
		wake := deadline
		if next := time.Now().Add(due); next.Before(wake) {
			wake = next
		}
		if !time.Now().Before(wake) {
			return nil
		}
		wctx, cancel := context.WithDeadline(ctx, wake)
		if l.blocked != nil {
			l.blocked()
		}
		_, err = l.conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			// Something changed: see whether it made a message available.
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.DeadlineExceeded) || wctx.Err() != nil:
			return nil
		default:
			return l.fallback(ctx, deadline, err)
		}
	}
}

// nextDue returns how long until the earliest ready message becomes
// claimable (zero or less when one is claimable now), or an hour when there
// is none.
func (l *Listener) nextDue(ctx context.Context) (time.Duration, error) {
	var micros *int64
	err := l.conn.QueryRow(ctx, `
SELECT (extract(epoch FROM min(visible_at) - coalesce($1::timestamptz, now())) * 1000000)::bigint
  FROM queue_messages WHERE state = 'ready'`, l.q.now()).Scan(&micros)
	if err != nil {
		return 0, fmt.Errorf("read next due time: %w", err)
	}
	if micros == nil {
		return time.Hour, nil
	}
	return time.Duration(*micros) * time.Microsecond, nil
}

// fallback drops the broken connection and sleeps until deadline. When ctx
// has ended the failure is the cancellation's doing: it returns quietly.
func (l *Listener) fallback(ctx context.Context, deadline time.Time, err error) error {
	if ctx.Err() != nil {
		if l.conn != nil && l.conn.IsClosed() {
			l.conn = nil
		}
		return ctx.Err()
	}
	l.drop(ctx)
	l.q.cfg.Logger.Warn("queue listener unavailable; polling", "err", err, "poll_interval", time.Until(deadline).Round(time.Millisecond))
	return pause.For(ctx, time.Until(deadline))
}
