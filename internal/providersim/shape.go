package providersim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/provider"
)

// Shape is the API the simulator speaks: its own contract or one of the
// real providers' that the built-in profiles read.
type Shape int

// Shapes.
const (
	// ShapeReconcile is the built-in contract, GET /v1/transactions/{id}.
	ShapeReconcile Shape = iota
	// ShapeStripe answers GET /v1/payment_intents/{id} with PaymentIntents.
	ShapeStripe
	// ShapePayPal answers GET /v2/payments/captures/{id} with captures, and
	// POST /v1/oauth2/token with client-credentials access tokens.
	ShapePayPal
	// ShapeSquare answers GET /v2/payments/{id} with {"payment": ...}.
	ShapeSquare
)

var shapeNames = []string{"reconcile", "stripe", "paypal", "square"}

// String returns the shape's name, the name of the built-in profile that
// reads it.
func (s Shape) String() string { return nameOf(s, shapeNames, "Shape") }

// ParseShape parses a shape name: reconcile, stripe, paypal or square.
func ParseShape(name string) (Shape, error) {
	return parseName[Shape](name, shapeNames, "simulator shape")
}

// shapes are the provider shapes' specs (see answers.go).
var shapes = map[Shape]*shapeSpec{ShapeStripe: &stripeSpec, ShapePayPal: &paypalSpec, ShapeSquare: &squareSpec}

// Expresses reports whether the shape has a way of its own to say a
// record of the kind (payments.KindPayment, KindRefund, KindDispute) is in
// the ledger status; a record in another status is served as a status
// mismatch, and one of a kind the shape has no object for is not found.
func (s Shape) Expresses(kind, status string) bool {
	if s == ShapeReconcile {
		return true
	}
	o := shapes[s].object(kind)
	if o == nil {
		return false
	}
	_, ok := o.words[status]
	return ok
}

// ShapeConfig configures a [Shaped] handler.
type ShapeConfig struct {
	// ClientID and ClientSecret are the OAuth2 client credentials the
	// PayPal shape's token endpoint accepts (basic authentication or form
	// fields). Required by ShapePayPal.
	ClientID, ClientSecret provider.Secret
	// TokenTTL is how long an access token is valid. Defaults to 9h, as
	// PayPal's.
	TokenTTL time.Duration
	// WrongMode makes the Stripe shape answer every lookup as Stripe
	// answers a test-mode key asking for a live-mode object: 404
	// resource_missing, "a similar object exists in live mode". Defaults
	// to false.
	WrongMode bool
}

// Shaped returns a handler that serves s in the given shape: the same
// dataset, faults, rate limit and counters, written as that provider writes
// them. The /_sim endpoints are s's own. For ShapeReconcile it is s itself.
func Shaped(s *Server, shape Shape, cfg ShapeConfig) (http.Handler, error) {
	if shape == ShapeReconcile {
		return s, nil
	}
	spec, ok := shapes[shape]
	if !ok {
		return nil, fmt.Errorf("simulator shape %v: unknown", shape)
	}
	if shape == ShapePayPal && (cfg.ClientID == "" || cfg.ClientSecret == "") {
		return nil, fmt.Errorf("simulator shape paypal: ClientID and ClientSecret are required")
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 9 * time.Hour
	}
	if shape == ShapeStripe {
		// Every record must be writable in Stripe's minor units.
		for _, id := range s.Records() {
			r := s.records[id]
			if _, err := stripeProfile().ISOToProviderMinor(r.AmountMinor, r.Currency); err != nil {
				return nil, fmt.Errorf("simulator shape stripe: transaction %q: %w", id, err)
			}
		}
	}
	return &shaped{s: s, shape: shape, spec: spec, cfg: cfg, tokens: map[string]time.Time{}}, nil
}

type shaped struct {
	s     *Server
	shape Shape
	spec  *shapeSpec
	cfg   ShapeConfig

	mu     sync.Mutex
	tokens map[string]time.Time // PayPal access token → expiry
	issued int
}

// TokensIssued returns the number of access tokens the PayPal shape's token
// endpoint issued (0 for other shapes).
func TokensIssued(h http.Handler) int {
	if sh, ok := h.(*shaped); ok {
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.issued
	}
	return 0
}

