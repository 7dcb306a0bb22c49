package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/dbconn"
	"github.com/reconcile/reconcile/internal/pause"
)

// Listener lets an idle consumer sleep until there may be work: it holds a
// connection that LISTENs on Channel, and knows from the table when the next
// delayed retry or expiring lease becomes due (those make no notification).
//
// LISTEN needs a session. The connection is Config.ListenURL's when set;
// otherwise it is taken out of the pool, unless the pool reaches the server
// through a connection pooler (see dbconn.ThroughPooler): then the Listener
// does not listen and Wait polls, sleeping until the next message is due or
// maxWait has passed, which the queue says once at info.
//
// A Listener is not safe for concurrent use; give each waiting goroutine its
// own.
type Listener struct {
	q    *Queue
	conn *pgx.Conn // nil after a connection failure, until the next Wait reconnects
	// poll is set when the pool goes through a pooler and there is no
	// ListenURL: Wait polls through the pool.
	poll bool
	// blocked, when set by a test, is called just before Wait blocks on the
	// connection.
	blocked func()
}

// Listen returns a Listener. Close it when done.
func (q *Queue) Listen(ctx context.Context) (*Listener, error) {
	l := &Listener{q: q}
	if err := l.connect(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Polls reports whether the Listener polls instead of listening (the pool
// goes through a pooler and Config.ListenURL is not set).
func (l *Listener) Polls() bool { return l.poll }

// Kinds of listener failure, the messages of their throttled log lines.
const (
	warnUnavailable = "queue listener unavailable; polling"
)

func (l *Listener) connect(ctx context.Context) error {
	conn, err := l.open(ctx)
	if err != nil || conn == nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return fmt.Errorf("listen on %s: %w", Channel, err)
	}
	l.conn = conn
	return nil
}

// open returns the connection to LISTEN on, or nil (and sets l.poll) when
// the Listener is to poll.
func (l *Listener) open(ctx context.Context) (*pgx.Conn, error) {
	if url := l.q.cfg.ListenURL; url != "" {
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			// pgx's parse errors may quote the input; never echo it.
			return nil, fmt.Errorf("parse listen URL %s: invalid connection string", dbconn.Redact(url))
		}
		if _, ok := cfg.RuntimeParams["application_name"]; !ok {
			cfg.RuntimeParams["application_name"] = "reconcile-listener"
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("connect listener to %s@%s:%d/%s: %w", cfg.User, cfg.Host, cfg.Port, cfg.Database, err)
		}
		return conn, nil
	}
	pc, err := l.q.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire listener connection: %w", err)
	}
	// The connection leaves the pool for good, so no other user ever sees
	// its notifications.
	conn := pc.Hijack()
	pooled, err := dbconn.ThroughPooler(ctx, conn)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("check listener connection: %w", err)
	}
	if !pooled {
		return conn, nil
	}
	_ = conn.Close(context.WithoutCancel(ctx))
	l.poll = true
	l.q.pollOnce.Do(func() {
		l.q.cfg.Logger.Info("the database is reached through a connection pooler, which cannot keep a LISTEN: idle consumers poll the queue; " +
			"give the listener a direct connection (--listen-url or RECONCILE_LISTEN_URL) to wake them at once")
	})
	return nil, nil
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
// it logs the problem (a line per 30 s at most, with a count), sleeps maxWait
// (polling as the fallback) and reconnects on the next call; the first
// success after failures is logged at info.
func (l *Listener) Wait(ctx context.Context, maxWait time.Duration) error {
	deadline := time.Now().Add(maxWait)
	if l.poll {
		return l.pollWait(ctx, deadline)
	}
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
		if l.poll {
			return l.pollWait(ctx, deadline)
		}
	}
	for {
		due, err := l.nextDue(ctx, l.conn)
		if err != nil {
			return l.fallback(ctx, deadline, err)
		}
		l.q.warn.OK(warnUnavailable, "queue listener back")
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

// pollWait sleeps until the next message is due or deadline, whichever
// comes first, reading the due time through the pool.
func (l *Listener) pollWait(ctx context.Context, deadline time.Time) error {
	due, err := l.nextDue(ctx, l.q.pool)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.q.warn.Fail(warnUnavailable, err, "poll_interval", time.Until(deadline).Round(time.Millisecond))
		return pause.For(ctx, time.Until(deadline))
	}
	l.q.warn.OK(warnUnavailable, "queue listener back")
	wake := deadline
	if next := time.Now().Add(due); next.Before(wake) {
		wake = next
	}
	return pause.For(ctx, time.Until(wake))
}

// nextDue returns how long until the earliest ready message becomes
// claimable (zero or less when one is claimable now), or an hour when there
// is none.
func (l *Listener) nextDue(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (time.Duration, error) {
	var micros *int64
	err := db.QueryRow(ctx, `
SELECT (extract(epoch FROM min(visible_at) - coalesce($1::timestamptz, now())) * 1000000)::bigint
  FROM queue_messages WHERE state = 'ready'`, l.q.now()).Scan(&micros)
	if err != nil {
		return 0, fmt.Errorf("read next due time: %w", dbconn.ElideValues(err))
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
	l.q.warn.Fail(warnUnavailable, dbconn.ElideValues(err), "poll_interval", time.Until(deadline).Round(time.Millisecond))
	return pause.For(ctx, time.Until(deadline))
}
