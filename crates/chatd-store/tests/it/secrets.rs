//! Provider API keys and MCP secrets at rest (`chatd_store::secrets`; API.md
//! "Limits, budgets and the token lifecycle"): with a key the columns hold
//! sealed values and every reader gets plaintext; the first start with a
//! key seals existing plain rows once, even when replicas start together;
//! a wrong key, or sealed rows without a key, stop startup.

use std::collections::BTreeMap;

use chatd_core::{McpTransport, ProviderKind, RequireApproval};
use chatd_store::MIGRATOR;
use chatd_store::internals::mcp_servers::{self, McpServerDef};
use chatd_store::internals::providers::{self, ProviderDef};
use chatd_store::secrets::{self, PrepareError, SecretError, SecretKey, Secrets};
use chatd_testkit::TestDatabase;
use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

fn key(byte: u8) -> Secrets {
    Secrets::new(Some(SecretKey::from_bytes([byte; 32])))
}

fn provider(api_key: &str) -> ProviderDef {
    ProviderDef {
        id: Uuid::new_v4(),
        provider: ProviderKind::OpenaiCompat,
        display_name: "Local".into(),
        base_url: Some("http://127.0.0.1:8081/v1".into()),
        api_key: Some(api_key.into()),
        enabled: true,
    }
}

fn mcp(slug: &str, token: &str) -> McpServerDef {
    McpServerDef {
        id: Uuid::new_v4(),
        slug: slug.into(),
        display_name: String::new(),
        transport: McpTransport::Stdio,
        command: Some("mcp-files".into()),
        args: vec!["--root".into(), "/srv".into()],
        env: BTreeMap::from([("TOKEN".into(), token.into())]),
        url: None,
        headers: BTreeMap::from([("Authorization".into(), format!("Bearer {token}"))]),
        enabled: true,
        require_approval: RequireApproval::Never,
    }
}

