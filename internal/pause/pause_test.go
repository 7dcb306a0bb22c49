package pause

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestForReturnsWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- For(ctx, time.Hour) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("For = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("For did not return after its context was cancelled")
	}
}

func TestForWaitsTheDuration(t *testing.T) {
	t.Parallel()
	start := time.Now()
	if err := For(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatalf("For = %v", err)
	}
	if elapsed := time.Since(start); elapsed < 20*time.Millisecond {
		t.Fatalf("For returned after %v, before its 20ms", elapsed)
	}
}

func TestForWithoutDuration(t *testing.T) {
	t.Parallel()
	if err := For(context.Background(), 0); err != nil {
		t.Fatalf("For(0) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := For(ctx, -time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("For(-1s) on an ended context = %v, want context.Canceled", err)
	}
}
