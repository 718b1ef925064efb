-- Files (API.md "Files"; spec/chatstate-package.md `LinkFiles`,
-- `ErrChatFileCapExceeded`, `ErrChatFileUnavailable`).
--
-- A file belongs to the user who uploaded it and is linked to at most one
-- chat (`chat_id`, NULL until a message links it). Deleting the chat deletes
-- its files (ON DELETE CASCADE), and deleting the user deletes theirs.
-- The bytes are stored in chunks of at most 256 KiB (`chat_file_chunks`, in
-- `seq` order from 0), so an upload is written and a download read a chunk
-- at a time: neither ever holds a whole file in memory. A file row is
-- committed with all its chunks in one transaction and never changes
-- afterwards, except for the link.

CREATE TABLE chat_files (
    id uuid PRIMARY KEY,
    owner_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    chat_id uuid REFERENCES chats(id) ON DELETE CASCADE,
    name text NOT NULL,
    media_type text NOT NULL,
    size bigint NOT NULL CHECK (size >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    linked_at timestamptz
);
CREATE INDEX chat_files_chat_idx ON chat_files (chat_id) WHERE chat_id IS NOT NULL;
CREATE INDEX chat_files_owner_idx ON chat_files (owner_id, created_at);

CREATE TABLE chat_file_chunks (
    file_id uuid NOT NULL REFERENCES chat_files(id) ON DELETE CASCADE,
    seq integer NOT NULL CHECK (seq >= 0),
    data bytea NOT NULL,
    PRIMARY KEY (file_id, seq)
);
