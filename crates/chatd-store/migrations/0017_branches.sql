-- Branches (API.md "Branches, regenerate and fork"; spec/durable-agent-loop.md:
-- "explicit edit/redo/delete operations deactivate the prior branch and
-- create a new active branch").
--
-- A chat's history is a tree of chat_messages rows:
-- - `parent_id`: the row this one follows (NULL for a root). Set by the
--   BEFORE INSERT trigger below to the chat's active leaf, so every writer
--   (transitions, compaction, forks, tests' raw inserts) extends the active
--   branch without knowing about the tree. A child is always inserted after
--   its parent, so ids grow from the root to every leaf.
-- - `chats.active_leaf_id`: the last row of the active branch (NULL for a
--   chat with no messages). Moved by the same trigger on every insert, and by
--   the transitions that switch branches (edit, regenerate, activate).
-- - `deleted` keeps its name and now means "not on the active branch": the
--   active branch is exactly the rows with `NOT deleted`, and since ids grow
--   along a branch, `NOT deleted ORDER BY id` is the branch in order. Every
--   read that followed active history (pages, windows, counts, previews,
--   context, boundaries) follows the active branch unchanged, and a branch
--   switch is a flip of flags, which the existing triggers turn into a new
--   `history_version` (fences, the context cache's key, the stream's reset).
-- - `visible_parent_id`: the nearest client-visible ancestor (the parent,
--   or for a row after a model-only row such as a compaction summary, that
--   row's own visible parent): the tree clients see, in which model-only
--   rows do not exist. Set by the same trigger. API `ChatMessage.parent_id`.
-- - `sibling_ids`: the client-visible rows with the same visible parent,
--   itself included, ascending; `{}` when it has none. Kept by the trigger
--   (a new sibling rewrites the list on the others), so reads never
--   aggregate.
-- - `detached`: rows soft-deleted by an edit before this migration. They
--   were deleted, not a branch: they are in no tree (`parent_id` NULL), are
--   never anyone's sibling and can never be activated.
-- - `copied_from_id`: on a forked chat's rows, the row it copies (usage is
--   not counted again for a copy).
--
-- Existing chats become a single branch in place: their active rows are
-- chained in id order; nothing a client sees changes (no revision, no
-- version counter moves: the revision trigger is off for the backfill).

ALTER TABLE chat_messages ADD COLUMN parent_id bigint;
ALTER TABLE chat_messages ADD COLUMN visible_parent_id bigint;
ALTER TABLE chat_messages ADD COLUMN sibling_ids bigint[] NOT NULL DEFAULT '{}';
ALTER TABLE chat_messages ADD COLUMN detached boolean NOT NULL DEFAULT false;
ALTER TABLE chat_messages ADD COLUMN copied_from_id bigint;
ALTER TABLE chats ADD COLUMN active_leaf_id bigint;
ALTER TABLE chats ADD COLUMN forked_from_chat_id uuid;
ALTER TABLE chats ADD COLUMN forked_from_message_id bigint;

CREATE INDEX chat_messages_parent_idx ON chat_messages (chat_id, visible_parent_id);
-- The active branch's rows: every history read (`NOT deleted ORDER BY id`)
-- scans only them, however many inactive branches a chat keeps.
CREATE INDEX chat_messages_active_idx ON chat_messages (chat_id, id) WHERE NOT deleted;

ALTER TABLE chat_messages DISABLE TRIGGER trigger_set_chat_message_revision_on_update;
UPDATE chat_messages m
SET parent_id = p.prev
FROM (
    SELECT id, lag(id) OVER (PARTITION BY chat_id ORDER BY id) AS prev
    FROM chat_messages
    WHERE NOT deleted
) p
WHERE m.id = p.id AND p.prev IS NOT NULL;
UPDATE chat_messages m
SET visible_parent_id = p.prev
FROM (
    SELECT id, max(id) FILTER (WHERE visibility <> 'model')
               OVER (PARTITION BY chat_id ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
    FROM chat_messages
    WHERE NOT deleted
) p
WHERE m.id = p.id AND p.prev IS NOT NULL;
UPDATE chat_messages SET detached = true WHERE deleted;
ALTER TABLE chat_messages ENABLE TRIGGER trigger_set_chat_message_revision_on_update;

UPDATE chats c
SET active_leaf_id = (SELECT max(m.id) FROM chat_messages m WHERE m.chat_id = c.id AND NOT m.deleted);

-- Links a new row to the chat's active leaf, makes it the leaf, and keeps
-- the sibling lists. The chats row is already locked by the transition that
-- inserts (spec "lock order"), as for the other message triggers.
CREATE FUNCTION link_chat_message_parent() RETURNS trigger AS $$
DECLARE
    siblings bigint[];
BEGIN
    IF NEW.detached OR NEW.copied_from_id IS NOT NULL THEN
        -- A fork's copies come with their parent and no siblings (one
        -- branch); the fork sets its leaf once (`copy_branch`).
        RETURN NEW;
    END IF;
    UPDATE chats c
    SET active_leaf_id = NEW.id
    FROM (SELECT active_leaf_id FROM chats WHERE id = NEW.chat_id) prev
    WHERE c.id = NEW.chat_id
    RETURNING prev.active_leaf_id INTO NEW.parent_id;
    IF NEW.parent_id IS NOT NULL THEN
        SELECT CASE WHEN p.visibility = 'model' THEN p.visible_parent_id ELSE p.id END
        INTO NEW.visible_parent_id
        FROM chat_messages p WHERE p.id = NEW.parent_id;
    END IF;
    IF NEW.visibility <> 'model' THEN
        IF NEW.visible_parent_id IS NULL THEN
            SELECT array_agg(id ORDER BY id) INTO siblings FROM chat_messages
            WHERE chat_id = NEW.chat_id AND visible_parent_id IS NULL
              AND visibility <> 'model' AND NOT detached;
        ELSE
            SELECT array_agg(id ORDER BY id) INTO siblings FROM chat_messages
            WHERE chat_id = NEW.chat_id AND visible_parent_id = NEW.visible_parent_id
              AND visibility <> 'model' AND NOT detached;
        END IF;
        IF siblings IS NOT NULL THEN
            siblings := siblings || NEW.id;
            UPDATE chat_messages SET sibling_ids = siblings
            WHERE chat_id = NEW.chat_id AND id = ANY(siblings) AND id <> NEW.id;
            NEW.sibling_ids := siblings;
        ELSE
            NEW.sibling_ids := '{}';
        END IF;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_link_chat_message_parent
BEFORE INSERT ON chat_messages
FOR EACH ROW
EXECUTE FUNCTION link_chat_message_parent();

-- The revision trigger, as in 0001_init.sql, with two exceptions. It
-- stamps the chats row only when the row is not stamped already (below).
-- And a new
-- sibling rewrites `sibling_ids` on the others, which are all off the
-- active branch (a parent has one child on it). That is no history change
-- anyone sees, so it moves no revision and no `history_version` (the stream
-- would take a changed inactive row for a deletion and reset its clients).
-- The row gets a new revision when it joins the active branch again.
CREATE OR REPLACE FUNCTION set_chat_message_revision() RETURNS trigger AS $$
DECLARE
    chat_snapshot_version bigint;
    stamped boolean;
    unchanged chat_messages;
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
        IF OLD.deleted AND NEW.deleted THEN
            unchanged := NEW;
            unchanged.sibling_ids := OLD.sibling_ids;
            IF OLD IS NOT DISTINCT FROM unchanged THEN
                RETURN NEW;
            END IF;
        END IF;
    END IF;
    -- Once per bundle is enough: the second and later rows of a bundle
    -- find the row already stamped and leave it alone (every UPDATE of one
    -- row in a transaction lengthens the chain of versions the next one
    -- walks, which made a bundle of n rows cost O(n^2)).
    SELECT snapshot_version, history_version = snapshot_version AND generation_attempt = 0
    INTO chat_snapshot_version, stamped
    FROM chats WHERE id = NEW.chat_id;
    IF chat_snapshot_version IS NULL THEN
        RAISE EXCEPTION 'chat % does not exist', NEW.chat_id;
    END IF;
    IF NOT stamped THEN
        UPDATE chats
        SET history_version = snapshot_version, generation_attempt = 0
        WHERE id = NEW.chat_id;
    END IF;
    NEW.revision = chat_snapshot_version;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

-- A fork's copies are counted once, by the fork (`copy_branch` sets the
-- count and the preview from its rows in one statement), not row by row.
DROP TRIGGER trigger_maintain_chat_message_summary_on_insert ON chat_messages;
CREATE TRIGGER trigger_maintain_chat_message_summary_on_insert
AFTER INSERT ON chat_messages
FOR EACH ROW
WHEN (NEW.copied_from_id IS NULL)
EXECUTE FUNCTION maintain_chat_message_summary();

-- A fork's copies carry the usage of the answers they copy (the context
-- meter reads it) but were not paid for again: they do not count.
DROP TRIGGER trigger_count_chat_message_usage_on_insert ON chat_messages;
CREATE TRIGGER trigger_count_chat_message_usage_on_insert
AFTER INSERT ON chat_messages
FOR EACH ROW
WHEN (NEW.copied_from_id IS NULL
      AND (NEW.total_cost_micros IS NOT NULL OR NEW.input_tokens IS NOT NULL
           OR NEW.output_tokens IS NOT NULL OR NEW.cache_read_tokens IS NOT NULL
           OR NEW.cache_creation_tokens IS NOT NULL))
EXECUTE FUNCTION count_chat_message_usage();
