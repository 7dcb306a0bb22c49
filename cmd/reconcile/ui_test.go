package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/reconcile/reconcile/internal/console"
)

// TestUIRefusesToStartWithoutAuthentication checks that `reconcile ui`
// exits 2, before touching a database, unless it has an authentication or
// is told, on a loopback address, to go without.
func TestUIRefusesToStartWithoutAuthentication(t *testing.T) {
	t.Parallel()
	md5 := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(md5, []byte("alice:$apr1$x$y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(t.TempDir(), "htpasswd")
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err := os.WriteFile(good, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ui"}, "no authentication"},
		{[]string{"ui", "--addr", ":8080", "--insecure-local"}, "loopback"},
		{[]string{"ui", "--addr", "0.0.0.0:8080", "--insecure-local"}, "loopback"},
		{[]string{"ui", "--auth-header", "X-Forwarded-User"}, "--trusted-proxies"},
		{[]string{"ui", "--auth-header", "X-Forwarded-User", "--trusted-proxies", "10.0.0.0/33"}, "CIDRs"},
		{[]string{"ui", "--users", md5}, md5 + ":1"},
		{[]string{"ui", "--users", good, "--insecure-local"}, "one of"},
		{[]string{"ui", "--users", good}, "no database configured"},
	} {
		var stdout, stderr bytes.Buffer
		// No database is configured: reaching the connection would fail
		// with another error.
		err := run(context.Background(), tc.args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("reconcile %s: error %v, want a usage error naming %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "localhost:0"} {
		if !console.LoopbackAddr(addr) {
			t.Errorf("loopback(%q) = false", addr)
		}
	}
}

// TestAuditGrantConsole makes a login role the console's with `reconcile
// audit grant --console` and checks it holds reconcile_console and not
// more: it may read the queue, not write a consumer's row.
func TestAuditGrantConsole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, stdout, _ := testEnv(t)
	e.global = globalFlags{logFormat: "json", logLevel: "error"}
	_, pool, err := e.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	role := "ui_grant_" + strings.ToLower(rand.Text())
	if _, err := pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.WithoutCancel(ctx), "DROP ROLE "+role) })
	if err := cmdAudit(ctx, e, []string{"grant", "--console", role}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "granted reconcile_console to "+role) {
		t.Errorf("stdout %q", stdout)
	}
	var console, auditor, queue, consumers bool
	if err := pool.QueryRow(ctx, `SELECT pg_has_role($1, 'reconcile_console', 'MEMBER'), pg_has_role($1, 'reconcile_auditor', 'MEMBER'),
		has_table_privilege($1, 'queue_messages', 'SELECT'), has_table_privilege($1, 'consumers', 'INSERT')`, role).
		Scan(&console, &auditor, &queue, &consumers); err != nil {
		t.Fatal(err)
	}
	if !console || !auditor || !queue || consumers {
		t.Errorf("after audit grant --console: console %v, auditor %v, reads the queue %v, writes consumers %v", console, auditor, queue, consumers)
	}
	err = cmdAudit(ctx, e, []string{"grant", "--console", "no_such_role_here"})
	if exitCode(err, io.Discard) != 2 || !strings.Contains(err.Error(), "no such role") {
		t.Errorf("grant to an unknown role: %v", err)
	}
}
