package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// backoff is how long logins are refused after failures in a row: nothing
// for the first free-1 failures, then 1 s after the free-th, doubling with
// each further failure up to max. A refused attempt checks no password and
// counts as nothing: it tells the guesser nothing and costs no bcrypt.
type backoff struct {
	free int
	max  time.Duration
}

// wait is how long a subject with failures failures in a row waits for its
// next attempt.
func (b backoff) wait(failures int) time.Duration {
	if failures < b.free {
		return 0
	}
	return min(time.Second<<min(failures-b.free, 30), b.max)
}

var (
	// userBackoff guards one user name: a person mistypes a password a
	// few times, five in a row is a guesser. The 15-minute cap bounds how
	// long a guesser can keep the real user out (the price of a per-user
	// limit), while still allowing only about 100 guesses a day.
	userBackoff = backoff{free: 5, max: 15 * time.Minute}
	// addrBackoff guards one client address, which an office behind one
	// NAT address shares: twenty failures before the first wait, so one
	// guesser there does not lock out the others' first tries.
	addrBackoff = backoff{free: 20, max: 15 * time.Minute}
)

// forgetFailures is how long after the latest failure a subject starts
// afresh.
const forgetFailures = 24 * time.Hour

// maxSubjectName bounds the user name kept for a failure: the login body is
// 8 KiB at most, and no htpasswd name is longer than this.
const maxSubjectName = 256

// loginSubject is what failures are counted against: a user name or a
// client address.
type loginSubject struct {
	key  string
	rule backoff
}

func userSubject(name string) loginSubject {
	if len(name) > maxSubjectName {
		name = name[:maxSubjectName]
	}
	return loginSubject{key: "user:" + name, rule: userBackoff}
}

// addrSubject counts an IPv4 client by its address and an IPv6 client by
// its /64, which one machine can fill with addresses of its own.
func addrSubject(ip netip.Addr) loginSubject {
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return loginSubject{key: "addr:" + p.String(), rule: addrBackoff}
	}
	return loginSubject{key: "addr:" + ip.String(), rule: addrBackoff}
}

// loginThrottle keeps failed logins in console_login_failures, shared by
// every console replica.
type loginThrottle struct {
	pool *pgxpool.Pool
	now  func() time.Time
}

// refusedFor returns how long logins for any of subjects are still refused;
// 0 when the attempt may be checked.
func (t *loginThrottle) refusedFor(ctx context.Context, subjects ...loginSubject) (time.Duration, error) {
	now := t.now()
	keys := make([]string, len(subjects))
	for i, s := range subjects {
		keys[i] = s.key
	}
	var until *time.Time
	err := t.pool.QueryRow(ctx, `SELECT max(locked_until) FROM console_login_failures
		WHERE subject = ANY($1) AND last_failure_at > $2`, keys, now.Add(-forgetFailures)).Scan(&until)
	if err != nil {
		return 0, fmt.Errorf("read failed logins: %w", err)
	}
	if until == nil || !until.After(now) {
		return 0, nil
	}
	return until.Sub(now), nil
}

// failed records a failed login against each subject and refuses the next
// attempts for as long as its rule says. Failures a day old are forgotten.
func (t *loginThrottle) failed(ctx context.Context, subjects ...loginSubject) error {
	now := t.now()
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_login_failures WHERE last_failure_at <= $1`, now.Add(-forgetFailures)); err != nil {
			return err
		}
		for _, s := range subjects {
			var n int
			err := tx.QueryRow(ctx, `
				INSERT INTO console_login_failures AS f (subject, failures, last_failure_at, locked_until)
				VALUES ($1, 1, $2, $2)
				ON CONFLICT (subject) DO UPDATE SET failures = f.failures + 1, last_failure_at = $2
				RETURNING failures`, s.key, now).Scan(&n)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE console_login_failures SET locked_until = $2 WHERE subject = $1`,
				s.key, now.Add(s.rule.wait(n))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record failed login: %w", err)
	}
	return nil
}

// succeeded forgets the failures of the user who logged in. The address's
// stay: a guesser with an account of its own must not reset them.
func (t *loginThrottle) succeeded(ctx context.Context, user loginSubject) error {
	if _, err := t.pool.Exec(ctx, `DELETE FROM console_login_failures WHERE subject = $1`, user.key); err != nil {
		return fmt.Errorf("clear failed logins: %w", err)
	}
	return nil
}

// clientAddr is the address of the client behind r: the connection's peer,
// or, when the peer is one of trusted (a TLS-terminating proxy), the
// right-most X-Forwarded-For address that is not a trusted proxy.
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	peer, err := netip.ParseAddr(host)
	if err != nil {
		return netip.IPv4Unspecified()
	}
	peer = peer.Unmap()
	isTrusted := func(ip netip.Addr) bool {
		return slices.ContainsFunc(trusted, func(p netip.Prefix) bool { return p.Contains(ip) })
	}
	if !isTrusted(peer) {
		return peer
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		ip, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break
		}
		if ip = ip.Unmap(); !isTrusted(ip) {
			return ip
		}
	}
	return peer
}
