package consume_test

import (
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/consume"
	"github.com/reconcile/reconcile/internal/decision"
	"github.com/reconcile/reconcile/internal/queue"
)

// TestNewValidatesTheConfig checks that New rejects a config that cannot
// work, naming the field, and accepts the defaults and the edge cases.
func TestNewValidatesTheConfig(t *testing.T) {
	t.Parallel()
	q := queue.New(nil, queue.Config{Visibility: 30 * time.Second})
	tests := []struct {
		name    string
		cfg     consume.Config
		wantErr string // empty: accepted
	}{
		{name: "defaults"},
		{name: "renewal off", cfg: consume.Config{LeaseRenewal: -1}},
		{name: "renewal just under the visibility", cfg: consume.Config{LeaseRenewal: 30*time.Second - 1}},
		{name: "renewal as long as the visibility", cfg: consume.Config{LeaseRenewal: 30 * time.Second},
			wantErr: "consume: LeaseRenewal 30s: want shorter than the queue's visibility timeout 30s"},
		{name: "renewal longer than the visibility", cfg: consume.Config{LeaseRenewal: time.Minute},
			wantErr: "consume: LeaseRenewal 1m0s"},
		{name: "negative concurrency", cfg: consume.Config{Concurrency: -1}, wantErr: "consume: Concurrency -1"},
		{name: "negative record batch", cfg: consume.Config{RecordBatch: -2}, wantErr: "consume: RecordBatch -2"},
		{name: "negative idle wait", cfg: consume.Config{IdleWait: -time.Second}, wantErr: "consume: IdleWait -1s"},
		{name: "bad policy", cfg: consume.Config{Policy: decision.Policy{MaxAttempts: -1}}, wantErr: "policy: MaxAttempts -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := consume.New(nil, q, nil, nil, tt.cfg)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New: %v, want no error", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("New: no error, want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.HasPrefix(err.Error(), tt.wantErr):
				t.Fatalf("New: %v, want %q", err, tt.wantErr)
			}
		})
	}
}
