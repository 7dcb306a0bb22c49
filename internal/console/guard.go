package console

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// What a request may carry, checked before any route and before
// authentication: an anonymous client must not make the console read, parse
// or store more than a login form.
const (
	// maxLoginBody bounds the body of POST /login: a user name, a password
	// and the page to return to (a console URL with its filters).
	maxLoginBody = 8 << 10
	// maxActionBody bounds the body of an action: a reason of 200 runes and
	// the selection of one page of dead letters (50 message ids) fit many
	// times over.
	maxActionBody = 64 << 10
)

// formContentType is the one body the console accepts: its forms are
// urlencoded. Multipart bodies are refused before they are read, so nothing
// is ever spooled to temporary files.
const formContentType = "application/x-www-form-urlencoded"

// localHostOnly refuses, when the console trusts every request as a local
// operator, a Host that is not loopback: a page of another site whose name
// was made to resolve to 127.0.0.1 (DNS rebinding) would otherwise act
// through the victim's browser, its Origin matching its Host.
func (h *Handler) localHostOnly(next http.Handler) http.Handler {
	if !h.cfg.Auth.Local {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			h.cfg.Logger.Warn("request for another host refused", "host", r.Host, "path", r.URL.Path, "remote", r.RemoteAddr)
			http.Error(w, "this console answers only for localhost, 127.0.0.1 and [::1]", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// smallForms bounds every body (maxLoginBody for the login, maxActionBody
// otherwise) and accepts only urlencoded forms on unsafe methods, refusing
// anything else before reading it. It parses the form, so handlers read
// r.PostForm and a body too large is answered 413 here.
func smallForms(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := int64(maxActionBody)
		if r.URL.Path == "/login" {
			limit = maxLoginBody
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != formContentType {
			http.Error(w, "the console accepts only "+formContentType+" forms", http.StatusUnsupportedMediaType)
			return
		}
		if err := r.ParseForm(); err != nil {
			code := http.StatusBadRequest
			if tooLarge := new(http.MaxBytesError); errors.As(err, &tooLarge) {
				code = http.StatusRequestEntityTooLarge
			}
			http.Error(w, "read form: "+err.Error(), code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// loopbackHost reports whether a Host header (or a listen address's host)
// names this machine's loopback interface: localhost, 127.0.0.0/8 or ::1,
// with or without a port.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// LoopbackAddr reports whether a listen address such as 127.0.0.1:8080
// accepts connections from this machine only.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopbackHost(host)
}