async fn raw_api_key(pool: &PgPool, id: Uuid) -> Option<String> {
    sqlx::query_scalar("SELECT api_key FROM chat_providers WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn raw_mcp(pool: &PgPool, id: Uuid) -> (Value, Value) {
    sqlx::query_as::<_, (Value, Value)>("SELECT env, headers FROM chat_mcp_servers WHERE id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn is_sealed_json(value: &Value) -> bool {
    value.as_str().is_some_and(secrets::is_sealed)
}

#[tokio::test]
async fn with_a_key_columns_hold_sealed_values_and_readers_get_plaintext() {
    let db = TestDatabase::new(&MIGRATOR).await.unwrap();
    let pool = db.pool();
    let s = key(1);
    secrets::prepare(pool, &s).await.unwrap();

    let def = provider("sk-live-123");
    let written = providers::upsert(pool, &s, &def).await.unwrap();
    assert_eq!(written.def, def, "the writer gets plaintext back");
    let raw = raw_api_key(pool, def.id).await.unwrap();
    assert!(
        secrets::is_sealed(&raw) && !raw.contains("sk-live-123"),
        "{raw}"
    );
    assert_eq!(
        providers::select(pool, &s, def.id)
            .await
            .unwrap()
            .unwrap()
            .def,
        def
    );
    assert_eq!(providers::list(pool, &s).await.unwrap()[0].def, def);
    let mut tx = pool.begin().await.unwrap();
    let locked = providers::select_for_update(&mut tx, &s, def.id)
        .await
        .unwrap();
    assert_eq!(locked.unwrap().def.api_key.as_deref(), Some("sk-live-123"));
    tx.commit().await.unwrap();
    // No key is stored as NULL, not sealed.
    let keyless = ProviderDef {
        api_key: None,
        ..provider("")
    };
    providers::upsert(pool, &s, &keyless).await.unwrap();
    assert_eq!(raw_api_key(pool, keyless.id).await, None);

    let server = mcp("files", "tok-456");
    let written = mcp_servers::insert(pool, &s, &server).await.unwrap();
    assert_eq!(written.def, server);
    let (env, headers) = raw_mcp(pool, server.id).await;
    assert!(
        is_sealed_json(&env) && is_sealed_json(&headers),
        "{env} {headers}"
    );
    assert!(!env.to_string().contains("tok-456") && !env.to_string().contains("TOKEN"));
    assert!(!headers.to_string().contains("tok-456"));
    assert_eq!(mcp_servers::list(pool, &s).await.unwrap()[0].def, server);
    assert_eq!(
        mcp_servers::enabled_in_order(pool, &s, &[server.id])
            .await
            .unwrap()[0]
            .def,
        server
    );
    let changed = McpServerDef {
        env: BTreeMap::new(),
        ..server.clone()
    };
    assert_eq!(
        mcp_servers::update(pool, &s, &changed).await.unwrap().def,
        changed
    );
    let (env, headers) = raw_mcp(pool, server.id).await;
    assert_eq!(env, json!({}), "an empty map stays an empty object");
    assert!(is_sealed_json(&headers));

    // The same columns do not open with another key, and a sealed value
    // moved to another row does not open there either.
    let err = providers::select(pool, &key(2), def.id).await.unwrap_err();
    assert!(err.to_string().contains("another key"), "{err}");
    let other = provider("sk-other");
    providers::upsert(pool, &s, &other).await.unwrap();
    sqlx::query("UPDATE chat_providers SET api_key = $2 WHERE id = $1")
        .bind(other.id)
        .bind(raw_api_key(pool, def.id).await)
        .execute(pool)
        .await
        .unwrap();
    assert!(providers::select(pool, &s, other.id).await.is_err());
}

#[tokio::test]
async fn the_config_files_upsert_by_slug_seals_for_the_id_the_row_keeps() {
    let db = TestDatabase::new(&MIGRATOR).await.unwrap();
    let pool = db.pool();
    let s = key(1);
    let first = mcp("files", "tok-1");
    mcp_servers::insert(pool, &s, &first).await.unwrap();
    // The file's entry has another id; the row keeps the first one.
    let from_file = McpServerDef {
        id: Uuid::new_v4(),
        ..mcp("files", "tok-2")
    };
    let mut conn = pool.acquire().await.unwrap();
    let written = mcp_servers::upsert_by_slug(&mut conn, &s, &from_file)
        .await
        .unwrap();
    assert_eq!(written.def.id, first.id);
    let read = mcp_servers::list(pool, &s).await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].def.env["TOKEN"], "tok-2");
    assert_eq!(read[0].def.headers["Authorization"], "Bearer tok-2");
}

