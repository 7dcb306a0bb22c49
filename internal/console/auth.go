package console

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/crypto/bcrypt"
)

// Role is what a user may do.
type Role int

// The roles. Every authenticated user is at least an Auditor.
const (
	// Auditor reads every page and acts on nothing.
	Auditor Role = iota + 1
	// Operator may also redrive, re-run, cancel and set limits.
	Operator
)

func (r Role) String() string {
	switch r {
	case Auditor:
		return "auditor"
	case Operator:
		return "operator"
	}
	return "none"
}

// User is the authenticated user of a request.
type User struct {
	Name string
	Role Role
}

// Actor is how the user is recorded in the ledger: name@console.
func (u User) Actor() string { return u.Name + "@console" }

// Auth says how users are authenticated. Exactly one of Users, Header or
// Local is set.
type Auth struct {
	// Users maps user names to bcrypt hashes (ParseHtpasswd reads them from
	// an htpasswd file): users log in with a form and get a session cookie.
	Users map[string]string
	// Header names the request header in which a trusted reverse proxy
	// passes the authenticated user name (X-Forwarded-User, say).
	Header string
	// TrustedProxies are the networks Header is believed from; requests
	// from elsewhere are refused. Required with Header. With Users, the
	// proxies (a TLS terminator) whose X-Forwarded-For names the client
	// whose failed logins are counted; defaults to none, the peer.
	TrustedProxies []netip.Prefix
	// Operators are the users who may act; everyone else is an auditor.
	Operators []string
	// Local trusts every request as the operator "local": only for a
	// console listening on a loopback address (the caller checks).
	Local bool
	// SessionTTL is how long a login lasts. Defaults to 12h.
	SessionTTL time.Duration
}

// Validate reports an incomplete or ambiguous configuration.
func (a Auth) Validate() error {
	modes := 0
	if a.Users != nil {
		modes++
	}
	if a.Header != "" {
		modes++
		if len(a.TrustedProxies) == 0 {
			return errors.New("auth: a user header needs trusted proxies")
		}
	}
	if a.Local {
		modes++
	}
	switch {
	case modes == 0:
		return errors.New("auth: no authentication configured (a users file, a trusted proxy header, or local)")
	case modes > 1:
		return errors.New("auth: give one of a users file, a trusted proxy header, or local")
	}
	for name, hash := range a.Users {
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return fmt.Errorf("auth: user %q: not a bcrypt hash: %w", name, err)
		}
	}
	return nil
}

// ParseHtpasswd reads an htpasswd file of bcrypt entries, as `htpasswd -B`
// writes them ("name:$2y$..."), naming file and line in its errors. Blank
// lines and lines starting with # are skipped; other hash schemes are
// refused rather than silently never matching.
func ParseHtpasswd(r io.Reader, file string) (map[string]string, error) {
	users := map[string]string{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		name, hash, ok := strings.Cut(text, ":")
		if !ok || name == "" {
			return nil, fmt.Errorf("%s:%d: want name:bcrypt-hash", file, line)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return nil, fmt.Errorf("%s:%d: user %q: not a bcrypt hash (create it with htpasswd -B)", file, line, name)
		}
		if _, dup := users[name]; dup {
			return nil, fmt.Errorf("%s:%d: user %q appears twice", file, line, name)
		}
		users[name] = hash
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s: no users", file)
	}
	return users, nil
}

// sessionCookie is the name of the login cookie.
const sessionCookie = "reconcile_console"

// authenticator implements Auth for requests.
type authenticator struct {
	cfg      Auth
	ops      map[string]bool
	sessions *sessions
	throttle *loginThrottle
	// decoy is compared against for unknown users, at the cost of the
	// file's dearest hash, so an unknown name costs what a known one does.
	decoy []byte
	// checks holds a slot per password check running: bcrypt at the
	// file's cost takes a core for tens of milliseconds, and the pages
	// must keep the rest.
	checks chan struct{}
}

func newAuthenticator(a Auth, pool *pgxpool.Pool, now func() time.Time) (*authenticator, error) {
	au := &authenticator{cfg: a, ops: map[string]bool{},
		sessions: &sessions{pool: pool, ttl: cmp.Or(a.SessionTTL, 12*time.Hour), now: now},
		throttle: &loginThrottle{pool: pool, now: now},
		checks:   make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
	for _, o := range a.Operators {
		au.ops[o] = true
	}
	if a.Users != nil {
		decoy, err := bcrypt.GenerateFromPassword([]byte(rand.Text()), htpasswdCost(a.Users))
		if err != nil {
			return nil, err
		}
		au.decoy = decoy
	}
	return au, nil
}

// htpasswdCost is the highest bcrypt cost among users' hashes.
func htpasswdCost(users map[string]string) int {
	c := bcrypt.MinCost
	for _, hash := range users {
		if n, err := bcrypt.Cost([]byte(hash)); err == nil {
			c = max(c, n)
		}
	}
	return c
}

func (a *authenticator) user(name string) User {
	if a.ops[name] || a.cfg.Local {
		return User{Name: name, Role: Operator}
	}
	return User{Name: name, Role: Auditor}
}

// errUnauthenticated means the request carries no valid identity.
var errUnauthenticated = errors.New("not logged in")

// authenticate returns the request's user, errUnauthenticated, or an
// *httpError for a request that must be refused outright.
func (a *authenticator) authenticate(r *http.Request) (User, error) {
	switch {
	case a.cfg.Local:
		return a.user("local"), nil
	case a.cfg.Header != "":
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !slices.ContainsFunc(a.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(ip.Unmap()) }) {
			return User{}, &httpError{code: http.StatusForbidden, msg: "requests are accepted only through the trusted proxy"}
		}
		values := r.Header.Values(a.cfg.Header)
		if len(values) > 1 {
			// Two copies mean the proxy did not replace what the client
			// sent; taking either would trust the client.
			return User{}, &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf("the request carries %d %s headers; the proxy must send exactly one", len(values), a.cfg.Header)}
		}
		name := ""
		if len(values) == 1 {
			name = strings.TrimSpace(values[0])
		}
		if name == "" {
			return User{}, &httpError{code: http.StatusUnauthorized, msg: "the proxy sent no user (" + a.cfg.Header + ")"}
		}
		return a.user(name), nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return User{}, errUnauthenticated
	}
	name, ok, err := a.sessions.user(r.Context(), c.Value)
	if err != nil {
		return User{}, err
	}
	if _, known := a.cfg.Users[name]; !ok || !known {
		return User{}, errUnauthenticated
	}
	return a.user(name), nil
}

