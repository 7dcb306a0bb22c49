package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// testClock is a clock a test moves by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// withClock replaces b's console by one on the same database whose clock
// is c.
func (b *testBundle) withClock(t *testing.T, auth Auth, c *testClock) {
	t.Helper()
	h := newHandler(t, Config{Pool: b.pool, Auth: auth, Queue: b.q, Now: c.Now})
	b.h = h
}

// loginFrom posts a login from remote (host:port) and returns the answer.
func (b *testBundle) loginFrom(t *testing.T, remote, user, password string) *httptest.ResponseRecorder {
	t.Helper()
	form := url.Values{"user": {user}, "password": {password}, "next": {"/"}}
	r := httptest.NewRequest("POST", "http://console.test/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", formContentType)
	r.Header.Set("Origin", "http://console.test")
	r.RemoteAddr = remote
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	return w
}

// TestLoginBacksOffPerUserAndPerAddress guesses alice's password 100 times,
// then gives the right one: the first five guesses are checked, the rest
// and the right password are refused unchecked until the backoff has
// passed. Twenty guesses at other names from one address hold back that
// address, not another.
func TestLoginBacksOffPerUserAndPerAddress(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	clock := &testClock{t: t0}
	b.withClock(t, htpasswd(t), clock)
	const guesser = "203.0.113.5:4000"
	codes := map[int]int{}
	for range 100 {
		codes[b.loginFrom(t, guesser, "alice", "guess").Code]++
	}
	if codes[http.StatusUnauthorized] != userBackoff.free || codes[http.StatusTooManyRequests] != 100-userBackoff.free {
		t.Fatalf("100 wrong passwords: %v, want %d checked (401) and the rest refused (429)", codes, userBackoff.free)
	}
	w := b.loginFrom(t, guesser, "alice", "alice-pw")
	wantStatus(t, w, http.StatusTooManyRequests, "the right password right after 100 wrong ones")
	if w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "try again in 1 s") {
		t.Errorf("refusal: Retry-After %q, body:\n%s", w.Header().Get("Retry-After"), w.Body)
	}
	wantStatus(t, b.loginFrom(t, "198.51.100.9:1", "alice", "alice-pw"), http.StatusTooManyRequests,
		"alice's right password from another address")

	// Each further failure doubles the wait.
	clock.Add(time.Second)
	wantStatus(t, b.loginFrom(t, guesser, "alice", "guess"), http.StatusUnauthorized, "a guess after the wait")
	w = b.loginFrom(t, guesser, "alice", "alice-pw")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" {
		t.Fatalf("after the sixth failure: %d, Retry-After %q; want 429 for 2 s", w.Code, w.Header().Get("Retry-After"))
	}
	clock.Add(2 * time.Second)
	wantStatus(t, b.loginFrom(t, guesser, "alice", "alice-pw"), http.StatusSeeOther, "the right password after the wait")
	wantStatus(t, b.loginFrom(t, guesser, "alice", "guess"), http.StatusUnauthorized, "a mistake after the login starts afresh")

	// One address, many names.
	const sprayer = "192.0.2.77:5000"
	for i := range addrBackoff.free {
		wantStatus(t, b.loginFrom(t, sprayer, "user"+strings.Repeat("x", i), "pw"), http.StatusUnauthorized, fmt.Sprint("spray ", i))
	}
	wantStatus(t, b.loginFrom(t, sprayer, "bob", "bob-pw"), http.StatusTooManyRequests, "bob from the spraying address")
	wantStatus(t, b.loginFrom(t, "192.0.2.78:5000", "bob", "bob-pw"), http.StatusSeeOther, "bob from another address")
	// An IPv6 client is one /64.
	for i := range addrBackoff.free {
		wantStatus(t, b.loginFrom(t, "[2001:db8::"+strings.Repeat("1", i%4+1)+"]:1", fmt.Sprint("nobody", i), "pw"), http.StatusUnauthorized, fmt.Sprint("spray6 ", i))
	}
	wantStatus(t, b.loginFrom(t, "[2001:db8::beef]:1", "bob", "bob-pw"), http.StatusTooManyRequests, "bob from the spraying /64")
	// A day later everything is forgotten.
	clock.Add(forgetFailures)
	wantStatus(t, b.loginFrom(t, sprayer, "bob", "bob-pw"), http.StatusSeeOther, "bob a day later")
}

