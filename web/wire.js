// @ts-check
// The wire shapes of ../../shared/API.md that the web UI reads and sends,
// as JSDoc types for `tsc --checkJs` (scripts/typecheck.sh). No code: the
// other modules refer to them as `import('./wire.js').Chat`; the browser
// never loads this file (it is served only so that every script under
// web/ is embedded, see crates/chatd-api/src/web.rs).
//
// Ids: chats, users, models, files and tokens are UUID strings; messages
// and queued messages are int64 numbers. Times are RFC 3339 strings.
// Fields the UI does not read are left out.

// ---------------------------------------------------------------------------
// Chats ("Objects")

/**
 * @typedef {'waiting' | 'running' | 'interrupting' | 'requires_action' | 'error'} ChatStatus
 */

/**
 * `ChatError` (API.md "Objects").
 * @typedef {object} ChatError
 * @property {string} message
 * @property {string} [detail]
 * @property {string} [kind] generic, rate_limit, timeout, overloaded, auth,
 *   invalid_request, context_length, usage_limit, invalid_state
 * @property {string} [provider]
 * @property {boolean} [retryable]
 * @property {number} [status_code]
 */

/**
 * `Chat.context` (API.md "Context management").
 * @typedef {object} ChatContext
 * @property {number} tokens
 * @property {number} limit
 * @property {number} percent
 * @property {boolean} estimated
 * @property {number} compactions
 * @property {number | null} [compacted_through_message_id]
 */

/**
 * `Chat.forked_from` (API.md "Branches, regenerate and fork"): the chat
 * and the message a fork copied up to.
 * @typedef {object} ForkOrigin
 * @property {string} chat_id
 * @property {number} message_id
 */

/**
 * `Chat` (API.md "Objects", with `message_count` and
 * `last_message_preview` of "Message windows", `subagents` and
 * `plan_mode` of "Sub-agents and plan mode").
 * @typedef {object} Chat
 * @property {string} id
 * @property {string} [owner_id]
 * @property {string | null} [parent_chat_id]
 * @property {string} title
 * @property {ChatStatus} status
 * @property {boolean} archived
 * @property {string | null} [last_model_config_id]
 * @property {ChatError | null} [last_error]
 * @property {number} history_version
 * @property {'plan' | null} [plan_mode]
 * @property {boolean} [subagents]
 * @property {{bytes: number, files: number, updated_at: string} | null} [workspace]
 *   the committed workspace ("Workspaces and provider-hosted tools"): null
 *   without one, and until its first committed change
 * @property {ChatContext | null} [context]
 * @property {number} [message_count]
 * @property {string | null} [last_message_preview]
 * @property {number | null} [active_leaf_id] the last message of the
 *   active branch ("Branches, regenerate and fork")
 * @property {ForkOrigin | null} [forked_from] set on a fork
 * @property {string} created_at
 * @property {string} updated_at
 */

// ---------------------------------------------------------------------------
// Messages and their parts

/** @typedef {'system' | 'user' | 'assistant' | 'tool'} Role */

/**
 * A source a provider-hosted tool (web search) gave for a text part.
 * @typedef {{url: string, title?: string, cited_text?: string, encrypted_index?: string}} Citation
 */
/** @typedef {{type: 'text', text: string, citations?: Citation[]}} TextPart */
/**
 * A provider-hosted tool's call and result (API.md "Workspaces and
 * provider-hosted tools"): the provider ran it, chatd never does.
 * @typedef {{type: 'provider-tool-call', tool_call_id: string, tool_name: string, input: any}} ProviderToolCallPart
 */
/** @typedef {{type: 'provider-tool-result', tool_call_id: string, tool_name: string, result: any, is_error: boolean}} ProviderToolResultPart */
/** A streamed citation of the text part in progress (`message_part` only). */
/** @typedef {{type: 'citation'} & Citation} CitationDelta */
/** @typedef {{type: 'reasoning', text: string}} ReasoningPart */
/**
 * A tool call: committed with `args` (the JSON arguments as a string);
 * streamed as `args_delta` pieces.
 * @typedef {{type: 'tool-call', tool_call_id: string, tool_name: string, args?: string, args_delta?: string}} ToolCallPart
 */
/** @typedef {{type: 'tool-result', tool_call_id: string, tool_name: string, result: any, is_error: boolean}} ToolResultPart */
/** A decision on a call that waited for approval (API.md "Tool approval"). */
/** @typedef {{type: 'tool-approval', tool_call_id: string, tool_name: string, approved: boolean, reason?: string | null}} ToolApprovalPart */
/** @typedef {{type: 'file', file_id: string, media_type: string, name?: string}} FilePart */
/** The boundary of `POST .../clear-context` (API.md "Context management"). */
/** @typedef {{type: 'context-cleared'}} ContextClearedPart */

/**
 * `ChatMessagePart`, tagged by `type`.
 * @typedef {TextPart | ReasoningPart | ToolCallPart | ToolResultPart | ToolApprovalPart | FilePart | ContextClearedPart | ProviderToolCallPart | ProviderToolResultPart | CitationDelta} Part
 */

/**
 * `ChatInputPart` (requests).
 * @typedef {{type: 'text', text: string} | {type: 'file', file_id: string}} InputPart
 */

