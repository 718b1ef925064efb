//! Encryption at rest of provider API keys and MCP server secrets (API.md
//! "Limits, budgets and the token lifecycle"; DESIGN.md "Decisions for
//! round 3": RustCrypto AEAD, no home-made cryptography).
//!
//! What is encrypted: `chat_providers.api_key`, and the `env` and `headers`
//! of `chat_mcp_servers` (each whole map, when it is not empty). Commands,
//! arguments and URLs are not.
//!
//! - The key is 32 bytes given to `chatd serve` with `--secret-key-file
//!   PATH` (a file holding the key) or `CHATD_SECRET_KEY` (the key itself),
//!   written as 64 hex digits or as base64 ([`SecretKey::parse`]).
//! - A value is sealed with XChaCha20-Poly1305 under a random 24-byte nonce
//!   and stored as `enc:v1:<base64(nonce ‖ ciphertext ‖ tag)>` ([`PREFIX`]),
//!   so plain and encrypted values are told apart. The associated data is
//!   the value's place, `<table>.<column>:<row id>`, so a sealed value copied
//!   to another row or column does not decrypt.
//! - Encryption and decryption happen in the store's queries
//!   ([`crate::queries::providers`], [`crate::queries::mcp_servers`]): every
//!   reader gets plaintext, every writer stores sealed values when a key is
//!   configured. A plain value is read as it is (a row written by hand).
//! - [`prepare`] runs at startup: with a key it checks that the key is the
//!   one the database's secrets were sealed with (a sealed check value in
//!   `cluster_settings`), then seals every plain value in place, in one
//!   transaction holding the rows' locks, so replicas starting together do
//!   it once; without a key it refuses to start when sealed values exist and
//!   otherwise says once in the log that secrets are stored in plain text.

use sqlx::PgPool;

use crate::queries::{cluster_settings, mcp_servers, providers};

pub(crate) mod cipher;

pub use cipher::{KEY_BYTES, PREFIX, PrepareError, SecretError, SecretKey, Secrets, is_sealed};

/// Key of the check value in `cluster_settings`.
pub const KEY_CHECK_SETTING: &str = "secret_key_check";

/// What the check value holds once opened.
const KEY_CHECK_TEXT: &str = "chatd secret key check v1";

/// What [`prepare`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrepareReport {
    /// Provider API keys sealed now (they were plain).
    pub sealed_provider_keys: usize,
    /// MCP servers whose `env` or `headers` were sealed now.
    pub sealed_mcp_servers: usize,
}

/// Startup check and migration of the stored secrets (see the module doc).
///
/// With a key: the check value in `cluster_settings` is written if absent
/// (the first start with a key) and must open with the key; every sealed
/// value must open; every plain one is sealed in place. All of it runs in
/// one transaction that locks the rows it reads (`FOR UPDATE`), so
/// replicas starting together wait for each other and the second finds
/// nothing left to do. Without a key: an error if any value is sealed, else
/// one warning line saying secrets are stored in plain text.
///
/// # Errors
/// [`PrepareError::Secret`] naming the flag when the key does not match or
/// is missing; database errors.
///
/// # Example
///
/// ```
/// use chatd_store::secrets::{self, SecretKey, Secrets};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> anyhow::Result<()> {
/// # let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR).await?; let pool = db.pool();
/// let key = Secrets::new(Some(SecretKey::from_bytes([1; 32])));
/// secrets::prepare(pool, &key).await?;
/// // Another key is refused from now on.
/// let other = Secrets::new(Some(SecretKey::from_bytes([2; 32])));
/// assert!(secrets::prepare(pool, &other).await.is_err());
/// # Ok(()) }
/// ```
pub async fn prepare(pool: &PgPool, secrets: &Secrets) -> Result<PrepareReport, PrepareError> {
    let mut tx = crate::queries::begin(pool).await?;
    let report = if secrets.is_enabled() {
        check_key(&mut tx, secrets).await?;
        PrepareReport {
            sealed_provider_keys: providers::seal_plain_api_keys(&mut tx, secrets).await?,
            sealed_mcp_servers: mcp_servers::seal_plain_secrets(&mut tx, secrets).await?,
        }
    } else {
        // Fails on the first sealed value (NoKey names it).
        providers::seal_plain_api_keys(&mut tx, secrets).await?;
        mcp_servers::seal_plain_secrets(&mut tx, secrets).await?;
        tracing::warn!(
            "no secret key (--secret-key-file or CHATD_SECRET_KEY): provider API keys and MCP server secrets are stored in plain text"
        );
        PrepareReport::default()
    };
    tx.commit().await?;
    if secrets.is_enabled() {
        tracing::info!(
            sealed_provider_keys = report.sealed_provider_keys,
            sealed_mcp_servers = report.sealed_mcp_servers,
            "secrets are encrypted at rest"
        );
    }
    Ok(report)
}

/// Writes the check value if there is none, then checks that it opens.
async fn check_key(conn: &mut sqlx::PgConnection, secrets: &Secrets) -> Result<(), PrepareError> {
    let place = format!("cluster_settings.value:{KEY_CHECK_SETTING}");
    let candidate = secrets.seal(KEY_CHECK_TEXT, &place);
    // Insert-if-absent then read back: of replicas starting together with
    // different keys, the first one's key wins and the others fail here.
    cluster_settings::insert_if_absent(&mut *conn, KEY_CHECK_SETTING, &candidate).await?;
    let stored = cluster_settings::select(&mut *conn, KEY_CHECK_SETTING)
        .await?
        .unwrap_or_default();
    let what = "the database's secret key check (cluster_settings.secret_key_check)";
    match secrets.open(&stored, &place) {
        Ok(text) if text == KEY_CHECK_TEXT => Ok(()),
        _ => Err(SecretError::WrongKey(what.to_owned()).into()),
    }
}
