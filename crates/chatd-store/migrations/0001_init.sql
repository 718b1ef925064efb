-- chatd schema, version 1. Forward-only: never edit a migration that has
-- shipped; add a new file instead.
--
-- The execution-state columns and the triggers follow
-- spec/chatd-architecture.md ("What constitutes a chat's state?", "Message
-- revisions and history version", "Queue version", "Retry state version",
-- "Heartbeat loop") exactly.

CREATE TABLE users (
    id uuid PRIMARY KEY,
    username text NOT NULL UNIQUE CHECK (length(username) BETWEEN 1 AND 64),
    role text NOT NULL CHECK (role IN ('admin', 'member')),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- API tokens. Only a SHA-256 hash of the secret is stored.
CREATE TABLE api_keys (
    id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name text NOT NULL DEFAULT '',
    secret_hash bytea NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    last_used_at timestamptz
);
CREATE INDEX api_keys_user_id_idx ON api_keys (user_id);

CREATE TABLE chat_providers (
    id uuid PRIMARY KEY,
    provider text NOT NULL CHECK (provider IN ('openai', 'openai-compat', 'anthropic')),
    display_name text NOT NULL DEFAULT '',
    base_url text,
    api_key text,
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE chat_model_configs (
    id uuid PRIMARY KEY,
    provider_id uuid NOT NULL REFERENCES chat_providers(id) ON DELETE CASCADE,
    model text NOT NULL,
    display_name text NOT NULL DEFAULT '',
    context_limit bigint NOT NULL CHECK (context_limit > 0),
    compression_threshold integer NOT NULL DEFAULT 70 CHECK (compression_threshold BETWEEN 0 AND 100),
    is_default boolean NOT NULL DEFAULT false,
    enabled boolean NOT NULL DEFAULT true,
    options jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
-- Exactly one enabled default at a time (at most one by this index; the API
-- keeps at least one).
CREATE UNIQUE INDEX chat_model_configs_one_default_idx ON chat_model_configs ((true)) WHERE is_default AND enabled;

CREATE TABLE chat_mcp_servers (
    id uuid PRIMARY KEY,
    slug text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    display_name text NOT NULL DEFAULT '',
    transport text NOT NULL CHECK (transport IN ('stdio', 'streamable_http')),
    command text,
    args jsonb NOT NULL DEFAULT '[]'::jsonb,
    env jsonb NOT NULL DEFAULT '{}'::jsonb,
    url text,
    headers jsonb NOT NULL DEFAULT '{}'::jsonb,
    enabled boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Replicas register the address of their parts endpoint here; a replica's id
-- is the worker_id it writes on the chats it owns.
CREATE TABLE replicas (
    id uuid PRIMARY KEY,
    advertise_url text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Cluster-wide settings (the generated relay secret).
CREATE TABLE cluster_settings (
    key text PRIMARY KEY,
    value text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE chats (
    id uuid PRIMARY KEY,
    owner_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    parent_chat_id uuid REFERENCES chats(id) ON DELETE CASCADE,
    root_chat_id uuid REFERENCES chats(id) ON DELETE CASCADE,
    -- Execution state.
    status text NOT NULL CHECK (status IN ('waiting', 'running', 'interrupting', 'requires_action', 'error')),
    archived boolean NOT NULL DEFAULT false,
    worker_id uuid,
    runner_id uuid,
    last_error jsonb,
    retry_state jsonb,
    snapshot_version bigint NOT NULL DEFAULT 0,
    history_version bigint NOT NULL DEFAULT 0,
    queue_version bigint NOT NULL DEFAULT 0,
    generation_attempt bigint NOT NULL DEFAULT 0,
    retry_state_version bigint NOT NULL DEFAULT 0,
    requires_action_deadline_at timestamptz,
    -- Metadata.
    title text NOT NULL DEFAULT 'New Chat',
    labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    pin_order integer NOT NULL DEFAULT 0,
    last_model_config_id uuid,
    last_reasoning_effort text CHECK (last_reasoning_effort IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max')),
    dynamic_tools jsonb NOT NULL DEFAULT '[]'::jsonb,
    mcp_server_ids uuid[] NOT NULL DEFAULT '{}',
    plan_mode text CHECK (plan_mode IN ('plan')),
    compaction_requested_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chats_owner_updated_idx ON chats (owner_id, updated_at DESC, id DESC);
CREATE INDEX chats_root_idx ON chats (root_chat_id);
CREATE INDEX chats_parent_idx ON chats (parent_chat_id);
-- The acquisition loop scans runnable chats.
CREATE INDEX chats_runnable_idx ON chats (id) WHERE status IN ('running', 'interrupting', 'requires_action') AND NOT archived;

CREATE TABLE chat_messages (
    id bigserial PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    role text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content jsonb NOT NULL DEFAULT '[]'::jsonb,
    visibility text NOT NULL DEFAULT 'both' CHECK (visibility IN ('user', 'model', 'both')),
    compressed boolean NOT NULL DEFAULT false,
    deleted boolean NOT NULL DEFAULT false,
    revision bigint,
    created_by uuid,
    model_config_id uuid,
    reasoning_effort text CHECK (reasoning_effort IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max')),
    input_tokens bigint,
    output_tokens bigint,
    reasoning_tokens bigint,
    cache_read_tokens bigint,
    cache_creation_tokens bigint,
    total_tokens bigint,
    context_limit bigint,
    total_cost_micros bigint,
    runtime_ms bigint,
    provider_response_id text,
    queued_message_id bigint,
    client_message_id text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_messages_chat_id_idx ON chat_messages (chat_id, id);
CREATE INDEX chat_messages_chat_revision_idx ON chat_messages (chat_id, revision);

-- Queue positions come from one global sequence; the head of a chat's queue
-- is its lowest position.
CREATE SEQUENCE chat_queued_message_position_seq;
CREATE TABLE chat_queued_messages (
    id bigserial PRIMARY KEY,
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    position bigint NOT NULL DEFAULT nextval('chat_queued_message_position_seq'),
    content jsonb NOT NULL,
    created_by uuid,
    model_config_id uuid,
    reasoning_effort text CHECK (reasoning_effort IN ('none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max')),
    client_message_id text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX chat_queued_messages_chat_position_idx ON chat_queued_messages (chat_id, position);

-- Idempotent sends: the first response to a client_message_id, per chat.
CREATE TABLE chat_send_receipts (
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    client_message_id text NOT NULL,
    request_hash bytea NOT NULL,
    response jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, client_message_id)
);

CREATE UNLOGGED TABLE chat_heartbeats (
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    runner_id uuid NOT NULL,
    heartbeat_at timestamp with time zone NOT NULL,
    PRIMARY KEY (chat_id, runner_id)
);
CREATE INDEX chat_heartbeats_heartbeat_at_idx ON chat_heartbeats (heartbeat_at);

-- Message revisions and history version (spec, verbatim).
CREATE FUNCTION set_chat_message_revision() RETURNS trigger AS $$
DECLARE
    chat_snapshot_version bigint;
BEGIN
    IF TG_OP = 'INSERT' AND NEW.revision IS NOT NULL THEN
        RAISE EXCEPTION 'chat_messages.revision must be assigned by trigger';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF OLD.chat_id IS DISTINCT FROM NEW.chat_id THEN
            RAISE EXCEPTION 'chat_messages.chat_id is immutable';
        END IF;
        IF OLD.revision IS DISTINCT FROM NEW.revision THEN
            RAISE EXCEPTION 'chat_messages.revision must be assigned by trigger';
        END IF;
        IF OLD IS NOT DISTINCT FROM NEW THEN
            RETURN NEW;
        END IF;
    END IF;
    UPDATE chats
    SET history_version = snapshot_version, generation_attempt = 0
    WHERE id = NEW.chat_id
    RETURNING snapshot_version INTO chat_snapshot_version;
    IF chat_snapshot_version IS NULL THEN
        RAISE EXCEPTION 'chat % does not exist', NEW.chat_id;
    END IF;
    NEW.revision = chat_snapshot_version;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_set_chat_message_revision_on_insert
BEFORE INSERT ON chat_messages
FOR EACH ROW
EXECUTE FUNCTION set_chat_message_revision();

CREATE TRIGGER trigger_set_chat_message_revision_on_update
BEFORE UPDATE ON chat_messages
FOR EACH ROW
EXECUTE FUNCTION set_chat_message_revision();

-- Queue version (spec, verbatim).
CREATE FUNCTION bump_chat_queue_version_on_queued_message_change() RETURNS trigger AS $$
DECLARE
    changed_chat_id uuid;
BEGIN
    IF TG_OP = 'DELETE' THEN
        changed_chat_id = OLD.chat_id;
    ELSE
        changed_chat_id = NEW.chat_id;
    END IF;
    UPDATE chats
    SET queue_version = snapshot_version
    WHERE id = changed_chat_id;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_insert
AFTER INSERT ON chat_queued_messages
FOR EACH ROW
EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();

CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_update
AFTER UPDATE OF content, model_config_id, position, created_by ON chat_queued_messages
FOR EACH ROW
EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();

CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_delete
AFTER DELETE ON chat_queued_messages
FOR EACH ROW
EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();

-- Retry state version (spec, verbatim).
CREATE FUNCTION sync_chat_retry_state() RETURNS trigger AS $$
BEGIN
    IF OLD.retry_state_version IS DISTINCT FROM NEW.retry_state_version THEN
        RAISE EXCEPTION 'chats.retry_state_version must be assigned by trigger';
    END IF;
    IF NEW.generation_attempt IS DISTINCT FROM OLD.generation_attempt THEN
        NEW.retry_state = NULL;
    END IF;
    IF NEW.retry_state IS DISTINCT FROM OLD.retry_state THEN
        NEW.retry_state_version = NEW.snapshot_version;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_sync_chat_retry_state
BEFORE UPDATE OF retry_state, retry_state_version, generation_attempt ON chats
FOR EACH ROW
EXECUTE FUNCTION sync_chat_retry_state();
