package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLogsWriteDurationsAsStrings: both log formats write a duration as a
// Go duration string, not JSON's integer nanoseconds.
func TestLogsWriteDurationsAsStrings(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "text"} {
		var stderr bytes.Buffer
		e := &env{stderr: &stderr, global: globalFlags{logFormat: format, logLevel: "info"}}
		logger, err := e.logger()
		if err != nil {
			t.Fatal(err)
		}
		logger.Info("done", "elapsed", 24498*time.Millisecond, slog.Group("phase", "took", 150*time.Millisecond))
		out := stderr.String()
		if !strings.Contains(out, "24.498s") || !strings.Contains(out, "150ms") || strings.Contains(out, "24498000000") {
			t.Errorf("%s log: %s", format, out)
		}
	}
}
