//go:build !e2e

package e2e

import (
	"testing"
	"time"
)

// TestCrash is the light crash scenario: a 500-item day with three SIGKILLs
// of its consumers, then every invariant. The full suite (-tags e2e) runs
// 5,000 items and ten kills.
func TestCrash(t *testing.T) {
	t.Parallel()
	crashScenario(t, crashConfig{items: 500, kills: 3, consumers: 2, rate: 80,
		minGap: 500 * time.Millisecond, maxGap: 1200 * time.Millisecond})
}