// TestUnknownUsersCostWhatKnownOnesCost checks that the decoy hash compared
// for an unknown user is as dear as the file's: with a cheaper decoy the
// answer's time tells which names exist.
func TestUnknownUsersCostWhatKnownOnesCost(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	const cost = bcrypt.MinCost + 3
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), cost)
	if err != nil {
		t.Fatal(err)
	}
	cheap, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	h := newHandler(t, Config{Pool: b.pool, Auth: Auth{Users: map[string]string{"alice": string(hash), "bob": string(cheap)}}})
	if got, err := bcrypt.Cost(h.auth.decoy); err != nil || got != cost {
		t.Errorf("decoy hash cost %d (%v), want the file's highest, %d", got, err, cost)
	}
}

// TestSessionsAreRandomSharedAndRevoked logs in twice in the same second:
// two different sessions, each known to a second console on the same
// database (a replica, or the same console after a restart); a logout ends
// the session everywhere, so a copy of its cookie is refused.
func TestSessionsAreRandomSharedAndRevoked(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	clock := &testClock{t: t0}
	b.withClock(t, htpasswd(t), clock)
	first, second := b.login(t, "alice"), b.login(t, "alice")
	if first == second {
		t.Fatalf("two logins in one second got the same session %q", first)
	}
	replica := &testBundle{pool: b.pool, runID: b.runID, q: b.q}
	replica.withClock(t, htpasswd(t), clock)
	for _, c := range []string{first, second} {
		wantStatus(t, replica.do(t, "GET", "/", c, nil), http.StatusOK, "a session on the replica")
	}
	w := b.do(t, "POST", "/logout", first, url.Values{}, "Origin", "http://console.test")
	wantStatus(t, w, http.StatusSeeOther, "logout")
	for name, h := range map[string]*testBundle{"console": b, "replica": replica} {
		wantStatus(t, h.do(t, "GET", "/", first, nil), http.StatusSeeOther, "the logged-out cookie on the "+name)
		wantStatus(t, h.do(t, "GET", "/", second, nil), http.StatusOK, "the other session on the "+name)
	}
	clock.Add(12 * time.Hour)
	wantStatus(t, b.do(t, "GET", "/", second, nil), http.StatusSeeOther, "a session 12 hours later")
	var n int
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions WHERE user_name = 'alice'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d sessions of alice stored, want the one not logged out", n)
	}
	b.login(t, "bob") // a login deletes the expired sessions
	if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM console_sessions WHERE user_name = 'alice'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d expired sessions of alice kept after a login (%v)", n, err)
	}
}

// TestPasswordChecksWaitForASlot fills every password-check slot: a login
// waits instead of taking another core, and gives up with its request.
func TestPasswordChecksWaitForASlot(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	for range cap(b.h.auth.checks) {
		b.h.auth.checks <- struct{}{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	form := url.Values{"user": {"alice"}, "password": {"alice-pw"}}
	r := httptest.NewRequestWithContext(ctx, "POST", "http://console.test/login", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", formContentType)
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	wantStatus(t, w, http.StatusServiceUnavailable, "a login while every slot checks a password")
	<-b.h.auth.checks
	wantStatus(t, b.loginFrom(t, "192.0.2.1:1", "alice", "alice-pw"), http.StatusSeeOther, "a login with a free slot")
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		remote, xff string
		trusted     []netip.Prefix
		want        string
	}{
		{"192.0.2.1:1", "", nil, "192.0.2.1"},
		{"192.0.2.1:1", "198.51.100.1", nil, "192.0.2.1"}, // not through a trusted proxy: the header is the client's
		{"10.0.0.2:1", "198.51.100.1", proxies, "198.51.100.1"},
		{"10.0.0.2:1", "1.1.1.1, 198.51.100.1, 10.0.0.3", proxies, "198.51.100.1"}, // the client may have written 1.1.1.1
		{"10.0.0.2:1", "", proxies, "10.0.0.2"},
		{"10.0.0.2:1", "garbage", proxies, "10.0.0.2"},
		{"[::ffff:192.0.2.1]:1", "", nil, "192.0.2.1"},
	} {
		r := httptest.NewRequest("GET", "http://console.test/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if got := clientAddr(r, tc.trusted).String(); got != tc.want {
			t.Errorf("clientAddr(%s, XFF %q) = %s, want %s", tc.remote, tc.xff, got, tc.want)
		}
	}
}
