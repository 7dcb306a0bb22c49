package limiter

import (
	"context"

	"github.com/reconcile/reconcile/internal/pause"
)

// Wait blocks until a token is granted: after any penalty, at the shared
// effective rate. It returns ctx's error if ctx ends first, or a database
// error (the caller retries; nothing was granted).
//
// Each turn asks the local state what to do, with l.mu held, and carries out
// the answer without it: sleep until a reserved slot, sleep until the row
// allows a lease, wait for another caller's lease, or lease.
func (l *Shared) Wait(ctx context.Context) error {
	l.mu.Lock()
	l.waiters++
	defer func() {
		l.mu.Lock()
		l.waiters--
		l.mu.Unlock()
	}()
	for {
		now := l.cfg.Now()
		r := l.local.reserve(now, l.snap.EffectiveRate, l.fetching != nil)
		switch r.act {
		case actGrant:
			l.mu.Unlock()
			if err := pause.For(ctx, r.at.Sub(now)); err != nil {
				l.mu.Lock()
				l.local.cancel(r)
				l.mu.Unlock()
				return err
			}
			l.mu.Lock()
			if !l.local.commit(l.cfg.Now(), r) {
				continue // a penalty arrived while we slept: this slot is void
			}
			l.snap.Grants++
			l.mu.Unlock()
			return nil
		case actSleep:
			// Look again at least every PollInterval: the poll may bring
			// news from the row.
			d := min(r.at.Sub(now), l.cfg.PollInterval)
			l.mu.Unlock()
			if err := pause.For(ctx, d); err != nil {
				return err
			}
			l.mu.Lock()
		case actAwait:
			ch := l.fetching
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ch:
			}
			l.mu.Lock()
		case actLease:
			if err := l.fetch(ctx, now); err != nil {
				l.mu.Unlock()
				return err
			}
		}
	}
}
