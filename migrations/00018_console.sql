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

-- The console's role: what `reconcile ui` needs and nothing more, so a
-- console that is taken over cannot do what its pages and actions do not.
-- It reads what the auditor reads (by membership, so it follows the
-- auditor's grants), the queue's and limiters' rows its pages show and the
-- consumers' heartbeats its metrics serve (`reconcile ui --metrics-addr`);
-- it writes its sessions and exactly what its actions write: a redrive, a
-- re-run, a cancel (the ledger's state changes, counters and completions
-- with their announcement, the queue's messages) and a limit set. It never
-- changes an item's expected record, never rewrites or deletes a
-- transition, never deletes a ledger row or a message, and writes no
-- consumer, circuit or schedule row. `reconcile audit grant --console ROLE` grants it to a
-- login role. Created the way 00004 creates the auditor's (see there).
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_console') THEN
        IF (SELECT rolsuper OR rolcreaterole FROM pg_roles WHERE rolname = current_user) THEN
            BEGIN
                CREATE ROLE reconcile_console NOLOGIN;
                COMMENT ON ROLE reconcile_console IS 'reconcile: what the web console needs: the auditor''s reads, the queue''s and limiter''s rows it shows, its sessions and the writes of its actions. Grant it to a login role with `reconcile audit grant --console ROLE`.';
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;
            END;
        ELSE
            RAISE NOTICE 'role reconcile_console not created: % lacks CREATEROLE', current_user;
        END IF;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_console') THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_auditor')
       AND NOT pg_has_role('reconcile_console', 'reconcile_auditor', 'MEMBER') THEN
        BEGIN
            GRANT reconcile_auditor TO reconcile_console;
        EXCEPTION WHEN unique_violation OR internal_error THEN
            NULL; -- another database of the cluster granted it at the same moment
        END;
    END IF;

    GRANT USAGE ON SCHEMA public TO reconcile_console;
    -- Its pages: the schema version `reconcile ui` checks at start, the
    -- queue's split of a run, the dead letters, the limiters and their
    -- history.
    GRANT SELECT ON goose_db_version, queue_messages, rate_limiters, rate_limiter_history TO reconcile_console;
    -- Its metrics: the consumers' heartbeats.
    GRANT SELECT ON consumers TO reconcile_console;
    -- Its sessions and failed logins.
    GRANT SELECT, INSERT, DELETE ON console_sessions TO reconcile_console;
    GRANT SELECT, INSERT, UPDATE, DELETE ON console_login_failures TO reconcile_console;

    -- Re-run all: a new generation (run, items, messages, counters).
    GRANT INSERT ON runs, items, queue_messages, run_shards, account_progress, run_breakdown TO reconcile_console;
    GRANT UPDATE (item_count, source_sha256, completed_at, first_completed_at, cancelled_at, cancelled_by, cancel_reason)
        ON runs TO reconcile_console;
    -- Every action's state changes: never the expected record.
    GRANT UPDATE (state, attempts, throttles, provider_amount_minor, provider_currency, provider_status, differences,
                  last_http_status, last_reason, first_attempt_at, updated_at, terminal_at, history_len, history_head)
        ON items TO reconcile_console;
    GRANT INSERT ON transitions TO reconcile_console;
    GRANT UPDATE ON run_shards, account_progress, run_breakdown TO reconcile_console;
    -- A cancel can complete a run; a redriven run completes again. The
    -- completion's announcement is written with it (the table comes with
    -- 00019, which grants the same when it runs after this one).
    GRANT INSERT ON run_completions, account_completions, completion_rounds TO reconcile_console;
    IF to_regclass('notifications') IS NOT NULL THEN
        GRANT INSERT ON notifications TO reconcile_console;
    END IF;
    GRANT UPDATE (round) ON run_completions, account_completions TO reconcile_console;
    -- Redrive, re-run failed, cancel: messages back to the queue or out of it.
    GRANT UPDATE (attempt, state, visible_at, lease, deliveries, changed_at, reason, last_error)
        ON queue_messages TO reconcile_console;
    -- Limit set (and its expiry): the settings and their history row.
    GRANT INSERT ON rate_limiters, rate_limiter_history TO reconcile_console;
    GRANT UPDATE ON rate_limiters TO reconcile_console;
END
$$;
-- +goose StatementEnd

-- The handbook's words: the expected value is the payment file's.
COMMENT ON COLUMN discrepancies.expected IS 'The value in the source (the payment file''s record), as text.';

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'reconcile_console') THEN
        REVOKE ALL ON ALL TABLES IN SCHEMA public FROM reconcile_console;
        REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM reconcile_console;
        REVOKE ALL ON SCHEMA public FROM reconcile_console;
    END IF;
END
$$;
-- +goose StatementEnd
COMMENT ON COLUMN discrepancies.expected IS 'The value in the source (the game''s record), as text.';
-- The role is cluster-wide and may serve other databases: it stays.
DROP TABLE console_login_failures, console_sessions;
