package console

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reconcile/reconcile/internal/limiter"
)

// countingReader counts the bytes a handler read of a body.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// TestBodiesAreSmallURLEncodedForms posts what an anonymous client may
// send: a multipart upload is refused unread (nothing is spooled to disk),
// an urlencoded body past the login's limit is cut at it.
func TestBodiesAreSmallURLEncodedForms(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	post := func(target, contentType string, body io.Reader) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "http://console.test"+target, body)
		r.Header.Set("Content-Type", contentType)
		r.Header.Set("Origin", "http://console.test")
		w := httptest.NewRecorder()
		b.h.ServeHTTP(w, r)
		return w
	}

	// 8 MiB of multipart upload to the login.
	var upload strings.Builder
	mw := multipart.NewWriter(&upload)
	fw, _ := mw.CreateFormFile("f", "big.bin")
	_, _ = io.WriteString(fw, strings.Repeat("x", 8<<20))
	_ = mw.WriteField("user", "alice")
	_ = mw.Close()
	body := &countingReader{r: strings.NewReader(upload.String())}
	w := post("/login", mw.FormDataContentType(), body)
	wantStatus(t, w, http.StatusUnsupportedMediaType, "multipart login")
	if n := body.n.Load(); n != 0 {
		t.Errorf("the console read %d bytes of a multipart body it refuses", n)
	}

	// An urlencoded login of 1 MiB: refused at the login's limit.
	big := "user=alice&password=" + strings.Repeat("a", 1<<20)
	body = &countingReader{r: strings.NewReader(big)}
	w = post("/login", formContentType, body)
	wantStatus(t, w, http.StatusRequestEntityTooLarge, "1 MiB login")
	if n := body.n.Load(); n > maxLoginBody+4096 {
		t.Errorf("the console read %d bytes of a login body limited to %d", n, maxLoginBody)
	}

	// An action's body has its own, larger limit; an anonymous one never
	// gets past the login check, whatever its size.
	alice := b.login(t, "alice")
	form := url.Values{"all": {"1"}, "note": {strings.Repeat("n", maxActionBody)}}
	r := httptest.NewRequest("POST", "http://console.test/runs/"+b.runID.String()+"/redrive", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", formContentType)
	r.Header.Set("Origin", "http://console.test")
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: alice})
	w = httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	wantStatus(t, w, http.StatusRequestEntityTooLarge, "action body past its limit")
	if s := b.state(t, "tx_d"); s != "dead_lettered" {
		t.Errorf("tx_d is %s after a refused redrive", s)
	}
	w = post("/runs/"+b.runID.String()+"/redrive", "text/plain", strings.NewReader("all=1&note=x"))
	wantStatus(t, w, http.StatusUnsupportedMediaType, "text/plain action")
}

// TestServerCutsSlowRequests sends a request that announces 1,000 bytes of
// body and sends 7: the server closes the connection at its read timeout
// instead of holding it (and a goroutine) for as long as the client likes.
func TestServerCutsSlowRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	def := b.h.NewServer(slog.New(slog.DiscardHandler))
	if def.ReadHeaderTimeout <= 0 || def.ReadTimeout <= 0 || def.WriteTimeout <= 0 || def.IdleTimeout <= 0 || def.MaxHeaderBytes <= 0 {
		t.Fatalf("server without limits: read header %v, read %v, write %v, idle %v, header bytes %d",
			def.ReadHeaderTimeout, def.ReadTimeout, def.WriteTimeout, def.IdleTimeout, def.MaxHeaderBytes)
	}
	h := newHandler(t, Config{Pool: b.pool, Auth: htpasswd(t), ReadTimeout: 300 * time.Millisecond})
	srv := h.NewServer(slog.New(slog.DiscardHandler))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /login HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: 1000\r\n\r\nuser=al", ln.Addr(), formContentType)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	held := time.Since(start)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server still held the connection after %v", held)
	}
	if held > 5*time.Second {
		t.Errorf("the server held the slow request %v, want about its 300ms read timeout", held)
	}
}

// TestInsecureLocalAnswersOnlyLoopbackHosts plays a DNS rebinding attack:
// a page on rebind.evil.example, whose name now resolves to 127.0.0.1,
// posts a limit change with an Origin that matches its Host. The console
// without logins answers only loopback Host names.
func TestInsecureLocalAnswersOnlyLoopbackHosts(t *testing.T) {
	t.Parallel()
	b := setup(t, Auth{Local: true})
	serve := func(method, host, target string, form url.Values) *httptest.ResponseRecorder {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		r := httptest.NewRequest(method, "http://"+host+target, body)
		r.Host = host
		if form != nil {
			r.Header.Set("Content-Type", formContentType)
			r.Header.Set("Origin", "http://"+host)
		}
		w := httptest.NewRecorder()
		b.h.ServeHTTP(w, r)
		return w
	}
	set := url.Values{"rate": {"99"}, "burst": {"9"}, "note": {"rebound"}}
	for _, host := range []string{"rebind.evil.example", "rebind.evil.example:8080", "127.0.0.1.evil.example", "10.0.0.4:8080", ""} {
		wantStatus(t, serve("POST", host, "/limits/provider", set), http.StatusMisdirectedRequest, "POST with Host "+host)
		wantStatus(t, serve("GET", host, "/", nil), http.StatusMisdirectedRequest, "GET with Host "+host)
	}
	if st, err := limiter.LoadState(context.Background(), b.pool, "provider"); err != nil || st.Stored {
		t.Fatalf("the rebound POST set the limit: %+v, %v", st, err)
	}
	for _, host := range []string{"127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "127.0.0.2"} {
		wantStatus(t, serve("GET", host, "/", nil), http.StatusOK, "GET with Host "+host)
	}
	wantStatus(t, serve("POST", "127.0.0.1:8080", "/limits/provider", set), http.StatusOK, "local POST")
}

