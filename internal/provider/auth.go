package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/reconcile/reconcile/internal/profile"
)

// checkCredentials reports a credential the profile's strategy needs but
// the config lacks, naming the environment variable it comes from.
func checkCredentials(c Config) error {
	a := c.Profile.Auth
	need := func(s Secret, field, env string) error {
		if s == "" {
			return fmt.Errorf("provider config: profile %s (auth %s) needs %s: set %s", c.Profile.Name, a.Type, field, env)
		}
		return nil
	}
	switch a.Type {
	case profile.AuthBearer:
		if !a.Optional {
			return need(c.Token, "a bearer token", a.TokenEnv)
		}
	case profile.AuthBasic:
		return need(c.Username, "a username", a.UsernameEnv)
	case profile.AuthOAuth2ClientCredentials:
		return errors.Join(need(c.ClientID, "a client id", a.ClientIDEnv), need(c.ClientSecret, "a client secret", a.ClientSecretEnv))
	}
	return nil
}

// oauthSource caches the OAuth2 access token of a client, refreshed by
// clientcredentials shortly before it expires, or at once after a 401.
type oauthSource struct {
	cfg clientcredentials.Config
	// ctx carries the HTTP client of the token requests. It is not a call's
	// context: a token outlives the call that fetched it.
	ctx context.Context

	mu  sync.Mutex
	src oauth2.TokenSource
}

func newOAuthSource(c *Client) (*oauthSource, error) {
	a := c.profile.Auth
	tokenURL := a.TokenURL
	if strings.HasPrefix(tokenURL, "/") {
		tokenURL = c.base + tokenURL
	}
	if u, err := url.Parse(tokenURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("provider config: profile %s: token URL %q: want http or https", c.profile.Name, a.TokenURL)
	}
	style := oauth2.AuthStyleInHeader
	if a.InParams {
		style = oauth2.AuthStyleInParams
	}
	hc := &http.Client{Transport: c.client.Transport, Timeout: c.cfg.Timeout, CheckRedirect: c.client.CheckRedirect}
	o := &oauthSource{
		cfg: clientcredentials.Config{ClientID: c.cfg.ClientID.Reveal(), ClientSecret: c.cfg.ClientSecret.Reveal(),
			TokenURL: tokenURL, Scopes: a.Scopes, AuthStyle: style},
		ctx: context.WithValue(context.Background(), oauth2.HTTPClient, hc),
	}
	o.src = o.cfg.TokenSource(o.ctx)
	return o, nil
}

// token returns a valid access token. refused is set when the token
// endpoint refused the client credentials (an answer, not a failure); err
// when it could not be reached or answered otherwise (transient).
func (o *oauthSource) token(ctx context.Context) (tok string, refused *Response, err error) {
	o.mu.Lock()
	src := o.src
	o.mu.Unlock()
	type result struct {
		t   *oauth2.Token
		err error
	}
	done := make(chan result, 1)
	go func() {
		t, err := src.Token()
		done <- result{t, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return "", nil, fmt.Errorf("get access token: %w", ctx.Err())
	}
	if r.err == nil {
		return r.t.AccessToken, nil, nil
	}
	var re *oauth2.RetrieveError
	if errors.As(r.err, &re) && re.Response != nil {
		switch code := re.Response.StatusCode; {
		case code == http.StatusBadRequest || code == http.StatusUnauthorized || code == http.StatusForbidden:
			return "", &Response{Status: http.StatusUnauthorized, Class: profile.ClassAuth,
				BodyExcerpt: excerpt([]byte("token endpoint answered " + re.Response.Status + ": " + cmpOr(re.ErrorCode, "no error code")))}, nil
		default:
			return "", nil, fmt.Errorf("get access token: token endpoint answered %s", re.Response.Status)
		}
	}
	return "", nil, fmt.Errorf("get access token: %w", stripURL(r.err))
}

// invalidate drops the cached token if it is still the one that was
// refused, so that many workers refused at once fetch one new token.
func (o *oauthSource) invalidate(used string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, err := o.src.Token(); err == nil && cur.AccessToken != used {
		return // someone refreshed it already
	}
	o.src = o.cfg.TokenSource(o.ctx)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
