//! `GET /v1/models` and `GET /v1/models/{model}`: the enabled model
//! configs, each once, named by their `model` string (API.md pinned
//! details: `model` is a config's `model` string, the default config when
//! several share it, or a config id), and [`resolve_model`], which every
//! response uses.

use axum::Json;
use axum::extract::State;
use chatd_store::admin::ModelConfigRow;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::PathParams;

/// The enabled configs, default first, without repeated `model` strings
/// (the first, i.e. the default one, wins).
async fn enabled(state: &AppState) -> ApiResult<Vec<ModelConfigRow>> {
    let rows = chatd_store::admin::model_configs::list(state.store().pool(), true).await?;
    let mut seen = std::collections::HashSet::new();
    Ok(rows
        .into_iter()
        .filter(|r| seen.insert(r.def.model.clone()))
        .collect())
}

fn model_object(row: &ModelConfigRow) -> Value {
    json!({
        "id": row.def.model,
        "object": "model",
        "created": row.created_at.timestamp(),
        "owned_by": "chatd",
    })
}

/// `GET /v1/models` → `{object: "list", data: [{id, object: "model",
/// created, owned_by}]}`.
pub async fn list_models(State(state): State<AppState>, _caller: Caller) -> ApiResult<Json<Value>> {
    let data: Vec<Value> = enabled(&state).await?.iter().map(model_object).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/models/{model}` → the model object; `404` when no enabled
/// config has that `model` string or id.
pub async fn get_model(
    State(state): State<AppState>,
    _caller: Caller,
    params: PathParams,
) -> ApiResult<Json<Value>> {
    let name = params.raw("model")?.to_owned();
    match resolve(&state, &name).await? {
        Some(row) => Ok(Json(model_object(&row))),
        None => Err(ApiError::not_found(format!(
            "The model '{name}' does not exist."
        ))),
    }
}

async fn resolve(state: &AppState, name: &str) -> ApiResult<Option<ModelConfigRow>> {
    // Default first: the first with the name is the default one when
    // several share it.
    let rows = chatd_store::admin::model_configs::list(state.store().pool(), true).await?;
    let by_id = Uuid::parse_str(name).ok();
    let by_name = rows.iter().position(|r| r.def.model == name);
    let found = by_name.or_else(|| rows.iter().position(|r| Some(r.def.id) == by_id));
    Ok(found.map(|i| rows.into_iter().nth(i).expect("an index of rows")))
}

/// The enabled model config `model` names (its `model` string, or its
/// id).
///
/// # Errors
/// `400` naming `model` when there is none.
pub async fn resolve_model(state: &AppState, model: &str) -> ApiResult<ModelConfigRow> {
    resolve(state, model).await?.ok_or_else(|| {
        ApiError::invalid(
            "model",
            format!(
                "The model '{model}' does not exist or is not enabled (GET /v1/models lists them)."
            ),
        )
    })
}
