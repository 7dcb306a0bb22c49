package circuit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/reconcile/reconcile/internal/provider"
)

// Classify turns the outcome of a provider call (the HTTP status, 0 when no
// answer came, and the error of [provider.Client.Get]) into the [Kind] and
// cause of an [Event]. A canceled call, or one never made (an account the
// account map lacks), is Ignored; a timeout or a connection, DNS or TLS
// failure is Unreachable; a 5xx is a ServerError; everything else,
// including unreadable bodies, status words the profile does not map and
// 4xx answers, is Answered: it is about the item, not the provider.
func Classify(status int, err error) (Kind, string) {
	if err != nil {
		switch provider.KindOf(err) {
		case provider.KindCanceled, provider.KindUnmappedAccount:
			return Ignored, ""
		case provider.KindTimeout:
			return Unreachable, "timeout"
		case provider.KindBadBody, provider.KindBodyTooLarge, provider.KindUnmappedStatus:
			return Answered, ""
		}
		return Unreachable, Describe(err)
	}
	if status >= 500 {
		return ServerError, fmt.Sprintf("http %d", status)
	}
	return Answered, ""
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
