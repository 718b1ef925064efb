-- Steer messages and idempotency keys (issue 16; API.md "Busy behaviours and
-- the queue" and "Idempotency"; DESIGN.md "Decisions for the next
-- capabilities").

-- A queued message sent with busy_behavior "steer" while the chat ran: the
-- step commit that continues the turn takes it into history, and FinishTurn
-- promotes it ahead of ordinary queued messages.
ALTER TABLE chat_queued_messages ADD COLUMN steer boolean NOT NULL DEFAULT false;

-- Every client-visible change of a queued row advances queue_version (spec
-- "Queue version"): the steer flag is client-visible and edited by
-- PATCH /queue/{queued}, so the update trigger watches it too (the other
-- columns as in the spec's trigger).
DROP TRIGGER trigger_bump_chat_queue_version_on_queued_message_update ON chat_queued_messages;
CREATE TRIGGER trigger_bump_chat_queue_version_on_queued_message_update
AFTER UPDATE OF content, model_config_id, position, created_by, steer ON chat_queued_messages
FOR EACH ROW
EXECUTE FUNCTION bump_chat_queue_version_on_queued_message_change();

-- Idempotency-Key: the first response to a key, per user, for 24 hours.
-- `route` is the method and path the key was first used on, and
-- `request_hash` the SHA-256 of the request body (canonical JSON when the
-- body is JSON); a repeat that differs in either is refused. Rows past
-- `expires_at` count as absent and are deleted by a background loop.
CREATE TABLE idempotency_keys (
    user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    key text NOT NULL,
    route text NOT NULL,
    request_hash bytea NOT NULL,
    status smallint NOT NULL,
    content_type text,
    response bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (user_id, key)
);
CREATE INDEX idempotency_keys_expires_at_idx ON idempotency_keys (expires_at);
