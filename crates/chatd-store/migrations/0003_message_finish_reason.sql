-- Why an assistant message ended: the provider's finish reason ('stop',
-- 'length', 'tool_calls', 'content_filter') or 'interrupted' for the partial
-- message FinishInterruption keeps. NULL when unknown and on other roles;
-- rows written before this migration stay NULL.
--
-- A nullable column without a default is a catalog-only change; the check is
-- added NOT VALID so that it does not scan the table under the ALTER's lock
-- (every existing row is NULL, and new rows are checked).
ALTER TABLE chat_messages ADD COLUMN finish_reason text;
ALTER TABLE chat_messages ADD CONSTRAINT chat_messages_finish_reason_check
    CHECK (finish_reason IN ('stop', 'length', 'tool_calls', 'content_filter', 'interrupted')) NOT VALID;
