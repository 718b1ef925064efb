//! Statements about a database itself rather than its tables: the embedded
//! PostgreSQL creates chatd's database on first start.

use sqlx::{AssertSqlSafe, PgExecutor};

/// PostgreSQL's `duplicate_database`.
pub const DUPLICATE_DATABASE: &str = "42P04";

/// Whether a database named `name` exists on the server.
pub async fn exists(conn: impl PgExecutor<'_>, name: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(conn)
        .await
}

/// Creates database `name` (quoted as an identifier, so any name is safe).
/// A concurrent creation of the same name fails with [`DUPLICATE_DATABASE`].
pub async fn create(conn: impl PgExecutor<'_>, name: &str) -> sqlx::Result<()> {
    sqlx::query(AssertSqlSafe(format!(
        "CREATE DATABASE {}",
        quote_identifier(name)
    )))
    .execute(conn)
    .await
    .map(|_| ())
}

/// `name` as a quoted SQL identifier: in double quotes, each double quote
/// doubled.
fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn identifiers_are_quoted_with_inner_quotes_doubled() {
        assert_eq!(super::quote_identifier("chatd"), "\"chatd\"");
        assert_eq!(super::quote_identifier("a\"b"), "\"a\"\"b\"");
    }
}
