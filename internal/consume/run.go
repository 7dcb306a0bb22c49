package consume

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Run consumes until ctx ends, until every run is complete (UntilDone), or
// until a fatal error such as ErrProviderAuth, and then shuts down in this
// order:
//
//  1. claiming stops: every claimer returns and closes its lane's jobs, and
//     no worker starts another message;
//  2. the calls in flight finish within Config.Grace; a call still running
//     then is cut short, and it and every claimed message not started are
//     handed back to the queue;
//  3. the recorder records every outcome the workers handed it;
//  4. Run returns nil (ctx ended, or every run is complete), the fatal
//     error, or the first claimer's failure.
func (c *Consumer) Run(ctx context.Context) error {
	lc := c.newLifecycle(ctx)
	defer lc.end()
	rec := c.startRecorder(lc.recordCtx)
	workers := c.startWorkers(lc, rec)
	claimErr := c.claimAll(lc)
	c.signals.stage.send(stageClaimingStopped)
	workers.Wait()
	c.signals.stage.send(stageWorkersDone)
	rec.flush()
	c.signals.stage.send(stageRecorderFlushed)
	if lc.fatal != nil {
		return lc.fatal
	}
	return claimErr
}

// minJobBuffer is the smallest buffer between a claimer and its workers:
// fast workers empty a small buffer before the next claim commits.
const minJobBuffer = 64

// startWorkers opens each lane's job buffer and starts Concurrency workers
// per lane. The call slots are shared by every lane, and taken only once a
// call may start.
func (c *Consumer) startWorkers(lc *lifecycle, rec *recorder) *sync.WaitGroup {
	slots := make(chan struct{}, c.cfg.Concurrency)
	var wg sync.WaitGroup
	for _, l := range c.lanes {
		// The buffer holds a second batch while the workers run the first,
		// so the claimer fetches full batches instead of one message per
		// freed slot (two queries and a commit each).
		l.jobs = make(chan job, max(2*c.cfg.Concurrency, minJobBuffer))
		l.taken = make(chan struct{}, 1)
		l.runDone = make(chan struct{}, 1)
		for range c.cfg.Concurrency {
			wg.Go(func() { c.work(lc, rec, l, slots) })
		}
	}
	return &wg
}

// claimAll runs one claimer per lane until claiming stops and returns the
// first claimer's failure. A claimer that finds every run complete, or
// fails, stops the others.
func (c *Consumer) claimAll(lc *lifecycle) error {
	var g errgroup.Group
	for _, l := range c.lanes {
		g.Go(func() error {
			defer close(l.jobs)
			err := c.claimLoop(lc.claimCtx, l)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			lc.stopClaiming()
			return err
		})
	}
	err := g.Wait()
	lc.stopClaiming()
	return err
}

// A lifecycle holds the contexts of one Run, each ended at its stage of the
// shutdown (see Run), and what ends them on time.
type lifecycle struct {
	// claimCtx ends when claiming stops: Run's context ended, every run is
	// complete, or consuming failed. It also bounds the waits before a
	// call (a token, a call slot).
	claimCtx     context.Context
	stopClaiming context.CancelFunc
	// callCtx carries the provider calls and the renewal of their leases;
	// it ends Config.Grace after claiming stopped.
	callCtx  context.Context
	endCalls context.CancelFunc
	// recordCtx carries the recording and the hand-backs. It ends the
	// queue's visibility timeout after callCtx: by then every lease this
	// process held has run out, and a result recorded later would be
	// refused as stale.
	recordCtx    context.Context
	endRecording context.CancelFunc

	done chan struct{}  // closed by end
	wg   sync.WaitGroup // the stage timer and the heartbeat
	once sync.Once
	// fatal is the error that stopped consuming, set by fail; read it once
	// the workers are done.
	fatal error
}

// newLifecycle starts the lifecycle of a Run whose context is ctx: the
// heartbeat, which lasts as long as claiming, and the timer of the stages
// after claiming.
func (c *Consumer) newLifecycle(ctx context.Context) *lifecycle {
	lc := &lifecycle{done: make(chan struct{})}
	lc.claimCtx, lc.stopClaiming = context.WithCancel(ctx)
	// Calls and recording outlive ctx, each until its stage ends.
	lc.callCtx, lc.endCalls = context.WithCancel(context.WithoutCancel(ctx))
	lc.recordCtx, lc.endRecording = context.WithCancel(context.WithoutCancel(ctx))
	lc.wg.Go(func() { c.heartbeat(lc.claimCtx) })
	lc.wg.Go(func() {
		<-lc.claimCtx.Done()
		for _, stage := range []struct {
			after time.Duration
			end   context.CancelFunc
		}{{c.cfg.Grace, lc.endCalls}, {c.queue.Visibility(), lc.endRecording}} {
			select {
			case <-c.after(stage.after):
				stage.end()
			case <-lc.done:
				return
			}
		}
	})
	return lc
}

// fail stops claiming because consuming cannot go on; the first err is the
// one Run returns.
func (lc *lifecycle) fail(err error) {
	lc.once.Do(func() { lc.fatal = err })
	lc.stopClaiming()
}

// end ends every stage and waits for the lifecycle's goroutines.
func (lc *lifecycle) end() {
	lc.stopClaiming()
	close(lc.done)
	lc.wg.Wait()
	lc.endCalls()
	lc.endRecording()
}

// runSignals tell a test where Run is. Every channel is nil outside tests,
// where sending is a no-op; a signal that finds its channel full is
// dropped.
type runSignals struct {
	// stage receives the stages of the shutdown in the order they are
	// reached.
	stage signal[string]
	// settled receives each delivery a worker settles.
	settled signal[settledSignal]
}

// The stages of a shutdown, as runSignals.stage reports them.
const (
	stageClaimingStopped = "claiming stopped"
	stageWorkersDone     = "workers done"
	stageRecorderFlushed = "recorder flushed"
)

// settledSignal says that a worker settled a delivery.
type settledSignal struct {
	transactionID string
	fate          fate
}

// A signal is a channel a test may wait on.
type signal[T any] chan T

// send sends v without blocking.
func (s signal[T]) send(v T) {
	select {
	case s <- v:
	default:
	}
}
