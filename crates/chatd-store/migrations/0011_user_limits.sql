-- Per-user limits and the disabled flag (API.md "Limits, budgets and the
-- token lifecycle"). A NULL limit column means "the server default"
-- (chatd_core::limits::LimitDefaults::resolve); a disabled user's tokens
-- answer 401 and their open streams close.
ALTER TABLE users
    ADD COLUMN disabled boolean NOT NULL DEFAULT false,
    ADD COLUMN max_running_chats integer CHECK (max_running_chats >= 0),
    ADD COLUMN requests_per_minute integer CHECK (requests_per_minute >= 1),
    ADD COLUMN monthly_budget_micros bigint CHECK (monthly_budget_micros >= 0),
    ADD COLUMN monthly_token_budget bigint CHECK (monthly_token_budget >= 0),
    ADD COLUMN max_storage_bytes bigint CHECK (max_storage_bytes >= 0);
