-- The compatible protocols (API.md "Compatible protocols"; issue 35): the
-- only state of their own is the durable mapping of their ids to chats and
-- turns. Everything else (status, output, usage) is read from the chat.
--
-- chat_responses: an OpenAI Responses `resp_…` id names one turn of a chat.
-- The turn starts at `start_message_id`: the user message the response sent,
-- or, for a response that answered function calls, the assistant message
-- whose calls it answered (`continuation`). A response sent while the chat
-- was busy waits in the queue as `queued_message_id` until it is promoted;
-- the promoted user message carries that id in `chat_messages.queued_message_id`.
-- The request's options for that turn (`instructions`, the client `tools`,
-- `max_output_tokens`) are read by the worker for the turn's model calls.
-- `answer_message_id` is an id taken from the messages' sequence when the
-- turn starts (with the send, or with the promotion of its queued message):
-- the turn's first assistant message is inserted with it while it is still
-- greater than every id of the chat (ids grow along a branch), so that a
-- stream can name the answer before it is committed (the AI SDK's `start`
-- chunk). Otherwise the answer takes the next id as usual.
CREATE TABLE chat_responses (
    id text PRIMARY KEY CHECK (id ~ '^resp_[0-9a-f]{32}$'),
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    owner_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    start_message_id bigint,
    queued_message_id bigint,
    continuation boolean NOT NULL DEFAULT false,
    previous_response_id text,
    model text NOT NULL,
    model_config_id uuid,
    instructions text,
    tools jsonb NOT NULL DEFAULT '[]'::jsonb,
    max_output_tokens integer CHECK (max_output_tokens > 0),
    reasoning_effort text,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    background boolean NOT NULL DEFAULT false,
    answer_message_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (start_message_id IS NOT NULL OR queued_message_id IS NOT NULL)
);
CREATE INDEX chat_responses_chat_start_idx ON chat_responses (chat_id, start_message_id);
CREATE INDEX chat_responses_queued_idx ON chat_responses (chat_id, queued_message_id)
    WHERE queued_message_id IS NOT NULL;
-- Every assistant insert looks for a reservation above the chat's newest id:
-- a range scan of this index, however many responses the chat has.
CREATE INDEX chat_responses_answer_idx ON chat_responses (chat_id, answer_message_id)
    WHERE answer_message_id IS NOT NULL;

-- The AI SDK chat transport's chat ids: `useChat` generates its own ids, so
-- an id that is not a chat id is mapped, per user, to the chat created on
-- its first use.
CREATE TABLE ai_sdk_chats (
    owner_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    client_id text NOT NULL CHECK (length(client_id) BETWEEN 1 AND 128),
    chat_id uuid NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, client_id)
);
CREATE INDEX ai_sdk_chats_chat_idx ON ai_sdk_chats (chat_id);
