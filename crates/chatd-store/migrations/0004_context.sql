-- Context accounting and compaction (API.md "Context management";
-- chatd_core::context).
--
-- chat_messages.compacted_through_id: on a boundary row (`compressed`), the
-- last message id it covers. A summary boundary is inserted after the
-- verbatim tail it leaves, so the id it covers is older than the tail. NULL
-- means everything before the row (id - 1): a clear-context marker, and the
-- boundaries written before this migration.
--
-- chat_messages.token_estimate: the size estimate of the message in tokens,
-- made once when it is committed. NULL on rows written before this
-- migration; readers estimate those from the content's size.
--
-- Both are nullable columns without defaults (catalog-only changes). No
-- backfill: an UPDATE of every message would fire the revision trigger.
ALTER TABLE chat_messages ADD COLUMN compacted_through_id bigint;
ALTER TABLE chat_messages ADD COLUMN token_estimate bigint;

-- The newest boundary of a chat is found without scanning its messages.
CREATE INDEX chat_messages_boundary_idx ON chat_messages (chat_id, id)
    WHERE compressed AND NOT deleted;

-- Chat.context, kept by every transaction that changes the history
-- (queries::context::refresh), so that listing chats reads no messages:
-- tokens of the next model call (NULL before the first refresh), whether
-- that is (partly) an estimate, the model's window when the chat was
-- refreshed, the number of summaries in the active history, and the last
-- message the newest summary covers.
ALTER TABLE chats ADD COLUMN context_tokens bigint;
ALTER TABLE chats ADD COLUMN context_estimated boolean NOT NULL DEFAULT true;
ALTER TABLE chats ADD COLUMN context_limit bigint;
ALTER TABLE chats ADD COLUMN compactions integer NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN compacted_through_message_id bigint;
