//! Full-text search over messages (API.md "Sign-in, search, sharing and
//! export": `GET /api/v2/search`; migration `0019_message_search.sql`).
//!
//! What is searched: the `text` parts of the user and assistant messages of
//! the active branch (`NOT deleted`, which also excludes `detached` rows)
//! that clients see (`visibility <> 'model'`), in the chats the user owns,
//! archived ones included, and the chats shared with them (`chat_shares`).
//! Deleted chats are deleted rows (`DELETE FROM chats` cascades), so they
//! never match. Search is personal: an admin searches only their own and
//! shared chats, like anyone.
//!
//! Order: `ts_rank_cd` (cover density, normalised by 1 + log(length):
//! normalization 1) descending, then message id descending; pages are keyset
//! pages over that pair ([`SearchCursor`]).

use chatd_core::ChatRole;
use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// The private-use character `ts_headline` puts before a match
/// (`StartSel`); removed from the text first, so every occurrence in a
/// snippet is a highlight start.
pub const MARK_START: char = '\u{E000}';
/// The private-use character `ts_headline` puts after a match (`StopSel`).
pub const MARK_STOP: char = '\u{E001}';
/// The private-use character that stands for `<` in a snippet: the text's
/// `<` and `>` are replaced before `ts_headline`, whose parser would
/// otherwise drop anything that looks like an HTML tag from the passage.
pub const LESS_THAN: char = '\u{E002}';
/// The private-use character that stands for `>` in a snippet.
pub const GREATER_THAN: char = '\u{E003}';

/// Where a page of results starts: strictly after the result with this
/// rank and message id in the order (rank descending, id descending).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchCursor {
    /// The rank of the previous page's last result, as PostgreSQL's
    /// `real` computed it (compared exactly: carry its bits).
    pub rank: f32,
    /// The message id of the previous page's last result.
    pub message_id: i64,
}

/// One match of [`search`].
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The chat.
    pub chat_id: Uuid,
    /// The chat's title.
    pub chat_title: String,
    /// The message.
    pub message_id: i64,
    /// `user` or `assistant`.
    pub role: ChatRole,
    /// The message's insertion time.
    pub created_at: DateTime<Utc>,
    /// `ts_rank_cd(search_tsv, query, 1)`: larger is better.
    pub rank: f32,
    /// `ts_headline` of the message's text: plain text (not escaped), up to
    /// two fragments of 15 to 35 words joined by " … ", with each match
    /// between [`MARK_START`] and [`MARK_STOP`] and `<`, `>` written
    /// [`LESS_THAN`], [`GREATER_THAN`] (these four occur nowhere else).
    pub snippet: String,
}

/// The matches of `query` (`websearch_to_tsquery('english', query)`: words,
/// `"quoted phrases"`, `or`, `-excluded`) readable by `user_id`, best first,
/// after `after`, at most `limit`. A query of only stop words matches
/// nothing (PostgreSQL's notice is not an error).
///
/// # Errors
/// Database errors.
pub async fn search(
    conn: impl PgExecutor<'_>,
    user_id: Uuid,
    query: &str,
    after: Option<SearchCursor>,
    limit: i64,
) -> sqlx::Result<Vec<SearchHit>> {
    let rows = sqlx::query!(
        r#"WITH q AS (SELECT websearch_to_tsquery('english', $2) AS q),
           readable AS (
               SELECT c.id FROM chats c WHERE c.owner_id = $1
               UNION
               SELECT s.chat_id FROM chat_shares s WHERE s.user_id = $1
           ),
           page AS (
               SELECT m.id, m.chat_id, m.role, m.created_at, m.content,
                      ts_rank_cd(m.search_tsv, q.q, 1) AS rank
               FROM chat_messages m, q
               WHERE m.search_tsv @@ q.q
                 AND NOT m.deleted AND m.role IN ('user', 'assistant') AND m.visibility <> 'model'
                 AND m.chat_id IN (SELECT id FROM readable)
                 AND ($3::real IS NULL OR (ts_rank_cd(m.search_tsv, q.q, 1), m.id) < ($3::real, $4::bigint))
               ORDER BY rank DESC, m.id DESC
               LIMIT $5
           )
           SELECT p.id AS "id!", p.chat_id AS "chat_id!", c.title AS "title!", p.role AS "role!",
                  p.created_at AS "created_at!", p.rank AS "rank!",
                  ts_headline('english',
                      translate(translate(chat_message_search_text(p.content), U&'\E000\E001\E002\E003', ''),
                                '<>', U&'\E002\E003'),
                      q.q,
                      'StartSel=' || U&'\E000' || ', StopSel=' || U&'\E001'
                          || ', MaxWords=35, MinWords=15, MaxFragments=2, FragmentDelimiter=" … "'
                  ) AS "snippet!"
           FROM page p JOIN chats c ON c.id = p.chat_id, q
           ORDER BY p.rank DESC, p.id DESC"#,
        user_id,
        query,
        after.map(|a| a.rank),
        after.map(|a| a.message_id),
        limit,
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|r| {
            Ok(SearchHit {
                chat_id: r.chat_id,
                chat_title: r.title,
                message_id: r.id,
                role: crate::queries::decode_column("role", r.role)?,
                created_at: r.created_at,
                rank: r.rank,
                snippet: r.snippet,
            })
        })
        .collect()
}
