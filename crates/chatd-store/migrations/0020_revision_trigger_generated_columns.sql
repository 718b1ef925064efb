-- The revision trigger (0017_branches.sql) compares a row's OLD and NEW
-- values to skip updates nobody sees: a no-op update, and a rewrite of
-- `sibling_ids` on a row off the active branch. Since 0019 the row has a
-- STORED generated column (`search_tsv`), which a BEFORE trigger sees as
-- not yet computed (NULL in NEW), so every such comparison failed: a new
-- sibling of an inactive answer moved `history_version` and made every
-- stream reset its clients mid-answer. Generated columns are compared as
-- unchanged here (PostgreSQL recomputes them from the columns compared).

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
        unchanged := NEW;
        unchanged.search_tsv := OLD.search_tsv;
        IF OLD IS NOT DISTINCT FROM unchanged THEN
            RETURN NEW;
        END IF;
        IF OLD.deleted AND NEW.deleted THEN
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
