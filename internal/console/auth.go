package console

import (
	"bufio"
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

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
	// from elsewhere are refused. Required with Header.
	TrustedProxies []netip.Prefix
	// Operators are the users who may act; everyone else is an auditor.
	Operators []string
	// Local trusts every request as the operator "local": only for a
	// console listening on a loopback address (the caller checks).
	Local bool
	// SessionTTL is how long a login lasts. Defaults to 12h.
	SessionTTL time.Duration
	// SessionKey signs session cookies. Defaults to 32 random bytes, so a
	// restart logs everyone out.
	SessionKey []byte
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
	cfg  Auth
	key  []byte
	ttl  time.Duration
	now  func() time.Time
	ops  map[string]bool
	fake []byte // a hash compared against for unknown users
}

func newAuthenticator(a Auth, now func() time.Time) (*authenticator, error) {
	au := &authenticator{cfg: a, key: a.SessionKey, ttl: cmp.Or(a.SessionTTL, 12*time.Hour), now: now,
		ops: map[string]bool{}}
	if len(au.key) == 0 {
		au.key = make([]byte, 32)
		_, _ = rand.Read(au.key)
	}
	for _, o := range a.Operators {
		au.ops[o] = true
	}
	if a.Users != nil {
		fake, err := bcrypt.GenerateFromPassword([]byte("not a password"), bcrypt.MinCost)
		if err != nil {
			return nil, err
		}
		au.fake = fake
	}
	return au, nil
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
	name, ok := a.verify(c.Value)
	if !ok {
		return User{}, errUnauthenticated
	}
	if _, known := a.cfg.Users[name]; !known {
		return User{}, errUnauthenticated
	}
	return a.user(name), nil
}

// checkPassword compares in constant work whether or not the user exists.
func (a *authenticator) checkPassword(name, password string) bool {
	hash, ok := a.cfg.Users[name]
	if !ok {
		_ = bcrypt.CompareHashAndPassword(a.fake, []byte(password))
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil
}

// sign returns a session value for name: name, expiry and their HMAC.
func (a *authenticator) sign(name string) string {
	exp := strconv.FormatInt(a.now().Add(a.ttl).Unix(), 10)
	payload := base64.RawURLEncoding.EncodeToString([]byte(name)) + "." + exp
	return payload + "." + base64.RawURLEncoding.EncodeToString(a.mac(payload))
}

func (a *authenticator) mac(payload string) []byte {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// verify checks a session value's HMAC and expiry and returns its user.
func (a *authenticator) verify(v string) (string, bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return "", false
	}
	payload, sig := v[:i], v[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, a.mac(payload)) {
		return "", false
	}
	enc, exp, ok := strings.Cut(payload, ".")
	if !ok {
		return "", false
	}
	until, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || a.now().Unix() >= until {
		return "", false
	}
	name, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return "", false
	}
	return string(name), true
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
	if !h.auth.checkPassword(name, password) {
		h.cfg.Logger.Warn("console login failed", "user", name, "remote", r.RemoteAddr)
		h.render(w, r, http.StatusUnauthorized, "login", view{Title: "Log in",
			Error: "Unknown user or wrong password.", Data: map[string]string{"Next": next}})
		return
	}
	h.cfg.Logger.Info("console login", "user", name, "role", h.auth.user(name).Role.String())
	setSession(w, h.auth.sign(name), h.auth.ttl)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	setSession(w, "", 0)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
