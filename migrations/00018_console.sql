-- +goose Up
-- The web console's own state: its login sessions and its failed logins.
-- They live in the database, not in a console process, so that every
-- console replica behind a load balancer knows every session, a logout ends
-- a session on all of them, a restart or a deploy logs nobody out, and a
-- password guesser is slowed down by all replicas together.

CREATE TABLE console_sessions (
    token_sha256 bytea       PRIMARY KEY CHECK (length(token_sha256) = 32),
    user_name    text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    remote_addr  text        NOT NULL
);

CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

COMMENT ON TABLE console_sessions IS 'Logins to the web console (reconcile ui --users): one row per session cookie, deleted by its logout or once expired.';
COMMENT ON COLUMN console_sessions.token_sha256 IS 'SHA-256 of the session cookie''s random token: the token itself is never stored, so reading this table does not let anyone log in.';
COMMENT ON COLUMN console_sessions.user_name IS 'The user of the htpasswd file who logged in.';
COMMENT ON COLUMN console_sessions.created_at IS 'When the user logged in.';
COMMENT ON COLUMN console_sessions.expires_at IS 'When the session ends without a logout (12 hours after the login by default).';
COMMENT ON COLUMN console_sessions.remote_addr IS 'The client address the login came from.';

CREATE TABLE console_login_failures (
    subject         text        PRIMARY KEY,
    failures        integer     NOT NULL CHECK (failures >= 1),
    last_failure_at timestamptz NOT NULL,
    locked_until    timestamptz NOT NULL
);

CREATE INDEX console_login_failures_age ON console_login_failures (last_failure_at);

COMMENT ON TABLE console_login_failures IS 'Failed console logins in a row, per user name and per client address, and until when further attempts are refused unchecked (exponential backoff).';
COMMENT ON COLUMN console_login_failures.subject IS 'user:NAME for a user name tried (known or not), addr:IP for a client address (an IPv6 client''s /64).';
COMMENT ON COLUMN console_login_failures.failures IS 'Failed logins in a row; a successful login of the user clears its row, a day without failures clears any.';
COMMENT ON COLUMN console_login_failures.last_failure_at IS 'When the latest failure happened.';
COMMENT ON COLUMN console_login_failures.locked_until IS 'Logins for this subject are refused without a password check until then.';

-- +goose Down
DROP TABLE console_login_failures, console_sessions;
