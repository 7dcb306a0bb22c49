package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/reconcile/reconcile/internal/provider"
	"github.com/reconcile/reconcile/internal/providersim"
)

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestSecretsNeverLeak runs the commands with a database password and a
// provider token that look like secrets, at debug level in both log formats,
// on the success path, with a wrong token (403) and with an unreachable
// database, and searches everything they printed for either secret.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	password := "Pg-Secret-" + randomHex(12)
	token := "tok_live_" + randomHex(16)
	wrongToken := "tok_live_" + randomHex(16)
	secrets := []string{password, token, wrongToken}

	dy := newDay(t, "2026-10-24", 40, 3)
	dy2 := newDay(t, "2026-10-25", 40, 4)
	recs := append(dy.records(), dy2.records()...)
	prov := startProvider(t, providersim.Config{Records: recs, Seed: 5, Token: provider.Secret(token),
		Shares: providersim.Shares{Mismatch: 0.1, Missing: 0.1, BadRequest: 0.05, Transient: 0.1}}, nil)
	w := newWorld(t, prov)

	// A login role with the password. The test server trusts local
	// connections, so the password is never checked, but it is in every
	// connection string the commands see: what could leak.
	role := "e2e_secret_" + randomHex(4)
	ctx := context.Background()
	if _, err := w.pool.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN SUPERUSER PASSWORD '%s'", role, password)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = w.pool.Exec(context.WithoutCancel(ctx), "DROP ROLE IF EXISTS "+role) })
	cfg, err := pgx.ParseConfig(w.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword(role, password), Path: "/" + cfg.Database}
	q := url.Values{"sslmode": {"disable"}}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		q.Set("port", strconv.Itoa(int(cfg.Port)))
	} else {
		u.Host = cfg.Host + ":" + strconv.Itoa(int(cfg.Port))
	}
	u.RawQuery = q.Encode()
	w.dbURL = u.String()
	w.extraEnv = []string{"RECONCILE_PROVIDER_TOKEN=" + token}
	names := subcommands(t, w)

	var outputs []result
	run := func(env []string, wantCode int, args ...string) result {
		t.Helper()
		res := w.run(t, env, args...)
		outputs = append(outputs, res)
		if res.code != wantCode {
			t.Errorf("want exit %d:\n%s", wantCode, res)
		}
		return res
	}
	withToken := func(tok string) []string {
		return append(slices.DeleteFunc(w.env(), func(kv string) bool { return strings.HasPrefix(kv, "RECONCILE_PROVIDER_TOKEN=") }),
			"RECONCILE_PROVIDER_TOKEN="+tok)
	}

	for i, format := range []string{"text", "json"} {
		d := []*day{dy, dy2}[i]
		g := []string{"--log-level", "debug", "--log-format", format}
		run(nil, 0, append([]string{"migrate"}, g...)...)
		run(nil, 0, append([]string{"enqueue", "--date", d.date, "--source", d.path}, g...)...)
		// A wrong token: 403, every message stays queued, exit 1.
		res := run(withToken(wrongToken), 1, append([]string{"consume", "--until-done", "--backoff-base", "10ms", "--backoff-cap", "50ms"}, g...)...)
		if !strings.Contains(res.stderr, "403") {
			t.Errorf("a refused token should be reported with its status:\n%s", res)
		}
		run(nil, 0, append([]string{"consume", "--until-done", "--backoff-base", "10ms", "--backoff-cap", "50ms"}, g...)...)
		run(nil, 0, append([]string{"stats"}, g...)...)
		run(nil, 0, append([]string{"stats", "--json"}, g...)...)
		run(nil, 0, append([]string{"dlq", "list"}, g...)...)
		run(nil, 0, append([]string{"dlq", "list", "--json"}, g...)...)
		run(nil, 0, append([]string{"limit", "show"}, g...)...)
		run(nil, 0, append([]string{"limit", "show", "--json"}, g...)...)
		run(nil, 0, append([]string{"audit", "verify"}, g...)...)
		run(nil, 0, append([]string{"audit", "verify", "--json"}, g...)...)
		if slices.Contains(names, "status") {
			run(nil, 0, append([]string{"status"}, g...)...)
			run(nil, 0, append([]string{"status", "--date", d.date}, g...)...)
		}
		if slices.Contains(names, "report") {
			run(nil, 0, append([]string{"report", "--date", d.date}, g...)...)
		}

		// Unreachable (exit 1) or unparsable (bad input, exit 2) databases
		// whose URL carries the password.
		for bad, code := range map[string]int{
			"postgres://" + role + ":" + password + "@127.0.0.1:1/reconcile?connect_timeout=5":                     1,
			"postgres://" + role + ":" + password + "@127.0.0.1:notaport/reconcile":                                2,
			"host=127.0.0.1 port=1 user=" + role + " password=" + password + " dbname=reconcile connect_timeout=5": 1,
			"host=127.0.0.1 port=1 user=" + role + " password='" + password + "' dbname=reconcile sslmode=bogus":   2,
			role + ":" + password + "@127.0.0.1/reconcile":                                                         2,
		} {
			env := append(w.env(), "DATABASE_URL="+bad)
			for _, args := range [][]string{{"migrate"}, {"stats"}, {"consume", "--until-done"}, {"audit", "verify"}} {
				res := w.run(t, env, append(args, g...)...)
				outputs = append(outputs, res)
				if res.code != code {
					t.Errorf("want exit %d for an unusable database:\n%s", code, res)
				}
			}
		}
	}

	// The provider saw the token: the test would be vacuous otherwise.
	if st := prov.sim.Stats(); st.ByStatus[403] == 0 || st.ByStatus[200] == 0 {
		t.Fatalf("the simulator should have answered both 403 and 200: %v", st.ByStatus)
	}
	for _, res := range outputs {
		for _, s := range secrets {
			for _, form := range []string{s, url.QueryEscape(s)} {
				if strings.Contains(res.stdout, form) || strings.Contains(res.stderr, form) {
					t.Errorf("secret %q leaked by reconcile %s:\n%s", s[:8]+"…", strings.Join(res.args, " "), res)
				}
			}
		}
	}
	t.Logf("searched %d command outputs (%d bytes) for the password and both tokens", len(outputs), func() int {
		n := 0
		for _, r := range outputs {
			n += len(r.stdout) + len(r.stderr)
		}
		return n
	}())
}