/// Plain rows as an earlier chatd (or a start without a key) left them.
async fn plain_rows(pool: &PgPool, providers_n: usize, servers_n: usize) -> (Vec<Uuid>, Vec<Uuid>) {
    let mut p = Vec::new();
    for i in 0..providers_n {
        let def = provider(&format!("sk-plain-{i}"));
        providers::upsert(pool, &Secrets::none(), &def)
            .await
            .unwrap();
        assert_eq!(raw_api_key(pool, def.id).await, def.api_key);
        p.push(def.id);
    }
    let mut m = Vec::new();
    for i in 0..servers_n {
        let def = mcp(&format!("s{i}"), &format!("tok-plain-{i}"));
        mcp_servers::insert(pool, &Secrets::none(), &def)
            .await
            .unwrap();
        m.push(def.id);
    }
    // An MCP server without secrets has nothing to seal.
    let bare = McpServerDef {
        env: BTreeMap::new(),
        headers: BTreeMap::new(),
        ..mcp("bare", "")
    };
    mcp_servers::insert(pool, &Secrets::none(), &bare)
        .await
        .unwrap();
    (p, m)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_start_with_a_key_seals_plain_rows_once_even_when_replicas_start_together() {
    let db = TestDatabase::new(&MIGRATOR).await.unwrap();
    let pool = db.pool();
    let (provider_ids, server_ids) = plain_rows(pool, 3, 2).await;
    let updated_before: Vec<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT updated_at FROM chat_providers ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap();

    let s = key(7);
    let mut starts = Vec::new();
    for _ in 0..4 {
        let (pool, s) = (pool.clone(), s.clone());
        starts.push(tokio::spawn(
            async move { secrets::prepare(&pool, &s).await },
        ));
    }
    let mut reports = Vec::new();
    for start in starts {
        reports.push(start.await.unwrap().unwrap());
    }
    let sealed_providers: usize = reports.iter().map(|r| r.sealed_provider_keys).sum();
    let sealed_servers: usize = reports.iter().map(|r| r.sealed_mcp_servers).sum();
    assert_eq!((sealed_providers, sealed_servers), (3, 2), "{reports:?}");

    for (i, id) in provider_ids.iter().enumerate() {
        let raw = raw_api_key(pool, *id).await.unwrap();
        assert!(secrets::is_sealed(&raw), "{raw}");
        let row = providers::select(pool, &s, *id).await.unwrap().unwrap();
        assert_eq!(row.def.api_key, Some(format!("sk-plain-{i}")));
    }
    for (i, id) in server_ids.iter().enumerate() {
        let (env, headers) = raw_mcp(pool, *id).await;
        assert!(is_sealed_json(&env) && is_sealed_json(&headers));
        let rows = mcp_servers::enabled_in_order(pool, &s, &[*id])
            .await
            .unwrap();
        assert_eq!(rows[0].def.env["TOKEN"], format!("tok-plain-{i}"));
    }
    // Sealing is not an edit: updated_at is unchanged.
    let updated_after: Vec<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT updated_at FROM chat_providers ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap();
    assert_eq!(updated_before, updated_after);
    // The next start finds nothing to do.
    let again = secrets::prepare(pool, &s).await.unwrap();
    assert_eq!(
        (again.sealed_provider_keys, again.sealed_mcp_servers),
        (0, 0)
    );
}

#[tokio::test]
async fn another_key_or_no_key_is_refused_once_secrets_are_sealed() {
    let db = TestDatabase::new(&MIGRATOR).await.unwrap();
    let pool = db.pool();
    plain_rows(pool, 1, 1).await;
    secrets::prepare(pool, &key(1)).await.unwrap();
    let dump = |pool: PgPool| async move {
        sqlx::query_scalar::<_, String>(
            "SELECT string_agg(coalesce(api_key, '-'), ',' ORDER BY id) FROM chat_providers",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    let before = dump(pool.clone()).await;

    // Another key: the check value says so.
    let err = secrets::prepare(pool, &key(2)).await.unwrap_err();
    assert!(
        matches!(&err, PrepareError::Secret(SecretError::WrongKey(_))),
        "{err}"
    );
    assert!(err.to_string().contains("--secret-key-file"), "{err}");
    // Even without the check value, a sealed row that does not open stops
    // startup.
    sqlx::query("DELETE FROM cluster_settings WHERE key = $1")
        .bind(secrets::KEY_CHECK_SETTING)
        .execute(pool)
        .await
        .unwrap();
    let err = secrets::prepare(pool, &key(2)).await.unwrap_err();
    assert!(
        matches!(&err, PrepareError::Secret(SecretError::WrongKey(place)) if place.starts_with("chat_providers.api_key:")),
        "{err}"
    );
    // No key at all.
    let err = secrets::prepare(pool, &Secrets::none()).await.unwrap_err();
    assert!(
        matches!(&err, PrepareError::Secret(SecretError::NoKey(_))),
        "{err}"
    );
    assert!(err.to_string().contains("CHATD_SECRET_KEY"), "{err}");
    // Nothing changed, and the right key still works.
    assert_eq!(dump(pool.clone()).await, before);
    secrets::prepare(pool, &key(1)).await.unwrap();
}

#[tokio::test]
async fn without_a_key_plain_rows_stay_plain() {
    let db = TestDatabase::new(&MIGRATOR).await.unwrap();
    let pool = db.pool();
    let (provider_ids, server_ids) = plain_rows(pool, 1, 1).await;
    let report = secrets::prepare(pool, &Secrets::none()).await.unwrap();
    assert_eq!(report, secrets::PrepareReport::default());
    assert_eq!(
        raw_api_key(pool, provider_ids[0]).await.as_deref(),
        Some("sk-plain-0")
    );
    let (env, _) = raw_mcp(pool, server_ids[0]).await;
    assert_eq!(env, json!({"TOKEN": "tok-plain-0"}));
}
