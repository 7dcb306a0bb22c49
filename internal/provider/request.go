package provider

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/reconcile/reconcile/internal/profile"
)

// newRequest builds request pr for item l, without credentials: {id} and
// {account} replaced, escaped for where they stand. The error is an
// [*profile.UnmappedAccountError] when the item's account cannot be
// resolved.
func (c *Client) newRequest(ctx context.Context, pr *profile.Request, l Lookup) (*http.Request, error) {
	var account string
	if pr.UsesAccount() {
		var err error
		if account, err = c.profile.Account.Resolve(l.AccountID); err != nil {
			return nil, err
		}
		if account == "" && strings.Contains(pr.Path, "{account}") {
			return nil, &profile.UnmappedAccountError{AccountID: l.AccountID}
		}
	}
	id := l.TransactionID
	expand := func(template string, escape func(string) string) string {
		if !strings.Contains(template, "{") {
			return template
		}
		return strings.NewReplacer("{id}", escape(id), "{account}", escape(account)).Replace(template)
	}
	return c.build(ctx, pr, expand, l.IdempotencyKey)
}

// build builds request pr with its templates expanded by expand, which is
// given each template and the escaping of where it stands.
func (c *Client) build(ctx context.Context, pr *profile.Request, expand func(template string, escape func(string) string) string,
	idempotencyKey string) (*http.Request, error) {
	asIs := func(s string) string { return s }
	target := c.base + expand(pr.Path, pathSegment)
	if len(pr.Query) > 0 {
		q := make(url.Values, len(pr.Query))
		for _, p := range pr.Query {
			if v := expand(p.Value, asIs); v != "" {
				q.Add(p.Name, v)
			}
		}
		target += "?" + q.Encode()
	}
	var body *strings.Reader
	if pr.Body != "" {
		body = strings.NewReader(expand(pr.Body, jsonEscape))
	}
	var req *http.Request
	var err error
	if body != nil {
		req, err = http.NewRequestWithContext(ctx, pr.Method, target, body)
	} else {
		req, err = http.NewRequestWithContext(ctx, pr.Method, target, nil)
	}
	if err != nil {
		return nil, err
	}
	for _, h := range pr.Headers {
		if v := expand(h.Value, asIs); v != "" {
			req.Header.Set(h.Name, v)
		}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if pr.IdempotencyHeader != "" {
		req.Header.Set(pr.IdempotencyHeader, idempotencyKey)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	return req, nil
}

// pathSegment escapes id as one path segment. The dot segments "." and
// ".." are escaped too: url.PathEscape leaves them as they are, and every
// server and proxy on the way resolves them (RFC 3986, section 5.2.4), so
// /v1/transactions/.. would ask for /v1/.
func pathSegment(id string) string {
	switch id {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(id)
}

// jsonEscape returns id escaped for the inside of a JSON string.
func jsonEscape(id string) string {
	var b strings.Builder
	for _, r := range id {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// authorize adds the profile's credentials to req. used is the OAuth2
// access token sent (for a refresh after a 401). refused, when not nil, is
// the answer to give: the token endpoint refused the client credentials.
func (c *Client) authorize(ctx context.Context, req *http.Request) (used string, refused *Response, err error) {
	switch c.profile.Auth.Type {
	case profile.AuthBearer:
		if c.cfg.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.cfg.Token.Reveal())
		}
	case profile.AuthBasic:
		req.SetBasicAuth(c.cfg.Username.Reveal(), c.cfg.Password.Reveal())
	case profile.AuthOAuth2ClientCredentials:
		tok, refused, err := c.oauth.token(ctx)
		if err != nil || refused != nil {
			return "", refused, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		return tok, nil, nil
	}
	return "", nil, nil
}
