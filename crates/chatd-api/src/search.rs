//! Full-text search (API.md "Sign-in, search, sharing and export"):
//! `GET /api/v2/search?q=&limit=&after=`.
//!
//! Searches the text parts of the user and assistant messages of the active
//! branch (what `GET /chats/{chat}/messages` shows; older branches and
//! deleted messages are not searched) in the caller's own chats, archived
//! ones included, and the chats shared with them. Search is personal: an
//! admin finds only their own and shared chats too. Deleted chats are gone
//! from the database and never match. The store side is
//! `chatd_store::search` (a GIN index over a generated tsvector, migration
//! `0019_message_search.sql`).
//!
//! To open a hit, a client loads the messages around it with the existing
//! cursors of `GET /chats/{chat}/messages`: `before_id=<message_id + 1>`
//! (the hit and the messages before it) and `after_id=<message_id>` (those
//! after it).

use axum::Json;
use axum::extract::{RawQuery, State};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::app::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, E400, E401};
use crate::extract::QueryParams;
use crate::objects::ChatRole;
use crate::validate::IntRange;
use chatd_store::search::{
    self as store_search, GREATER_THAN, LESS_THAN, MARK_START, MARK_STOP, SearchCursor,
};

/// Length of `q`, in characters: 1..=500.
pub const QUERY_CHARS: IntRange = IntRange::new(1, 500);
/// Page size: 1..=50, default [`DEFAULT_LIMIT`].
pub const LIMIT: IntRange = IntRange::new(1, 50);
/// Page size without `limit`.
pub const DEFAULT_LIMIT: i64 = 20;

/// Query of `GET /api/v2/search`.
#[derive(Debug, Clone, IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)]
pub struct SearchParams {
    /// What to find, 1 to 500 characters, in web search syntax
    /// (PostgreSQL `websearch_to_tsquery('english', q)`): words (stemmed:
    /// `running` finds `run`), `"a phrase"`, `or`, `-word` to exclude. A
    /// query of only stop words (`the`, `of`) finds nothing.
    #[param(min_length = 1, max_length = 500)]
    q: String,
    /// Page size, 1..=50 (default 20).
    #[param(minimum = 1, maximum = 50)]
    limit: Option<i64>,
    /// The `next` of the previous page (opaque).
    after: Option<String>,
}

/// One result of a search.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchResult {
    /// The chat.
    pub chat_id: Uuid,
    /// The chat's title (plain text, not escaped).
    pub chat_title: String,
    /// The matching message (open it with `GET
    /// /chats/{chat_id}/messages?before_id=<message_id + 1>`).
    pub message_id: i64,
    /// `user` or `assistant`.
    pub role: ChatRole,
    /// The message's insertion time.
    pub created_at: DateTime<Utc>,
    /// A passage of the message's text as safe HTML: the text HTML-escaped
    /// (`&`, `<`, `>`, `"`, `'`), each match wrapped in `<mark>…</mark>`,
    /// up to two fragments joined by " … ". No other markup.
    pub snippet: String,
    /// Relevance (PostgreSQL `ts_rank_cd` with length normalisation);
    /// results are ordered by it, descending, then by `message_id`,
    /// descending.
    pub rank: f32,
}

/// `SearchPage`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SearchPage {
    /// The results, best first.
    pub results: Vec<SearchResult>,
    /// The `after` of the next page; `null` on the last page.
    pub next: Option<String>,
}

