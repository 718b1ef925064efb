-- The per-user usage ledger behind monthly budgets (API.md "Limits, budgets
-- and the token lifecycle": "Budgets", `GET /users/{user}/usage`).
--
-- Every model call of a user's chats is counted in the calendar month (UTC)
-- in which its result commits, in the same transaction: an answer or a
-- compaction summary by the triggers below (the message row that stores
-- the call's usage and cost), a title generation by the worker calling
-- `chatd_add_usage` in the transaction that stores the title. Sub-agents are
-- chats of the same owner, so their calls count for that owner. The ledger
-- is independent of the messages afterwards: deleting a chat or a message
-- does not give spend back.
--
-- A user's period is split into 16 shard rows (the chat's hash picks one),
-- so that commits of a user's chats running at once rarely wait for each
-- other's row lock; the budget check sums the user's (at most 16) rows of
-- the period, one primary-key range scan.
--
-- Input tokens are the whole prompt (uncached input plus cache reads and
-- writes, `chatd_core::Usage::prompt_tokens`, what the price applies to);
-- output tokens include reasoning. Spend is `total_cost_micros`, NULL (a
-- model without prices) counting 0.

CREATE TABLE user_usage (
    user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    -- The first instant of the calendar month (UTC).
    period_start timestamptz NOT NULL,
    shard smallint NOT NULL CHECK (shard >= 0 AND shard < 16),
    spent_micros bigint NOT NULL DEFAULT 0,
    input_tokens bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (user_id, period_start, shard)
);

-- Adds one model call's usage of chat `p_chat_id` to its owner's current
-- period. Nothing when the chat does not exist. PL/pgSQL, not SQL: its
-- statement's plan is cached for the session (a SQL function's INSERT is
-- planned again on every call, which doubled the trigger's cost).
CREATE FUNCTION chatd_add_usage(p_chat_id uuid, p_spent_micros bigint, p_input_tokens bigint, p_output_tokens bigint)
RETURNS void AS $$
BEGIN
    INSERT INTO user_usage AS u (user_id, period_start, shard, spent_micros, input_tokens, output_tokens)
    SELECT c.owner_id, date_trunc('month', now(), 'UTC'), (hashtext(c.id::text) & 15)::smallint,
           p_spent_micros, p_input_tokens, p_output_tokens
    FROM chats c WHERE c.id = p_chat_id
    ON CONFLICT (user_id, period_start, shard) DO UPDATE
    SET spent_micros = u.spent_micros + EXCLUDED.spent_micros,
        input_tokens = u.input_tokens + EXCLUDED.input_tokens,
        output_tokens = u.output_tokens + EXCLUDED.output_tokens;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION count_chat_message_usage() RETURNS trigger AS $$
DECLARE
    spent bigint := coalesce(NEW.total_cost_micros, 0);
    input bigint := coalesce(NEW.input_tokens, 0) + coalesce(NEW.cache_read_tokens, 0)
        + coalesce(NEW.cache_creation_tokens, 0);
    output bigint := coalesce(NEW.output_tokens, 0);
BEGIN
    IF TG_OP = 'UPDATE' THEN
        -- Usage set or corrected later: only the difference is new.
        spent := spent - coalesce(OLD.total_cost_micros, 0);
        input := input - (coalesce(OLD.input_tokens, 0) + coalesce(OLD.cache_read_tokens, 0)
            + coalesce(OLD.cache_creation_tokens, 0));
        output := output - coalesce(OLD.output_tokens, 0);
    END IF;
    PERFORM chatd_add_usage(NEW.chat_id, spent, input, output);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

-- Only rows that carry usage or cost (model results) fire it.
CREATE TRIGGER trigger_count_chat_message_usage_on_insert
AFTER INSERT ON chat_messages
FOR EACH ROW
WHEN (NEW.total_cost_micros IS NOT NULL OR NEW.input_tokens IS NOT NULL
      OR NEW.output_tokens IS NOT NULL OR NEW.cache_read_tokens IS NOT NULL
      OR NEW.cache_creation_tokens IS NOT NULL)
EXECUTE FUNCTION count_chat_message_usage();

CREATE TRIGGER trigger_count_chat_message_usage_on_update
AFTER UPDATE OF total_cost_micros, input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens
ON chat_messages
FOR EACH ROW
WHEN (OLD.total_cost_micros IS DISTINCT FROM NEW.total_cost_micros
      OR OLD.input_tokens IS DISTINCT FROM NEW.input_tokens
      OR OLD.output_tokens IS DISTINCT FROM NEW.output_tokens
      OR OLD.cache_read_tokens IS DISTINCT FROM NEW.cache_read_tokens
      OR OLD.cache_creation_tokens IS DISTINCT FROM NEW.cache_creation_tokens)
EXECUTE FUNCTION count_chat_message_usage();

-- Backfill the current month from the messages that exist already (the
-- triggers count only rows written from now on, so nothing counts twice).
INSERT INTO user_usage (user_id, period_start, shard, spent_micros, input_tokens, output_tokens)
SELECT c.owner_id, date_trunc('month', now(), 'UTC'), (hashtext(c.id::text) & 15)::smallint,
       sum(coalesce(m.total_cost_micros, 0)),
       sum(coalesce(m.input_tokens, 0) + coalesce(m.cache_read_tokens, 0)
           + coalesce(m.cache_creation_tokens, 0)),
       sum(coalesce(m.output_tokens, 0))
FROM chat_messages m
JOIN chats c ON c.id = m.chat_id
WHERE m.created_at >= date_trunc('month', now(), 'UTC')
  AND (m.total_cost_micros IS NOT NULL OR m.input_tokens IS NOT NULL
       OR m.output_tokens IS NOT NULL OR m.cache_read_tokens IS NOT NULL
       OR m.cache_creation_tokens IS NOT NULL)
GROUP BY 1, 2, 3;
