package circuit

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"

	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

func providerErr(kind provider.ErrorKind, err error) error {
	return fmt.Errorf("call: %w", &provider.Error{Kind: kind, TransactionID: "tx1", Err: err})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		err    error
		kind   Kind
		cause  string
	}{
		{"200", 200, nil, Found, ""},
		{"404", 404, nil, NotFound, "http 404: body"},
		{"400", 400, nil, Answered, ""},
		{"429", 429, nil, Busy, ""},
		{"401", 401, nil, Busy, ""},
		{"500", 500, nil, ServerError, "http 500"},
		{"503", 503, nil, ServerError, "http 503"},
		{"refused", 0, providerErr(provider.KindConnection, &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), Unreachable, "connection refused"},
		{"reset", 0, providerErr(provider.KindConnection, &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}), Unreachable, "connection reset"},
		{"dns", 0, providerErr(provider.KindConnection, &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "provider.invalid", IsNotFound: true}}), Unreachable, "dns: no such host provider.invalid"},
		{"tls", 0, providerErr(provider.KindConnection, &tls.CertificateVerificationError{Err: errors.New("x509: certificate signed by unknown authority")}), Unreachable, "tls: x509: certificate signed by unknown authority"},
		{"not tls", 0, providerErr(provider.KindConnection, tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), Unreachable, "tls: the server did not answer with TLS"},
		{"eof", 0, providerErr(provider.KindConnection, io.ErrUnexpectedEOF), Unreachable, "connection closed by the provider"},
		{"timeout", 0, providerErr(provider.KindTimeout, context.DeadlineExceeded), Unreachable, "timeout"},
		{"canceled", 0, providerErr(provider.KindCanceled, context.Canceled), Ignored, ""},
		{"bad body", 200, providerErr(provider.KindBadBody, errors.New("decode body")), Answered, ""},
		{"body too large", 200, providerErr(provider.KindBodyTooLarge, errors.New("body exceeds 1 bytes")), Answered, ""},
		{"unmapped status", 200, providerErr(provider.KindUnmappedStatus, errors.New(`provider status "VOIDED" is not in the status map`)), Found, ""},
		{"unmapped account", 0, providerErr(provider.KindUnmappedAccount, errors.New(`account "p1" is not in the account map m.json`)), Ignored, ""},
		{"other error", 0, errors.New("something odd"), Unreachable, "something odd"},
		{"other connection error", 0, providerErr(provider.KindConnection, errors.New("build request")), Unreachable, "build request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kind, cause := Classify(provider.Response{Status: tt.status, BodyExcerpt: "body"}, tt.err)
			if kind != tt.kind || cause != tt.cause {
				t.Errorf("Classify(%d, %v) = (%s, %q), want (%s, %q)", tt.status, tt.err, kind, cause, tt.kind, tt.cause)
			}
		})
	}
}

// TestClassifyProfileAnswers: what a profile's rules make of an answer
// decides whether it proves the run, is suspect, or stops the calls.
func TestClassifyProfileAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		resp  provider.Response
		kind  Kind
		cause string
	}{
		{"the provider's own not-found body", provider.Response{Status: 404, Class: profile.ClassMissing, OwnNotFound: true}, Found, ""},
		{"a missing rule on the status alone", provider.Response{Status: 404, Class: profile.ClassMissing}, NotFound, "http 404 with an empty body"},
		{"a route-not-found page", provider.Response{Status: 404, BodyExcerpt: "{\"error\":\"not_found\",\n \"message\":\"no such route\"}"},
			NotFound, `http 404: {"error":"not_found", "message":"no such route"}`},
		{"a 404 the profile makes permanent", provider.Response{Status: 404, Class: profile.ClassPermanent, BodyExcerpt: "Unrecognized request URL"},
			NotFound, "http 404: Unrecognized request URL"},
		{"GraphQL's missing node", provider.Response{Status: 200, Class: profile.ClassMissing, OwnNotFound: true}, Found, ""},
		{"GraphQL's error", provider.Response{Status: 200, Class: profile.ClassRetry}, Answered, ""},
		{"wrong mode", provider.Response{Status: 404, Class: profile.ClassWrongAccount, BodyExcerpt: "a similar object exists in live mode"},
			WrongAccount, "http 404, another mode or account than the credentials': a similar object exists in live mode"},
		{"a throttle in a 500", provider.Response{Status: 500, Class: profile.ClassThrottle}, Busy, ""},
		{"a lock", provider.Response{Status: 429, Class: profile.ClassLocked}, Busy, ""},
		{"a 400 auth rule", provider.Response{Status: 400, Class: profile.ClassAuth}, Busy, ""},
	} {
		kind, cause := Classify(tc.resp, nil)
		if kind != tc.kind || cause != tc.cause {
			t.Errorf("%s: (%s, %q), want (%s, %q)", tc.name, kind, cause, tc.kind, tc.cause)
		}
	}
}

// TestClassifyRealFailures classifies what the provider client returns for a
// closed port and for a plain HTTP server spoken to over TLS.
func TestClassifyRealFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer plain.Close()
	for _, tt := range []struct{ url, cause string }{
		{closed, "connection refused"},
		{"https://" + plain.Listener.Addr().String(), "http: server gave HTTP response to HTTPS client"},
	} {
		c, err := provider.New(provider.Config{BaseURL: tt.url})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(t.Context(), provider.Lookup{TransactionID: "tx1", IdempotencyKey: "k"})
		kind, cause := Classify(resp, err)
		if kind != Unreachable || cause != tt.cause {
			t.Errorf("%s: Classify = (%s, %q) from %v, want (unreachable, %q)", tt.url, kind, cause, err, tt.cause)
		}
	}
}
