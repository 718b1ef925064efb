//! SQL of the `chat_send_receipts` table: the stored response of a send
//! made with a `client_message_id`, so that a repeat answers the same
//! (API.md "Details", idempotent sends). The response is the API's own
//! shape, stored as JSON; its owner (the HTTP layer) picks the type.

use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::PgExecutor;
use sqlx::types::Json;
use uuid::Uuid;

/// The stored `(request fingerprint, response)` of an earlier send with
/// `client_message_id` on chat `chat_id`.
pub async fn select<T: DeserializeOwned + Send + Unpin + 'static>(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    client_message_id: &str,
) -> sqlx::Result<Option<(Vec<u8>, T)>> {
    // The record of sqlx's macro cannot name `T`: the response is read as
    // its JSON text and parsed here, the same parse `Json<T>` makes.
    let row = sqlx::query!(
        r#"SELECT request_hash, response AS "response: Json<Box<sqlx::types::JsonRawValue>>"
           FROM chat_send_receipts WHERE chat_id = $1 AND client_message_id = $2"#,
        chat_id,
        client_message_id,
    )
    .fetch_optional(conn)
    .await?;
    row.map(|r| {
        let response =
            serde_json::from_str(r.response.0.get()).map_err(|e| sqlx::Error::ColumnDecode {
                index: "1".to_owned(),
                source: Box::new(e),
            })?;
        Ok((r.request_hash, response))
    })
    .transpose()
}

/// Remembers `response` of a send with `client_message_id` on chat
/// `chat_id` and its request fingerprint `request_hash` (a second receipt
/// for the same key is a unique violation, `23505`).
pub async fn insert<T: Serialize + Sync>(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    client_message_id: &str,
    request_hash: &[u8],
    response: &T,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO chat_send_receipts (chat_id, client_message_id, request_hash, response)
         VALUES ($1, $2, $3, $4)",
        chat_id,
        client_message_id,
        request_hash,
        // `as _`: sqlx checks a jsonb argument against `serde_json::Value`.
        Json(response) as _,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[tokio::test(flavor = "current_thread")]
    async fn select_the_stored_request_fingerprint_response_of_an_earlier_send_with()
    -> anyhow::Result<()> {
        use crate::queries::send_receipts;
        use serde_json::{Value, json};
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, store, owner) = (fx.pool(), &fx.store, fx.owner);
        let created = fx.create_chat("hi").await?;
        let chat = created.chat.clone();
        let response = json!({"queued": false, "messages": []});
        send_receipts::insert(pool, chat.id, "key-1", b"fingerprint", &response).await?;
        let stored = send_receipts::select::<Value>(pool, chat.id, "key-1").await?;
        assert_eq!(stored, Some((b"fingerprint".to_vec(), response)));
        assert!(
            send_receipts::select::<Value>(pool, chat.id, "key-2")
                .await?
                .is_none()
        );
        Ok(())
    }
}