// TestDuplicateAuthHeaderIsRefused sends two user headers through the
// trusted proxy: a proxy that appends rather than replaces passes the
// client's own copy, so neither may be believed.
func TestDuplicateAuthHeaderIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, Auth{Header: "X-Forwarded-User", TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		Operators: []string{"alice"}})
	r := httptest.NewRequest("GET", "http://console.test/", nil)
	r.Header.Add("X-Forwarded-User", "alice")
	r.Header.Add("X-Forwarded-User", "carol")
	w := httptest.NewRecorder()
	b.h.ServeHTTP(w, r)
	wantStatus(t, w, http.StatusBadRequest, "two X-Forwarded-User headers")
	if !strings.Contains(w.Body.String(), "2 X-Forwarded-User headers") {
		t.Errorf("the refusal does not name the header:\n%s", w.Body)
	}
	wantStatus(t, b.do(t, "GET", "/", "", nil, "X-Forwarded-User", "carol"), http.StatusOK, "one header")
}

// TestLoginRedirectStaysOnSite logs in with next= values that browsers
// would read as another site; each lands on /.
func TestLoginRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	for next, want := range map[string]string{
		"/runs?x=1":                  "/runs?x=1",
		"/\t/evil.example":           "/",
		"/\n/evil.example":           "/",
		"/\r\n/evil.example":         "/",
		"//evil.example":             "/",
		"/\\evil.example":            "/",
		"\\\\evil.example":           "/",
		"https://evil.example/":      "/",
		"javascript:alert(1)":        "/",
		"/\u0085/evil.example":       "/",
		"evil.example":               "/",
		"/%09/evil.example":          "/%09/evil.example", // a path on this site: the browser does not decode it
		"http:/evil.example":         "/",
		"/\x00":                      "/",
		"/ok#frag":                   "/ok#frag",
		"/tx?id=%2F%2Fevil.example":  "/tx?id=%2F%2Fevil.example",
		" //evil.example":            "/",
		"/\u3000/evil.example":       "/\u3000/evil.example", // not a control character: a path
		"/päyment":                   "/päyment",
		"/runs/x/tx/a%2F..%2F..%2Fb": "/runs/x/tx/a%2F..%2F..%2Fb",
	} {
		w := b.do(t, "POST", "/login", "", url.Values{"user": {"alice"}, "password": {"alice-pw"}, "next": {next}},
			"Origin", "http://console.test")
		wantStatus(t, w, http.StatusSeeOther, fmt.Sprintf("login with next=%q", next))
		// http.Redirect percent-encodes what is not ASCII.
		loc := w.Header().Get("Location")
		if unescaped, _ := url.PathUnescape(loc); loc != want && unescaped != want {
			t.Errorf("next=%q: Location %q, want %q", next, loc, want)
		}
	}
	w := b.do(t, "GET", "/login?next="+url.QueryEscape("/\t/evil.example"), "", nil)
	if !strings.Contains(w.Body.String(), `name="next" value="/"`) {
		t.Errorf("the login form carries a foreign next:\n%s", w.Body)
	}
}

// TestRunsCursorIsValidated sends cursors and dates PostgreSQL would refuse:
// each is bad input (400), never an internal error.
func TestRunsCursorIsValidated(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	bob := b.login(t, "bob")
	for _, target := range []string{
		"/?before=0001-01-01.-9223372036854775808",
		"/?before=2026-10-24.0",
		"/?before=2026-10-24.2147483648",
		"/?before=0000-01-01.1",
		"/?before=2026-10-24",
		"/?before=2026-10-24.1.2",
		"/?before=2026-02-30.1",
		"/?date=0000-12-31",
		"/audit?date=0000-12-31",
	} {
		wantStatus(t, b.do(t, "GET", target, bob, nil), http.StatusBadRequest, target)
	}
	for _, target := range []string{"/?before=0001-01-01.1", "/?before=9999-12-31.2147483647", "/?date=0001-01-01"} {
		wantStatus(t, b.do(t, "GET", target, bob, nil), http.StatusOK, target)
	}
}

// TestStaticServesFilesNotAListing asks for the static directory itself:
// not found, while its files are served to anyone.
func TestStaticServesFilesNotAListing(t *testing.T) {
	t.Parallel()
	b := setup(t, htpasswd(t))
	for _, target := range []string{"/static/", "/static", "/static/.", "/static/nope.js", "/static/%2e%2e/console.go"} {
		w := b.do(t, "GET", target, "", nil)
		if w.Code == http.StatusOK || strings.Contains(w.Body.String(), "refresh.js") {
			t.Errorf("GET %s: %d, lists or serves:\n%s", target, w.Code, w.Body)
		}
	}
	for target, ctype := range map[string]string{"/static/console.css": "text/css", "/static/refresh.js": "javascript"} {
		w := b.do(t, "GET", target, "", nil)
		wantStatus(t, w, http.StatusOK, target)
		if !strings.Contains(w.Header().Get("Content-Type"), ctype) {
			t.Errorf("%s: Content-Type %q", target, w.Header().Get("Content-Type"))
		}
	}
}
