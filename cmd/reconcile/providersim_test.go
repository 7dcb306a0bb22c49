package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
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
		{"--algorithm", "gcra"},
		{"--algorithm", "sliding-log"},
		{"--algorithm", "token-bucket", "--window", "1s"},
		{"--retry-after", "later"},
		{"--retry-after-min", "-1s"},
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

// TestSimRecordsKindsAndAccounts: provider-sim --profile stripe serves a
// file's refunds and disputes at their own endpoints (the kind column, else
// Stripe's id prefixes) and a connected account's rows only to its
// Stripe-Account; a game's own account ids are no connected accounts.
func TestSimRecordsKindsAndAccounts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "night.csv")
	if err := os.WriteFile(path, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at,kind\n"+
		"pi_1,acct_1Nv0FGQ9RKHgCVdK,1500,ISK,succeeded,2026-10-24T10:00:00Z,\n"+
		"re_1,player_17,-500,EUR,succeeded,2026-10-24T10:00:00Z,\n"+
		"ch_9,player_17,-700,EUR,disputed,2026-10-24T10:00:00Z,dispute\n"+
		"pi_2,acct_000123,900,EUR,succeeded,2026-10-24T10:00:00Z,payment\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &env{getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard}
	var cfg providersim.Config
	if err := loadSimRecords(e, path, providersim.ShapeStripe, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Records) != 4 || !maps.Equal(cfg.Kinds, map[string]string{"re_1": "refund", "ch_9": "dispute"}) ||
		!maps.Equal(cfg.Accounts, map[string]string{"pi_1": "acct_1Nv0FGQ9RKHgCVdK"}) {
		t.Errorf("records %v, kinds %v, accounts %v", cfg.Records, cfg.Kinds, cfg.Accounts)
	}
}
