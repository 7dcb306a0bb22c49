package provider

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
)

// Exchange is one lookup as an operator sees it while writing a profile:
// the request with its credentials redacted and the whole answer.
type Exchange struct {
	// Method and URL of the request (the URL carries no credentials).
	Method, URL string
	// RequestHeader is the request's headers, Authorization redacted.
	RequestHeader http.Header
	// RequestBody is the request's body, if any.
	RequestBody string
	// Body is the answer's body, up to Config.MaxBody bytes.
	Body []byte
}

// record keeps req's method, URL and headers, redacting credentials.
func (ex *Exchange) record(req *http.Request, hasBody bool) {
	ex.Method, ex.URL = req.Method, req.URL.Redacted()
	ex.RequestHeader = req.Header.Clone()
	for name := range ex.RequestHeader {
		if isCredentialHeader(name) {
			v := ex.RequestHeader.Get(name)
			scheme, _, found := strings.Cut(v, " ")
			if !found {
				scheme = ""
			} else {
				scheme += " "
			}
			ex.RequestHeader.Set(name, scheme+redacted)
		}
	}
	if hasBody && req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			data, _ := io.ReadAll(b)
			ex.RequestBody = string(data)
		}
	}
}

func isCredentialHeader(name string) bool {
	return slices.Contains([]string{"Authorization", "Proxy-Authorization", "Cookie"}, http.CanonicalHeaderKey(name))
}

// Check makes one lookup like [Client.Get] and also returns the exchange:
// the request as sent (credentials redacted) and the whole body. It is the
// tool for trying a profile against a provider.
func (c *Client) Check(ctx context.Context, l Lookup) (Exchange, Response, error) {
	var ex Exchange
	resp, body, err := c.call(ctx, l, &ex)
	ex.Body = body
	return ex, resp, err
}
