// Package pause waits for a duration unless a context ends first: the one
// sleep of the loops that retry, poll and pace.
package pause

import (
	"context"
	"time"
)

// For waits d or until ctx ends, whichever comes first, and returns ctx's
// error in the second case. A d of zero or less returns at once, with ctx's
// error if it has ended already.
func For(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
