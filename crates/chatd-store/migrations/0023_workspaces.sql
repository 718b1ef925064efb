-- Workspaces (API.md "Workspaces and provider-hosted tools"; issue 37).
--
-- `chats.workspace`: the chat offers the model the built-in workspace tools
-- (`shell`, `read_file`, `write_file`, `list_files`) on a directory of its
-- own (a model config's `options.workspace` offers them too).
-- `chats.workspace_bytes`, `workspace_files`, `workspace_updated_at`: the
-- committed workspace's size (the sum of its entries' `bytes`), its number
-- of files (regular files and symlinks) and the time of its last committed
-- change; all NULL until the first step that changed it committed. Written
-- only in the bundle that commits the step (with the step's rows), so they
-- always describe `chat_workspace_files` exactly; they count against the
-- owner's storage quota with their uploads.
--
-- `chat_workspace_files`: the committed workspace, one row per entry
-- (`kind` file, dir or symlink; `content` is a file's bytes, a symlink's
-- target, empty for a directory; `sha256` of the content). Each step's
-- changes are upserts and deletes of rows in the step's transaction, so a
-- crash shows all of a step's changes or none, and a replica that takes
-- the chat over materializes exactly these rows.

ALTER TABLE chats
    ADD COLUMN workspace boolean NOT NULL DEFAULT false,
    ADD COLUMN workspace_bytes bigint CHECK (workspace_bytes >= 0),
    ADD COLUMN workspace_files integer CHECK (workspace_files >= 0),
    ADD COLUMN workspace_updated_at timestamptz;

CREATE TABLE chat_workspace_files (
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    path text NOT NULL CHECK (path <> '' AND length(path) <= 4096 AND path NOT LIKE '/%'),
    kind text NOT NULL CHECK (kind IN ('file', 'dir', 'symlink')),
    content bytea NOT NULL,
    sha256 bytea NOT NULL CHECK (octet_length(sha256) = 32),
    bytes bigint NOT NULL CHECK (bytes >= 0),
    executable boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (chat_id, path)
);
