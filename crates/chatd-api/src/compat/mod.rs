//! The compatible protocols (API.md "Compatible protocols"; issue 35):
//! clients written for other services work unchanged against chatd.
//!
//! - [`openai`]: OpenAI's Responses and Conversations under `/v1`, as the
//!   official `openai` SDKs call them. A conversation is a chat
//!   (`conv_<chat id>`), a response is one turn of it (`resp_…`, mapped to
//!   the turn's first message in `chat_responses`), items are its messages.
//! - [`ai_sdk`]: the AI SDK's chat transport (`DefaultChatTransport`,
//!   `useChat`) under `/api/v2/ai-sdk/chat`: one request is one turn, its
//!   answer the UI message stream.
//!
//! Both are translations over the same state machine and stream as the
//! native API: every change is a transition of `chatd_store::ChatMachine`
//! (the send, the tool results, the interrupt, the regenerate), so
//! queueing while busy, fencing, idempotency, limits and budgets apply
//! unchanged; every live answer is read from a stream loop
//! ([`crate::stream`]), so it resumes on any replica. Their only state is
//! the mapping of their ids (migration `0021_compatible_protocols`):
//! [`turn`] derives a turn's messages and status from the chat.

pub mod ai_sdk;
pub mod openai;
pub(crate) mod turn;

use axum::Router;
use chatd_core::DynamicTool;

use crate::app::AppState;
use crate::error::{ApiError, ApiResult};

/// Client tools of a request checked like the native API's
/// `dynamic_tools` (count, unique names of letters, digits, `_` and `-`,
/// a JSON Schema object), the errors naming `tools`.
pub(crate) fn check_tools(tools: &[DynamicTool]) -> ApiResult<()> {
    crate::validate::dynamic_tools(tools).map_err(|e| match e.body().validations.first() {
        Some(v) => ApiError::invalid(
            v.field.replacen("dynamic_tools", "tools", 1),
            v.detail.clone(),
        ),
        None => e,
    })
}

/// The routes of both surfaces (mounted by [`crate::router`]).
pub fn routes() -> Router<AppState> {
    openai::routes().merge(ai_sdk::routes())
}