// errBusy means no password check could start within checkWait.
var errBusy = &httpError{code: http.StatusServiceUnavailable, msg: "too many logins at once; try again in a few seconds"}

// checkWait is how long a login waits for a free password check slot.
const checkWait = 10 * time.Second

// checkPassword compares in the same work whether or not the user exists,
// one check per slot of a.checks at a time.
func (a *authenticator) checkPassword(ctx context.Context, name, password string) (bool, error) {
	wait := time.NewTimer(checkWait)
	defer wait.Stop()
	select {
	case a.checks <- struct{}{}:
	case <-wait.C:
		return false, errBusy
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-a.checks }()
	hash, ok := a.cfg.Users[name]
	if !ok {
		_ = bcrypt.CompareHashAndPassword(a.decoy, []byte(password))
		return false, nil
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil, nil
}

// setSession sets (or, with an empty value, clears) the session cookie:
// HttpOnly, Secure, SameSite=Lax. Browsers accept Secure cookies from
// http://localhost and 127.0.0.1; anywhere else the console belongs behind
// TLS.
func setSession(w http.ResponseWriter, value string, ttl time.Duration) {
	c := &http.Cookie{Name: sessionCookie, Value: value, Path: "/", HttpOnly: true, Secure: true,
		SameSite: http.SameSiteLaxMode, MaxAge: int(ttl / time.Second)}
	if value == "" {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// localPath returns next when it is a path on this site, "/" otherwise, so
// a login link cannot redirect elsewhere: it must parse as a URL with
// neither scheme nor host, start with one slash, and hold no backslash
// (browsers read it as a slash) and no control character (browsers drop a
// tab, so "/\t/evil.example" would be "//evil.example").
func localPath(next string) string {
	u, err := url.Parse(next)
	switch {
	case err != nil, u.Scheme != "", u.Host != "", u.User != nil, u.Opaque != "",
		!strings.HasPrefix(next, "/"), strings.HasPrefix(next, "//"), strings.ContainsRune(next, '\\'),
		strings.ContainsFunc(next, unicode.IsControl):
		return "/"
	}
	return next
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Auth.Users == nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", view{Title: "Log in", Data: map[string]string{"Next": localPath(r.URL.Query().Get("next"))}})
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Auth.Users == nil {
		http.Error(w, "this console does not use logins", http.StatusNotFound)
		return
	}
	name, password := r.PostForm.Get("user"), r.PostForm.Get("password")
	next := localPath(r.PostForm.Get("next"))
	again := func(code int, msg string) {
		h.render(w, r, code, "login", view{Title: "Log in", Error: msg, Data: map[string]string{"Next": next}})
	}
	addr := clientAddr(r, h.cfg.Auth.TrustedProxies)
	user, from := userSubject(name), addrSubject(addr)
	wait, err := h.auth.throttle.refusedFor(r.Context(), user, from)
	if err != nil {
		h.fail(w, r, nil, err)
		return
	}
	if wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		h.cfg.Logger.Warn("console login refused after failed ones", "user", name, "remote", addr.String(), "wait", wait)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		again(http.StatusTooManyRequests, fmt.Sprintf("Too many failed logins for this user or from this address: try again in %d s.", secs))
		return
	}
	ok, err := h.auth.checkPassword(r.Context(), name, password)
	if err != nil {
		h.fail(w, r, nil, err)
		return
	}
	if !ok {
		h.cfg.Logger.Warn("console login failed", "user", name, "remote", addr.String())
		if err := h.auth.throttle.failed(r.Context(), user, from); err != nil {
			h.fail(w, r, nil, err)
			return
		}
		again(http.StatusUnauthorized, "Unknown user or wrong password.")
		return
	}
	token, err := h.auth.sessions.create(r.Context(), name, addr.String())
	if err == nil {
		err = h.auth.throttle.succeeded(r.Context(), user)
	}
	if err != nil {
		h.fail(w, r, nil, err)
		return
	}
	h.cfg.Logger.Info("console login", "user", name, "role", h.auth.user(name).Role.String(), "remote", addr.String())
	setSession(w, token, h.auth.sessions.ttl)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout ends the session on the server, so its cookie is refused from now
// on even if it was copied, and clears the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		if err := h.auth.sessions.revoke(r.Context(), c.Value); err != nil {
			h.fail(w, r, nil, err)
			return
		}
	}
	setSession(w, "", 0)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
