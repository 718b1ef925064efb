-- Message windows (API.md "Message windows and paging by size";
-- spec/durable-agent-loop.md "UI retrieval and updates"): every chat keeps
-- the number of its client-visible messages and a preview of its newest
-- visible text, so that listing chats never reads message bodies.
--
-- "Visible" is what clients can see: not soft-deleted and not model-only
-- (`visibility <> 'model'`), exactly the rows the message routes return.
-- The preview is the first 200 characters of the newest non-empty `text`
-- part of the newest visible message that has one; `last_message_preview_id`
-- is that message's id (internal: it tells the trigger when the preview's
-- source went away and the preview must be found again).
--
-- The columns are maintained by an AFTER ROW trigger on chat_messages, so
-- every writer (transitions, compaction, future ones) keeps them right
-- without knowing about them. It updates the chats row the
-- set_chat_message_revision trigger has already updated in the same
-- statement: every transition holds that row FOR UPDATE before it writes a
-- message (spec "lock order"), so the trigger takes no new lock.

ALTER TABLE chats ADD COLUMN message_count bigint NOT NULL DEFAULT 0;
ALTER TABLE chats ADD COLUMN last_message_preview text;
ALTER TABLE chats ADD COLUMN last_message_preview_id bigint;

-- The preview of one message's content: the first 200 characters of its
-- last non-empty text part, or NULL when it has none.
CREATE FUNCTION chat_message_preview(content jsonb) RETURNS text AS $$
    SELECT left(part->>'text', 200)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(content) = 'array' THEN content ELSE '[]'::jsonb END)
         WITH ORDINALITY AS parts(part, ord)
    WHERE part->>'type' = 'text' AND coalesce(part->>'text', '') <> ''
    ORDER BY ord DESC
    LIMIT 1
$$ LANGUAGE sql IMMUTABLE;

CREATE FUNCTION maintain_chat_message_summary() RETURNS trigger AS $$
DECLARE
    was_visible boolean := false;
    is_visible boolean := NOT NEW.deleted AND NEW.visibility <> 'model';
    delta bigint;
    new_preview text;
    source_id bigint;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        was_visible := NOT OLD.deleted AND OLD.visibility <> 'model';
    END IF;
    delta := is_visible::int - was_visible::int;
    IF is_visible THEN
        new_preview := chat_message_preview(NEW.content);
    END IF;
    SELECT last_message_preview_id INTO source_id FROM chats WHERE id = NEW.chat_id;
    IF new_preview IS NOT NULL AND NEW.id >= coalesce(source_id, 0) THEN
        -- The newest visible message with text: it is the preview now.
        UPDATE chats
        SET message_count = message_count + delta,
            last_message_preview = new_preview,
            last_message_preview_id = NEW.id
        WHERE id = NEW.chat_id;
    ELSIF NEW.id = source_id THEN
        -- The preview's source was deleted, hidden or lost its text: find
        -- the newest remaining one. An AFTER trigger sees every row the
        -- statement changed, so a multi-row soft delete (an edit) finds
        -- the right one the first time.
        UPDATE chats
        SET message_count = message_count + delta,
            (last_message_preview, last_message_preview_id) = (
                SELECT p.preview, p.id FROM (
                    SELECT chat_message_preview(m.content) AS preview, m.id
                    FROM chat_messages m
                    WHERE m.chat_id = NEW.chat_id AND NOT m.deleted AND m.visibility <> 'model'
                    ORDER BY m.id DESC
                ) p
                WHERE p.preview IS NOT NULL
                LIMIT 1)
        WHERE id = NEW.chat_id;
    ELSIF delta <> 0 THEN
        UPDATE chats SET message_count = message_count + delta WHERE id = NEW.chat_id;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_maintain_chat_message_summary_on_insert
AFTER INSERT ON chat_messages
FOR EACH ROW
EXECUTE FUNCTION maintain_chat_message_summary();

CREATE TRIGGER trigger_maintain_chat_message_summary_on_update
AFTER UPDATE ON chat_messages
FOR EACH ROW
WHEN (OLD.deleted IS DISTINCT FROM NEW.deleted
      OR OLD.visibility IS DISTINCT FROM NEW.visibility
      OR OLD.content IS DISTINCT FROM NEW.content)
EXECUTE FUNCTION maintain_chat_message_summary();

-- Backfill the chats that exist already. Only these columns change: no
-- version counter, no updated_at.
UPDATE chats c
SET message_count = v.n,
    last_message_preview = p.preview,
    last_message_preview_id = p.id
FROM (
    SELECT c2.id AS chat_id,
           (SELECT count(*) FROM chat_messages m
            WHERE m.chat_id = c2.id AND NOT m.deleted AND m.visibility <> 'model') AS n
    FROM chats c2
) v
LEFT JOIN LATERAL (
    SELECT q.preview, q.id FROM (
        SELECT chat_message_preview(m.content) AS preview, m.id
        FROM chat_messages m
        WHERE m.chat_id = v.chat_id AND NOT m.deleted AND m.visibility <> 'model'
        ORDER BY m.id DESC
    ) q
    WHERE q.preview IS NOT NULL
    LIMIT 1
) p ON true
WHERE c.id = v.chat_id;
