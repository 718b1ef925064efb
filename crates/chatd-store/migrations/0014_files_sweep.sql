-- Collection of unlinked files (API.md "Limits, budgets and the token
-- lifecycle": "Files linked to no chat are deleted 24 h after upload").
--
-- Every replica's files sweep looks for the oldest files linked to no chat
-- (chatd_store::queries::files::delete_expired_unlinked); this partial index
-- keeps that look cheap however many linked files there are. The storage
-- quota's sum and the file list use chat_files_owner_idx (0008).
CREATE INDEX chat_files_unlinked_idx ON chat_files (created_at) WHERE chat_id IS NULL;
