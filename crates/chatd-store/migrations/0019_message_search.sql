-- Full-text search over messages (issue 34; API.md "Sign-in, search,
-- sharing and export": `GET /api/v2/search`).
--
-- - `chat_message_search_text(content)`: the text a message is searched by
--   and snippeted from: its `text` parts (API.md `ChatMessagePart` of type
--   `text`; reasoning, tool calls and results, files are not searched),
--   joined by a newline, in part order, cut to the first 200,000
--   characters (a tsvector holds at most 1 MB; a message's text is at most
--   256 KiB from a client, an assistant's answer is bounded by its output
--   tokens, and the cut keeps any insert from failing on the limit).
-- - `chat_messages.search_tsv`: the message's `english` tsvector of that
--   text, a STORED generated column: every writer (transitions, forks,
--   imports, tests' raw inserts) keeps it without knowing about it.
-- - `chat_messages_search_idx`: a GIN index of it over the rows search
--   reads: user and assistant messages of the active branch (`NOT deleted`;
--   `detached` rows are deleted too) that clients see. Queries repeat this
--   predicate (`chatd_store::search`) so the planner uses the index. The
--   visibility filter (which chats the caller may read) is applied to the
--   matches; btree_gin is not assumed, so chat_id is not in the index.
--
-- Adding a STORED generated column rewrites chat_messages once.

CREATE FUNCTION chat_message_search_text(content jsonb) RETURNS text AS $$
    SELECT left(coalesce(string_agg(part->>'text', E'\n' ORDER BY ord), ''), 200000)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(content) = 'array' THEN content ELSE '[]'::jsonb END)
         WITH ORDINALITY AS parts(part, ord)
    WHERE part->>'type' = 'text' AND jsonb_typeof(part->'text') = 'string'
$$ LANGUAGE sql IMMUTABLE PARALLEL SAFE;

ALTER TABLE chat_messages
    ADD COLUMN search_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('english'::regconfig, chat_message_search_text(content))) STORED;

CREATE INDEX chat_messages_search_idx ON chat_messages USING gin (search_tsv)
    WHERE NOT deleted AND role IN ('user', 'assistant') AND visibility <> 'model';