/**
 * `Usage`.
 * @typedef {object} Usage
 * @property {number} input_tokens
 * @property {number} output_tokens
 * @property {number} total_tokens
 * @property {number} [reasoning_tokens]
 * @property {number} [cache_read_tokens] prompt tokens read from the provider's cache (not in `input_tokens`)
 * @property {number} [cache_creation_tokens] prompt tokens written to it (not in `input_tokens`)
 */

/**
 * `ChatMessage`. `finish_reason` (`stop`, `length`, `content_filter`,
 * `interrupted`) is absent from older servers, as are `parent_id` and
 * `sibling_ids` (API.md "Branches, regenerate and fork": the ids of the
 * messages that follow the same parent, ascending, itself included; `[]`
 * when it has no siblings).
 * @typedef {object} ChatMessage
 * @property {number} id
 * @property {Role} role
 * @property {Part[]} content
 * @property {string} created_at
 * @property {string | null} [model_config_id]
 * @property {number} revision
 * @property {Usage | null} [usage] of the one model call that wrote the message
 * @property {number | null} [total_cost_micros] that call's price, when the model has prices
 * @property {string | null} [finish_reason]
 * @property {number | null} [parent_id]
 * @property {number[]} [sibling_ids]
 */

/**
 * `ChatQueuedMessage` (with `steer` and `position` of "Busy behaviours").
 * @typedef {object} QueuedMessage
 * @property {number} id
 * @property {Part[]} content
 * @property {boolean} [steer]
 * @property {number} [position]
 */

/**
 * `GET /chats/{chat}/messages` (`window=true` adds `window`).
 * @typedef {object} MessagePage
 * @property {ChatMessage[]} messages
 * @property {QueuedMessage[]} [queued_messages]
 * @property {boolean} has_more
 * @property {{head_last_id: number, tail_first_id: number, omitted: number}} [window]
 */

/**
 * `POST /chats/{chat}/messages`.
 * @typedef {object} SendResult
 * @property {boolean} queued
 * @property {ChatMessage} [message]
 * @property {QueuedMessage} [queued_message]
 * @property {ChatMessage[]} [messages]
 */

/**
 * `PATCH /chats/{chat}/messages/{message}`: the edited text is a new
 * sibling; `deleted_message_ids` are the ids that left the active branch
 * (kept on an inactive one).
 * @typedef {object} EditResult
 * @property {ChatMessage} [message]
 * @property {ChatMessage[]} [messages]
 * @property {number[]} [deleted_message_ids]
 */

/**
 * `DynamicTool` (`read_only` offers it in plan mode).
 * @typedef {object} DynamicTool
 * @property {string} name
 * @property {string} description
 * @property {object} input_schema
 * @property {boolean} [read_only]
 */

/**
 * `GET /chats/models`: a model a chat may use.
 * @typedef {object} ModelOption
 * @property {string} id
 * @property {string} model
 * @property {string | null} [display_name]
 * @property {boolean} [is_default]
 */

/**
 * `POST /files` (API.md "Files").
 * @typedef {object} UploadedFile
 * @property {string} id
 * @property {string} name
 * @property {string} media_type
 * @property {number} size
 */

// ---------------------------------------------------------------------------
// Stream events (API.md "Stream")

/**
 * `action_required`: the calls waiting for client tool results or approval.
 * @typedef {object} ActionRequired
 * @property {{tool_call_id: string, tool_name: string, args: string, kind?: 'client_tool' | 'approval'}[]} tool_calls
 * @property {string | null} [deadline_at]
 */

/**
 * `retry`: the next attempt of a failed model call.
 * @typedef {object} RetryState
 * @property {number} attempt
 * @property {number} delay_ms
 * @property {ChatError | null} [error]
 * @property {string} retrying_at
 */

/**
 * `message_part`: a live delta of the answer being written.
 * @typedef {object} LivePart
 * @property {Role} role
 * @property {Part} part
 * @property {number} history_version
 * @property {number} generation_attempt
 * @property {number} seq
 */

/**
 * `ChatStreamEvent`: `{type, chat_id}` and one payload field per type.
 * @typedef {{chat_id?: string} & (
 *   {type: 'message', message: ChatMessage}
 *   | {type: 'message_part', message_part: LivePart}
 *   | {type: 'status', status: {status: ChatStatus, history_version: number}}
 *   | {type: 'error', error: ChatError}
 *   | {type: 'queue_update', queued_messages: QueuedMessage[]}
 *   | {type: 'action_required', action_required: ActionRequired}
 *   | {type: 'retry', retry: RetryState}
 *   | {type: 'preview_reset'}
 *   | {type: 'context', context: ChatContext}
 *   | {type: 'history_reset'}
 * )} StreamEvent
 */

// ---------------------------------------------------------------------------
// Accounts (API.md "Limits, budgets and the token lifecycle")

/**
 * `GET /users/me`, and a user of the admin list.
 * @typedef {object} User
 * @property {string} id
 * @property {string} username
 * @property {'admin' | 'member'} role
 * @property {boolean} [disabled]
 */

/** The `body` of a non-2xx answer (API.md "Errors"). */
/** @typedef {{message?: string, detail?: string, validations?: {field: string, detail: string}[]}} ErrorBody */

export {};