/// `GET /api/v2/search`: full-text search over the messages of the chats
/// the caller owns (archived included) and of those shared with them, best
/// first. Pages are keyset pages: `after` = the previous page's `next`.
/// Personal for admins too: another user's chat never appears.
///
/// # Errors
/// `400` naming `q` (absent, empty, over 500 characters), `limit` (not in
/// 1..=50) or `after` (not a `next` this route gave).
#[utoipa::path(
    get,
    path = "/api/v2/search",
    tag = "chats",
    params(SearchParams),
    responses(
        (status = 200, description = "A page of results, best first", body = SearchPage),
        E400, E401,
    )
)]
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<SearchPage>> {
    let query = QueryParams::parse(query.as_deref())?;
    let q = query.get("q").unwrap_or_default();
    let chars = q.chars().count() as i64;
    if !QUERY_CHARS.contains(chars) {
        return Err(ApiError::invalid_query(
            "q",
            format!(
                "must be {} to {} characters",
                QUERY_CHARS.min, QUERY_CHARS.max
            ),
        ));
    }
    let limit = query.int_in("limit", LIMIT.min, LIMIT.max, DEFAULT_LIMIT)?;
    let after = match query.get("after") {
        None => None,
        Some(raw) => Some(decode_cursor(raw).ok_or_else(|| {
            ApiError::invalid_query("after", "must be the `next` of a previous page")
        })?),
    };
    let mut hits =
        store_search::search(state.store().pool(), caller.id(), q, after, limit + 1).await?;
    let more = hits.len() as i64 > limit;
    hits.truncate(limit as usize);
    let next = if more {
        hits.last().map(|h| {
            encode_cursor(SearchCursor {
                rank: h.rank,
                message_id: h.message_id,
            })
        })
    } else {
        None
    };
    let results = hits
        .into_iter()
        .map(|h| SearchResult {
            chat_id: h.chat_id,
            chat_title: h.chat_title,
            message_id: h.message_id,
            role: h.role,
            created_at: h.created_at,
            snippet: highlight_html(&h.snippet),
            rank: h.rank,
        })
        .collect();
    Ok(Json(SearchPage { results, next }))
}

/// The opaque `next`: `v1.<rank's f32 bits, 8 hex digits>.<message id>`
/// (the rank's exact bits, so the next page starts exactly after it).
pub fn encode_cursor(cursor: SearchCursor) -> String {
    format!("v1.{:08x}.{}", cursor.rank.to_bits(), cursor.message_id)
}

/// Parses a `next` of [`encode_cursor`]; `None` for anything else (a
/// non-finite or negative rank, a non-positive id).
pub fn decode_cursor(raw: &str) -> Option<SearchCursor> {
    let rest = raw.strip_prefix("v1.")?;
    let (bits, id) = rest.split_once('.')?;
    if bits.len() != 8 || !bits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let rank = f32::from_bits(u32::from_str_radix(bits, 16).ok()?);
    if !rank.is_finite() || rank < 0.0 {
        return None;
    }
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let message_id = id.parse::<i64>().ok().filter(|v| *v > 0)?;
    Some(SearchCursor { rank, message_id })
}

/// A `ts_headline` snippet as safe HTML: escapes the text (with
/// [`LESS_THAN`]/[`GREATER_THAN`] standing for `<`/`>`) and turns
/// [`MARK_START`]/[`MARK_STOP`] (which the store removed from the text
/// before highlighting, so they only mark matches) into `<mark>`/`</mark>`.
/// An unbalanced marker is closed or dropped, so the markup is always
/// well-formed.
pub fn highlight_html(snippet: &str) -> String {
    let mut out = String::with_capacity(snippet.len() + 16);
    let mut open = false;
    for c in snippet.chars() {
        match c {
            MARK_START if !open => {
                out.push_str("<mark>");
                open = true;
            }
            MARK_STOP if open => {
                out.push_str("</mark>");
                open = false;
            }
            MARK_START | MARK_STOP => {}
            '&' => out.push_str("&amp;"),
            '<' | LESS_THAN => out.push_str("&lt;"),
            '>' | GREATER_THAN => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    if open {
        out.push_str("</mark>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_escaped_and_marked() {
        let raw = format!(
            "{LESS_THAN}script{GREATER_THAN}alert('x')</script> & {MARK_START}cats{MARK_STOP} \"q\""
        );
        assert_eq!(
            highlight_html(&raw),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; <mark>cats</mark> &quot;q&quot;"
        );
        // Unbalanced markers never leave an open or stray tag.
        assert_eq!(highlight_html(&format!("{MARK_START}a")), "<mark>a</mark>");
        assert_eq!(highlight_html(&format!("a{MARK_STOP}b")), "ab");
    }

    #[test]
    fn cursors_round_trip_and_reject_garbage() {
        let c = SearchCursor {
            rank: 0.123_456_79,
            message_id: 42,
        };
        assert_eq!(decode_cursor(&encode_cursor(c)), Some(c));
        for bad in [
            "",
            "v1.",
            "v1.zzzzzzzz.1",
            "v1.3f800000.0",
            "v1.3f800000.-1",
            "v1.7fc00000.1",
            "v2.3f800000.1",
            "v1.3f800000.1.2",
        ] {
            assert_eq!(decode_cursor(bad), None, "{bad}");
        }
    }
}