// Revoke makes every access token issued so far by a PayPal-shaped handler
// invalid, as a provider rotating its keys does.
func Revoke(h http.Handler) {
	if sh, ok := h.(*shaped); ok {
		sh.mu.Lock()
		clear(sh.tokens)
		sh.mu.Unlock()
	}
}

func (h *shaped) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(path, "/_sim/"):
		h.s.ServeHTTP(w, r)
	case h.shape == ShapePayPal && path == "/v1/oauth2/token":
		h.serveToken(w, r)
	case listShapes[h.shape] != nil && path == listShapes[h.shape].path:
		h.serveList(w, r, listShapes[h.shape])
	default:
		o, esc, ok := h.spec.find(path)
		if !ok {
			writeJSON(w, http.StatusNotFound, h.spec.err(http.StatusNotFound, nil, ""))
			return
		}
		id, err := url.PathUnescape(esc)
		if err != nil || id == "" {
			writeJSON(w, http.StatusNotFound, h.spec.err(http.StatusNotFound, o, id))
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeJSON(w, http.StatusMethodNotAllowed, h.spec.err(http.StatusMethodNotAllowed, o, id))
			return
		}
		h.serveLookup(w, r, o, id)
	}
}

// authorized checks the shape's credentials: the simulator's bearer token,
// or for PayPal an access token it issued and that has not expired.
func (h *shaped) authorized(r *http.Request) bool {
	given, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if h.shape == ShapePayPal {
		h.mu.Lock()
		exp, ok := h.tokens[given]
		h.mu.Unlock()
		return ok && h.s.now().Before(exp)
	}
	h.s.mu.Lock()
	want := h.s.token
	h.s.mu.Unlock()
	return want == "" || subtle.ConstantTimeCompare([]byte(given), []byte(want.Reveal())) == 1
}

// serveLookup answers a lookup of id at object o's endpoint. The record
// is seen only at its kind's endpoint and, in the Stripe shape, with its
// connected account's Stripe-Account header.
func (h *shaped) serveLookup(w http.ResponseWriter, r *http.Request, o *objectSpec, id string) {
	if !h.authorized(r) {
		writeJSON(w, http.StatusUnauthorized, h.spec.err(http.StatusUnauthorized, o, id))
		return
	}
	if h.cfg.WrongMode && h.shape == ShapeStripe {
		writeJSON(w, http.StatusNotFound, stripeWrongMode(o, id))
		return
	}
	account := r.Header.Get("Stripe-Account")
	sees := func(id string) bool {
		return h.s.kindOf(id) == o.kind && (h.shape != ShapeStripe || h.s.cfg.Accounts[id] == account)
	}
	// The simulator's own bookkeeping wants its token and an idempotency
	// key; the real providers' lookups send neither.
	inner := r.Clone(r.Context())
	h.s.mu.Lock()
	inner.Header.Set("Authorization", "Bearer "+h.s.token.Reveal())
	h.s.mu.Unlock()
	if inner.Header.Get("Idempotency-Key") == "" {
		inner.Header.Set("Idempotency-Key", "id:"+id)
	}
	a, latency := h.s.decide(w.Header(), inner, id, sees, h.s.now())
	if latency > 0 {
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	switch rec, ok := a.body.(provider.Record); {
	case a.status == http.StatusOK && ok:
		writeJSON(w, http.StatusOK, o.write(h.written(o, rec)))
	case a.body == nil: // an unreadable body, as is
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.raw))
	default:
		writeJSON(w, a.status, h.spec.err(a.status, o, id))
	}
}

// serveToken is PayPal's POST /v1/oauth2/token: the client credentials
// grant, with the credentials in basic authentication or the form.
func (h *shaped) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "invalid_request"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type", "error_description": "Grant Type is NULL"})
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if subtle.ConstantTimeCompare([]byte(id), []byte(h.cfg.ClientID.Reveal())) != 1 ||
		subtle.ConstantTimeCompare([]byte(secret), []byte(h.cfg.ClientSecret.Reveal())) != 1 {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client", "error_description": "Client Authentication failed"})
		return
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	tok := "A21AA" + hex.EncodeToString(b)
	h.mu.Lock()
	h.tokens[tok] = h.s.now().Add(h.cfg.TokenTTL)
	h.issued++
	h.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"scope": "https://uri.paypal.com/services/payments/payment/authcapture",
		"access_token": tok, "token_type": "Bearer", "app_id": "APP-SIM", "expires_in": int64(h.cfg.TokenTTL / time.Second)})
}
