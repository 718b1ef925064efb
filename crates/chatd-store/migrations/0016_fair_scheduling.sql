-- Fair scheduling (API.md "Limits, budgets and the token lifecycle":
-- "Running chats"; issue 31 point 2).
--
-- `turn_started_at`: when the chat last became runnable (`running`,
-- `interrupting` or `requires_action`, not archived) from any other state:
-- the start of its current turn. Kept by the trigger below, so every
-- transition that starts a turn (a send to an idle chat, a retry, an
-- unarchive, a requested compaction, a created chat) sets it and nothing
-- else does. Acquisition starts a user's waiting chats in this order
-- (queries::chats::acquisition_candidates). Existing rows start from
-- `updated_at`, the closest recorded time.
--
-- Two partial indexes serve the running-chat cap: a user's chats held by a
-- runner (counted under the owner's lock by every claim) and a user's
-- runnable chats in turn order (ranked per owner by the candidate query).

ALTER TABLE chats ADD COLUMN turn_started_at timestamptz NOT NULL DEFAULT now();
UPDATE chats SET turn_started_at = updated_at;

CREATE FUNCTION set_chat_turn_started_at() RETURNS trigger AS $$
BEGIN
    NEW.turn_started_at = now();
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_set_chat_turn_started_at
BEFORE UPDATE OF status, archived ON chats
FOR EACH ROW
WHEN (NEW.status IN ('running', 'interrupting', 'requires_action') AND NOT NEW.archived
      AND NOT (OLD.status IN ('running', 'interrupting', 'requires_action') AND NOT OLD.archived))
EXECUTE FUNCTION set_chat_turn_started_at();

CREATE INDEX chats_owner_held_idx ON chats (owner_id) WHERE worker_id IS NOT NULL;
CREATE INDEX chats_owner_runnable_idx ON chats (owner_id, turn_started_at, id)
    WHERE status IN ('running', 'interrupting', 'requires_action') AND NOT archived;
