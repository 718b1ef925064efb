-- Sub-agents (API.md "Sub-agents and plan mode"; issue 17 part 2).
--
-- `subagents`: the chat offers the model the built-in agent tools
-- (`spawn_agent`, `wait_agent`, `message_agent`, `close_agent`).
-- `depth`: 0 for a root, the parent's depth + 1 for a child; no chat is
-- deeper than 2 (checked when a child is created).
-- `spawn_key`: the idempotency key of the `spawn_agent` call that created
-- the child (NULL for chats created any other way). Unique per parent, so a
-- retried step finds the child it created instead of creating a second one.

ALTER TABLE chats
    ADD COLUMN subagents boolean NOT NULL DEFAULT false,
    ADD COLUMN depth integer NOT NULL DEFAULT 0 CHECK (depth >= 0),
    ADD COLUMN spawn_key text;

WITH RECURSIVE tree AS (
    SELECT id, 0 AS depth FROM chats WHERE parent_chat_id IS NULL
    UNION ALL
    SELECT c.id, tree.depth + 1 FROM chats c JOIN tree ON c.parent_chat_id = tree.id
)
UPDATE chats SET depth = tree.depth FROM tree WHERE chats.id = tree.id AND tree.depth > 0;

CREATE UNIQUE INDEX chats_spawn_key_idx ON chats (parent_chat_id, spawn_key)
    WHERE spawn_key IS NOT NULL;
