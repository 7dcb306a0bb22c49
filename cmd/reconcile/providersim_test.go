package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestProviderSimCommand(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stderr lockedBuffer
	e := &env{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr}
	done := make(chan error, 1)
	go func() {
		done <- cmdProviderSim(ctx, e, []string{"--addr", "127.0.0.1:0", "--source", "../../testdata/payments-2026-10-24.csv",
			"--limit", "1000", "--burst", "5", "--token", "T0ken", "--log-format", "json"})
	}()

	// Wait for the address in the log.
	var url string
	deadline := time.Now().Add(10 * time.Second)
	for url == "" {
		select {
		case err := <-done:
			t.Fatalf("provider-sim ended early: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider-sim did not log its address:\n%s", stderr.String())
		}
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct {
				Msg, URL      string
				Records       int
				TokenRequired bool `json:"token_required"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "provider simulator listening" {
				if line.Records != 3000 || !line.TokenRequired {
					t.Errorf("listening line: %s", sc.Text())
				}
				url = line.URL
			}
		}
		time.Sleep(10 * time.Millisecond) // polling the log for a condition, not waiting for time
	}
	if strings.Contains(stderr.String(), "T0ken") {
		t.Error("the token appears in the log")
	}

	c, err := provider.New(provider.Config{BaseURL: url, Token: "T0ken"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(t.Context(), provider.Lookup{TransactionID: "tx_20261024_0000001", IdempotencyKey: "k"})
	if err != nil || r.Status != 200 || r.Record != (provider.Record{ID: "tx_20261024_0000001", AmountMinor: 25000, Currency: "SEK", Status: "succeeded"}) {
		t.Errorf("lookup: %d %+v, %v", r.Status, r.Record, err)
	}
	resp, err := http.Get(url + "/v1/transactions/tx_20261024_0000001")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without a token: %d", resp.StatusCode)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("provider-sim: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("provider-sim did not stop")
	}
}

func TestProviderSimBadInput(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--limit", "fast"},
		{"--source", "../../testdata/does-not-exist.csv"},
		{"--source", "../../testdata/bad/duplicate-id.csv"},
		{"--mismatch", "0.7", "--missing", "0.7"},
		{"extra"},
	} {
		e := &env{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
		err := cmdProviderSim(t.Context(), e, append([]string{"--addr", "127.0.0.1:0"}, args...))
		if !errors.Is(err, errUsage) {
			t.Errorf("provider-sim %v: %v, want a usage error", args, err)
		}
	}
	if _, err := os.Stat("../../testdata/bad/duplicate-id.csv"); err != nil {
		t.Fatalf("fixture missing: %v", err)
	}
}
