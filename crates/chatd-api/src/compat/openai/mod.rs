//! OpenAI's Responses and Conversations under `/v1` (API.md "Compatible
//! protocols" and its pinned details), as the official `openai` SDKs call
//! them.
//!
//! - `GET /v1/models`, `GET /v1/models/{model}`: the enabled model
//!   configs, each once, by their `model` string ([`models`]).
//! - `POST /v1/conversations`, `GET|POST|DELETE /v1/conversations/{id}`,
//!   `GET|POST /v1/conversations/{id}/items` ([`conversations`]): a
//!   conversation is a chat (`conv_<chat id>`); creating one or adding items
//!   never runs the model.
//! - `POST /v1/responses`, `GET /v1/responses/{id}` (with `stream=true` and
//!   `starting_after`), `POST /v1/responses/{id}/cancel` ([`responses`]);
//!   the event stream is [`events`].
//!
//! Every error answers OpenAI's shape `{"error": {message, type, param,
//! code}}` ([`errors`]), whatever produced it (the authentication
//! extractor, the body limit, the rate limit, a handler).

pub mod conversations;
pub mod errors;
pub mod events;
pub mod items;
pub mod models;
pub mod responses;

use axum::Router;
use axum::routing::{get, post};

use crate::app::AppState;

/// The `/v1` routes, with [`errors::openai_errors`] on each.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(models::list_models))
        .route("/v1/models/{model}", get(models::get_model))
        .route(
            "/v1/conversations",
            post(conversations::create_conversation),
        )
        .route(
            "/v1/conversations/{conversation}",
            get(conversations::get_conversation)
                .post(conversations::update_conversation)
                .delete(conversations::delete_conversation),
        )
        .route(
            "/v1/conversations/{conversation}/items",
            get(conversations::list_items).post(conversations::create_items),
        )
        .route("/v1/responses", post(responses::create_response))
        .route("/v1/responses/{response}", get(responses::get_response))
        .route(
            "/v1/responses/{response}/cancel",
            post(responses::cancel_response),
        )
        // Any other path under /v1: `404` in OpenAI's shape.
        .route("/v1/{*rest}", axum::routing::any(crate::health::not_found))
        .route_layer(axum::middleware::from_fn(errors::openai_errors))
}
