package providersim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/profile"
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
func (s Shape) String() string {
	if int(s) >= 0 && int(s) < len(shapeNames) {
		return shapeNames[s]
	}
	return "Shape(" + strconv.Itoa(int(s)) + ")"
}

// ParseShape parses a shape name: reconcile, stripe, paypal or square.
func ParseShape(name string) (Shape, error) {
	for i, n := range shapeNames {
		if n == name {
			return Shape(i), nil
		}
	}
	return 0, fmt.Errorf("simulator shape %q: want %s", name, strings.Join(shapeNames, ", "))
}

// shapeSpec is how one shape writes records and errors.
type shapeSpec struct {
	prefix string
	// words maps a ledger status to the provider's word; fallback is the
	// word of a status the provider has none for (Stripe's PaymentIntents
	// are never "refunded"): it reads as another ledger status, so a record
	// in that status is served as a status mismatch.
	words    map[string]string
	fallback string
	record   func(r provider.Record, word string) any
	err      func(status int, id string) any
}

var shapes = map[Shape]shapeSpec{
	ShapeStripe: {
		prefix: "/v1/payment_intents/",
		words: map[string]string{payments.StatusSucceeded: "succeeded", payments.StatusCanceled: "canceled",
			payments.StatusPending: "processing", payments.StatusFailed: "requires_payment_method"},
		fallback: "canceled",
		record: func(r provider.Record, word string) any {
			received := int64(0)
			if word == "succeeded" {
				received = r.AmountMinor
			}
			return map[string]any{"id": r.ID, "object": "payment_intent", "amount": r.AmountMinor, "amount_received": received,
				"currency": strings.ToLower(r.Currency), "status": word, "livemode": false, "capture_method": "automatic",
				"metadata": map[string]any{}, "payment_method_types": []string{"card"}}
		},
		err: func(status int, id string) any {
			e := map[string]any{"type": "invalid_request_error"}
			switch status {
			case http.StatusNotFound:
				e["code"], e["param"], e["message"] = "resource_missing", "intent", "No such payment_intent: '"+id+"'"
			case http.StatusTooManyRequests:
				e["code"], e["message"] = "rate_limit", "Request rate limit exceeded."
			case http.StatusUnauthorized:
				e["message"] = "Invalid API Key provided."
			case http.StatusBadRequest:
				e["message"] = "This PaymentIntent cannot be retrieved."
			default:
				e["type"], e["message"] = "api_error", "An unknown error occurred."
			}
			return map[string]any{"error": e}
		},
	},
	ShapePayPal: {
		prefix: "/v2/payments/captures/",
		words: map[string]string{payments.StatusSucceeded: "COMPLETED", payments.StatusPending: "PENDING",
			payments.StatusFailed: "DECLINED", payments.StatusRefunded: "REFUNDED", payments.StatusPartiallyRefunded: "PARTIALLY_REFUNDED"},
		fallback: "DECLINED",
		record: func(r provider.Record, word string) any {
			money := map[string]string{"currency_code": r.Currency,
				"value": profile.MinorToDecimal(r.AmountMinor, profile.ISOExponent(strings.ToUpper(r.Currency)))}
			return map[string]any{"id": r.ID, "status": word, "amount": money, "final_capture": true,
				"seller_receivable_breakdown": map[string]any{"gross_amount": money}}
		},
		err: func(status int, id string) any {
			m, ok := map[int][2]string{
				http.StatusNotFound:        {"RESOURCE_NOT_FOUND", "The specified resource does not exist."},
				http.StatusTooManyRequests: {"RATE_LIMIT_REACHED", "Too many requests. Blocked due to rate limiting."},
				http.StatusBadRequest:      {"INVALID_REQUEST", "Request is not well-formed, syntactically incorrect, or violates schema."},
				http.StatusUnauthorized:    {"AUTHENTICATION_FAILURE", "Authentication failed due to invalid authentication credentials or a missing Authorization header."},
			}[status]
			if !ok {
				m = [2]string{"INTERNAL_SERVICE_ERROR", "An internal service error has occurred."}
			}
			return map[string]any{"name": m[0], "message": m[1], "debug_id": "sim" + strconv.Itoa(status)}
		},
	},
	ShapeSquare: {
		prefix: "/v2/payments/",
		words: map[string]string{payments.StatusSucceeded: "COMPLETED", payments.StatusPending: "PENDING",
			payments.StatusCanceled: "CANCELED", payments.StatusFailed: "FAILED"},
		fallback: "CANCELED",
		record: func(r provider.Record, word string) any {
			money := map[string]any{"amount": r.AmountMinor, "currency": r.Currency}
			return map[string]any{"payment": map[string]any{"id": r.ID, "status": word, "amount_money": money,
				"total_money": money, "source_type": "CARD"}}
		},
		err: func(status int, id string) any {
			m, ok := map[int][2]string{
				http.StatusNotFound:        {"INVALID_REQUEST_ERROR", "NOT_FOUND"},
				http.StatusTooManyRequests: {"RATE_LIMIT_ERROR", "RATE_LIMITED"},
				http.StatusBadRequest:      {"INVALID_REQUEST_ERROR", "BAD_REQUEST"},
				http.StatusUnauthorized:    {"AUTHENTICATION_ERROR", "UNAUTHORIZED"},
			}[status]
			if !ok {
				m = [2]string{"API_ERROR", "SERVICE_UNAVAILABLE"}
			}
			return map[string]any{"errors": []map[string]string{{"category": m[0], "code": m[1], "detail": "simulated " + strings.ToLower(m[1]) + " for " + id}}}
		},
	},
}

// Expresses reports whether the shape has a word of its own for a ledger
// status; a record in another status is served as a status mismatch.
func (s Shape) Expresses(status string) bool {
	if s == ShapeReconcile {
		return true
	}
	_, ok := shapes[s].words[status]
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
	return &shaped{s: s, shape: shape, spec: spec, cfg: cfg, tokens: map[string]time.Time{}}, nil
}

type shaped struct {
	s     *Server
	shape Shape
	spec  shapeSpec
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
	case strings.HasPrefix(path, h.spec.prefix) && !strings.Contains(path[len(h.spec.prefix):], "/"):
		id, err := url.PathUnescape(path[len(h.spec.prefix):])
		if err != nil || id == "" {
			writeJSON(w, http.StatusNotFound, h.spec.err(http.StatusNotFound, id))
			return
		}
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			writeJSON(w, http.StatusMethodNotAllowed, h.spec.err(http.StatusMethodNotAllowed, id))
			return
		}
		h.serveLookup(w, r, id)
	default:
		writeJSON(w, http.StatusNotFound, h.spec.err(http.StatusNotFound, ""))
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

func (h *shaped) serveLookup(w http.ResponseWriter, r *http.Request, id string) {
	if !h.authorized(r) {
		writeJSON(w, http.StatusUnauthorized, h.spec.err(http.StatusUnauthorized, id))
		return
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
	a, latency := h.s.decide(w.Header(), inner, id, h.s.now())
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
		word, known := h.spec.words[rec.Status]
		if !known {
			word = h.spec.fallback
		}
		writeJSON(w, http.StatusOK, h.spec.record(rec, word))
	case a.body == nil: // an unreadable body, as is
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(a.raw))
	default:
		writeJSON(w, a.status, h.spec.err(a.status, id))
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
