package circuit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/reconcile/reconcile/internal/profile"
	"github.com/reconcile/reconcile/internal/provider"
)

// Classify turns the outcome of a provider call (what [provider.Client.Get]
// returned) into the [Kind] and cause of an [Event], in this order:
//
//   - a canceled call, or one never made (an account the account map
//     lacks): Ignored;
//   - a timeout, a connection, DNS or TLS failure: Unreachable;
//   - a record (2xx read, even with a status word the profile does not
//     map), or the provider's own not-found body: Found;
//   - an answer of the profile's wrong_account class: WrongAccount;
//   - a 404, or a missing answer, that no body rule recognised: NotFound;
//   - a throttle or a lock (a 429, or a profile's throttle or locked
//     class) or refused credentials (401, 403, the auth class): Busy;
//   - a 5xx: ServerError;
//   - everything else (unreadable bodies, other 4xx): Answered.
//
// Found, NotFound and Answered are about the item, not the provider; the
// cause of a failure carries the start of the body, for the warning.
func Classify(resp provider.Response, err error) (Kind, string) {
	if err != nil {
		switch provider.KindOf(err) {
		case provider.KindCanceled, provider.KindUnmappedAccount:
			return Ignored, ""
		case provider.KindTimeout:
			return Unreachable, "timeout"
		case provider.KindUnmappedStatus:
			return Found, ""
		case provider.KindBadBody, provider.KindBodyTooLarge:
			return Answered, ""
		}
		return Unreachable, Describe(err)
	}
	switch c := resp.Class; {
	case resp.OwnNotFound, c == 0 && resp.Status >= 200 && resp.Status < 300:
		return Found, ""
	case c == profile.ClassWrongAccount:
		return WrongAccount, withExcerpt(fmt.Sprintf("http %d, another mode or account than the credentials'", resp.Status), resp.BodyExcerpt)
	case c == profile.ClassMissing || c == 0 && resp.Status == http.StatusNotFound || c == profile.ClassPermanent && resp.Status == http.StatusNotFound:
		return NotFound, withExcerpt(fmt.Sprintf("http %d", resp.Status), resp.BodyExcerpt)
	case c == profile.ClassThrottle || c == profile.ClassLocked || c == profile.ClassAuth,
		c == 0 && (resp.Status == http.StatusTooManyRequests || resp.Status == http.StatusUnauthorized || resp.Status == http.StatusForbidden):
		return Busy, ""
	case resp.Status >= 500:
		return ServerError, fmt.Sprintf("http %d", resp.Status)
	}
	return Answered, ""
}

// withExcerpt appends the start of a body to a cause, on one line.
func withExcerpt(cause, excerpt string) string {
	excerpt = strings.Join(strings.Fields(excerpt), " ")
	if excerpt == "" {
		return cause + " with an empty body"
	}
	const keep = 160
	if len(excerpt) > keep {
		cut := keep
		for cut > 0 && !utf8.RuneStart(excerpt[cut]) {
			cut--
		}
		excerpt = excerpt[:cut] + "…"
	}
	return cause + ": " + excerpt
}

// Describe names the cause of a failed connection in a few words:
// "connection refused", "connection reset", "dns: no such host
// provider.invalid", "tls: ...", "timeout", or the error's own text (without
// the transaction id of a [provider.Error], which is not the cause).
func Describe(err error) string {
	var dnsErr *net.DNSError
	var verifyErr *tls.CertificateVerificationError
	var headerErr tls.RecordHeaderError
	var authErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dnsErr):
		return "dns: " + dnsErr.Err + " " + dnsErr.Name
	case errors.As(err, &verifyErr):
		return "tls: " + verifyErr.Err.Error()
	case errors.As(err, &authErr), errors.As(err, &hostErr), errors.As(err, &invalidErr):
		return "tls: " + err.Error()
	case errors.As(err, &headerErr):
		return "tls: the server did not answer with TLS"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the provider"
	}
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Err != nil {
		return pe.Err.Error() // without the transaction: the cause is the provider's
	}
	return err.Error()
}
