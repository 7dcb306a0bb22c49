package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// sessions are the console's logins, one row of console_sessions each. The
// cookie carries a random token (128 bits from crypto/rand); the table keeps
// only its SHA-256, so reading the table does not let anyone log in. Kept in
// Postgres rather than in the process: every replica behind a load balancer
// knows every session, a logout ends it on all of them at once, and a
// restart logs nobody out.
type sessions struct {
	pool *pgxpool.Pool
	ttl  time.Duration
	now  func() time.Time
}

// maxTokenLen bounds the cookie value looked up; rand.Text makes 26
// characters.
const maxTokenLen = 64

func tokenHash(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

// create starts a session for user and returns its token. It deletes the
// sessions that have expired, so the table holds the live ones.
func (s *sessions) create(ctx context.Context, user, remote string) (string, error) {
	token := rand.Text()
	now := s.now()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM console_sessions WHERE expires_at <= $1`, now); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO console_sessions (token_sha256, user_name, created_at, expires_at, remote_addr)
			VALUES ($1, $2, $3, $4, $5)`, tokenHash(token), user, now, now.Add(s.ttl), remote)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("start session of %q: %w", user, err)
	}
	return token, nil
}

// user returns the user of a live session token; ok is false for an
// unknown, revoked or expired one.
func (s *sessions) user(ctx context.Context, token string) (name string, ok bool, err error) {
	if token == "" || len(token) > maxTokenLen {
		return "", false, nil
	}
	err = s.pool.QueryRow(ctx, `SELECT user_name FROM console_sessions WHERE token_sha256 = $1 AND expires_at > $2`,
		tokenHash(token), s.now()).Scan(&name)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("read session: %w", err)
	}
	return name, true, nil
}

// revoke ends a session: its token is refused from now on, by every
// replica.
func (s *sessions) revoke(ctx context.Context, token string) error {
	if token == "" || len(token) > maxTokenLen {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM console_sessions WHERE token_sha256 = $1`, tokenHash(token)); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}
