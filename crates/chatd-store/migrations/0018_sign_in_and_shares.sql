-- Issue 34 (API.md "Sign-in, search, sharing and export"): passwords,
-- browser sessions and read-only sharing.

-- A user's password: an argon2id PHC string ($argon2id$v=19$m=...,t=...,p=...$salt$hash);
-- NULL: the user signs in with tokens only.
ALTER TABLE users ADD COLUMN password_hash text;

-- Browser sessions (cookie sign-in). Only the SHA-256 of the session secret
-- is stored, as for api_keys; csrf_token is the value cookie-authenticated
-- mutations must send back in the X-CSRF-Token header.
CREATE TABLE user_sessions (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    secret_hash bytea NOT NULL UNIQUE,
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    user_agent text NOT NULL DEFAULT ''
);
CREATE INDEX user_sessions_user_idx ON user_sessions (user_id);
CREATE INDEX user_sessions_expires_idx ON user_sessions (expires_at);

-- Read-only shares: user_id reads chat_id (chat, messages, streams, search)
-- and cannot mutate it.
CREATE TABLE chat_shares (
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_by uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, user_id)
);
CREATE INDEX chat_shares_user_idx ON chat_shares (user_id, created_at DESC);
