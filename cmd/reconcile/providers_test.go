package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestConsumeBadProvidersFile checks that a bad providers file, or a
// variable it names that is not set, exits 2 before anything is claimed,
// naming the file, the line and the key, never a credential's value.
func TestConsumeBadProvidersFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _, _ := testEnv(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "night.csv")
	if err := os.WriteFile(src, []byte("transaction_id,account_id,amount_minor,currency,status,occurred_at,provider\n"+
		"tx1,acc,100,EUR,succeeded,2026-10-24T10:00:00Z,cards\ntx2,acc,100,EUR,succeeded,2026-10-24T10:00:00Z,\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmdEnqueue(ctx, e, []string{"--date", "2026-10-24", "--source", src, "--log-level", "error"}); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.json", `{"providers": {
  "cards": {"profile": "stripe", "url": "http://127.0.0.1:1", "token_env": "CARDS_KEY", "rate": 5}
}}`)
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown profile", write("unknown-profile.json", "{\"providers\": {\n  \"cards\": {\"profile\": \"strype\", \"token_env\": \"K\"}}}"), nil,
			`unknown-profile.json:2: providers.cards.profile: profile "strype": no built-in profile of that name`},
		{"negative rate", write("negative.json", "{\"providers\": {\"cards\": {\"profile\": \"stripe\", \"token_env\": \"K\",\n \"rate\": -1}}}"), nil,
			"negative.json:2: providers.cards.rate: -1: want a positive number of requests per second"},
		{"duplicate", write("duplicate.json", "{\"providers\": {\n\"cards\": {\"profile\": \"stripe\", \"token_env\": \"K\"},\n\"cards\": {\"profile\": \"stripe\", \"token_env\": \"K\"}}}"), nil,
			"duplicate.json:3: cards: duplicate key (first on line 2)"},
		{"unset variable", good, nil, "good.json:2: providers.cards.token_env: environment variable CARDS_KEY is not set"},
		{"not in the file", write("other.json", `{"providers": {"wallet": {"profile": "reconcile", "url": "http://127.0.0.1:1"}}}`), nil,
			"queued items name providers that are not in " + filepath.Join(dir, "other.json") + ": cards (1 items)"},
	} {
		env := *e
		env.getenv = func(k string) string {
			if v, ok := tc.env[k]; ok {
				return v
			}
			return e.getenv(k)
		}
		err := cmdConsume(ctx, &env, []string{"--providers", tc.file, "--log-level", "error", "--until-done"})
		var msg bytes.Buffer
		if code := exitCode(err, &msg); code != 2 || !strings.Contains(msg.String(), tc.want) {
			t.Errorf("%s: exit %d: %s\nwant %q", tc.name, code, msg.String(), tc.want)
		}
	}
	// Nothing was claimed or called.
	conn, err := pgx.Connect(ctx, e.getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var claimed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM queue_messages WHERE deliveries > 0 OR state <> 'ready'`).Scan(&claimed); err != nil || claimed != 0 {
		t.Errorf("%d messages claimed (%v), want none", claimed, err)
	}
	// The variable is named, its value never printed.
	env := *e
	env.getenv = func(k string) string {
		if k == "CARDS_KEY" {
			return "sk_live_secret_123"
		}
		return e.getenv(k)
	}
	err = cmdConsume(ctx, &env, []string{"--providers", good, "--log-level", "error", "--rate", "5"})
	var msg bytes.Buffer
	if code := exitCode(err, &msg); code != 2 || strings.Contains(msg.String(), "sk_live_secret_123") || !strings.Contains(msg.String(), "--rate") {
		t.Errorf("--providers with --rate: exit %d: %s", code, msg.String())
	}
}
