//! The TOML file of `chatd serve --config FILE` (API.md "Running a replica";
//! DESIGN.md "Configuration"): providers, model configs and MCP servers
//! declared at startup.
//!
//! ```toml
//! [[providers]]
//! name = "openai"                  # stable key of the entry (required)
//! provider = "openai"              # openai | openai-compat | anthropic
//! display_name = "OpenAI"
//! base_url = "https://api.openai.com/v1"
//! api_key_env = "OPENAI_API_KEY"   # or: api_key = "sk-..."
//! enabled = true
//!
//! [[model_configs]]
//! name = "gpt-4o"                  # stable key of the entry (required)
//! provider = "openai"              # the `name` of a provider in this file
//! model = "gpt-4o"
//! display_name = "GPT-4o"
//! context_limit = 128000           # tokens, > 0
//! compression_threshold = 70       # percent, 0..=100 (default 70)
//! is_default = true                # at most one entry
//! enabled = true
//! options = { max_output_tokens = 4096, temperature = 0.7, reasoning_effort = { default = "medium", max = "high" } }
//!
//! [[mcp_servers]]
//! slug = "files"                   # stable key (unique)
//! display_name = "Files"
//! transport = "stdio"              # stdio (command, args, env) | streamable_http (url, headers)
//! command = "mcp-files"
//! args = ["--root", "/srv"]
//! env = { LOG = "info" }
//! ```
//!
//! Applying is idempotent: every entry is identified by its stable key
//! (providers and model configs by `name`, which derives a fixed id, MCP
//! servers by `slug`) and upserted, so a restart rewrites the same rows and
//! the file wins over changes made through the API to declared entries.
//! Rows the file does not declare are left alone; removing an entry from the
//! file does not delete its row. The whole file is applied in one
//! transaction under an advisory lock, so replicas starting at the same time
//! apply it one after the other. Entries are validated with the same rules
//! as the admin routes before anything is written.
//!
//! Each entry is the admin API's create request for its resource (one
//! definition of the fields, their defaults and their checks) with the
//! file's own keys beside it: a provider's `name` and `api_key_env`, a model
//! config's `name` and `provider` (the provider entry's `name`, which gives
//! the request's `provider_id`), an MCP server's none. The writing is the
//! store's ([`chatd_store::admin::config_sync`]).

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;

use anyhow::{Context as _, anyhow, bail};
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use sha2::{Digest as _, Sha256};
use sqlx::PgPool;
use uuid::Uuid;

use crate::admin;
use crate::admin::model_configs::CreateModelConfigRequest;
use crate::admin::providers::CreateProviderRequest;
use crate::error::ApiError;
use chatd_store::admin::config_sync::{self, ConfigSync};
use chatd_store::secrets::Secrets;

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[[providers]]` entries.
    #[serde(default)]
    pub providers: Vec<ProviderEntry>,
    /// `[[model_configs]]` entries.
    #[serde(default)]
    pub model_configs: Vec<ModelConfigEntry>,
    /// `[[mcp_servers]]` entries.
    #[serde(default)]
    pub mcp_servers: Vec<McpServerEntry>,
}

/// A `[[providers]]` entry: the admin API's create request with the file's
/// own keys `name` and `api_key_env` beside it. `Debug` prints no key.
#[derive(Debug, Clone)]
pub struct ProviderEntry {
    /// Stable key (1–64 characters); the row's id is derived from it.
    pub name: String,
    /// Name of an environment variable holding the API key (it must be set);
    /// instead of the request's `api_key`.
    pub api_key_env: Option<String>,
    /// The other keys: `provider`, `display_name` (default: `name`),
    /// `base_url`, `api_key`, `enabled`, as in `POST
    /// /api/v2/chats/providers`.
    pub request: CreateProviderRequest,
}

/// A `[[model_configs]]` entry: the admin API's create request with the
/// file's own keys `name` and `provider` beside it.
#[derive(Debug, Clone)]
pub struct ModelConfigEntry {
    /// Stable key (1–64 characters); the row's id is derived from it.
    pub name: String,
    /// The `name` of a provider entry of the same file.
    pub provider: String,
    /// The other keys: `model`, `display_name` (default: `name`),
    /// `context_limit`, `compression_threshold`, `is_default` (at most one
    /// entry), `enabled`, `options`, as in `POST
    /// /api/v2/chats/model-configs`. Its `provider_id` is the id derived
    /// from `provider` ([`stable_id`]); the file cannot set it.
    pub request: CreateModelConfigRequest,
}

/// A `[[mcp_servers]]` entry: the admin API's create request itself (one
/// definition of an MCP server's fields, their defaults and their checks for
/// both; `Debug` prints no `env` or `headers` value). `slug` is the entry's
/// stable key.
pub type McpServerEntry = admin::mcp_servers::CreateMcpServerRequest;

impl ProviderEntry {
    /// The API request this entry declares: `display_name` defaults to
    /// `name`, and the key comes from `api_key` or from the variable
    /// `api_key_env` names.
    ///
    /// # Errors
    /// Both `api_key` and `api_key_env` set, or the variable not set.
    fn into_request(self) -> anyhow::Result<CreateProviderRequest> {
        let mut request = self.request;
        request.api_key = match (request.api_key, self.api_key_env) {
            (Some(_), Some(_)) => bail!("set api_key or api_key_env, not both"),
            (Some(key), None) => Some(key),
            (None, Some(var)) => Some(
                std::env::var(&var)
                    .map_err(|_| anyhow!("environment variable {var} is not set"))?,
            ),
            (None, None) => None,
        };
        request.display_name.get_or_insert(self.name);
        Ok(request)
    }
}

impl ModelConfigEntry {
    /// The API request this entry declares: `display_name` defaults to
    /// `name` (`provider_id` was derived from `provider` when parsing).
    fn into_request(self) -> CreateModelConfigRequest {
        let mut request = self.request;
        request.display_name.get_or_insert(self.name);
        request
    }
}

impl<'de> Deserialize<'de> for ProviderEntry {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        const SHAPE: EntryShape = EntryShape {
            own: &["name", "api_key_env"],
            required: &["name"],
            derived: None,
        };
        let (mut own, request) = deserialize_entry(de, &SHAPE)?;
        Ok(ProviderEntry {
            name: own.remove("name").unwrap_or_default(),
            api_key_env: own.remove("api_key_env"),
            request,
        })
    }
}

impl<'de> Deserialize<'de> for ModelConfigEntry {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        const SHAPE: EntryShape = EntryShape {
            own: &["name", "provider"],
            required: &["name", "provider"],
            derived: Some(("provider_id", |own| {
                stable_id("provider", &own["provider"]).to_string()
            })),
        };
        let (mut own, request) = deserialize_entry(de, &SHAPE)?;
        Ok(ModelConfigEntry {
            name: own.remove("name").unwrap_or_default(),
            provider: own.remove("provider").unwrap_or_default(),
            request,
        })
    }
}

/// The values of an entry's own keys (strings), by key.
type OwnKeys = BTreeMap<&'static str, String>;

/// How an entry's keys split between the file's own keys and the API
/// request's.
struct EntryShape {
    /// The file's own keys; their values are strings.
    own: &'static [&'static str],
    /// Those of `own` an entry must have.
    required: &'static [&'static str],
    /// A request field the file cannot set, given from the own keys instead.
    derived: Option<(&'static str, Derive)>,
}

/// The value of a derived field from the own keys, as a string the field
/// parses.
type Derive = fn(&OwnKeys) -> String;

/// Deserializes a table (TOML) or object (JSON) as the own keys of `shape`
/// and a `T` from the other keys, in one pass: `T`'s `deny_unknown_fields`
/// still refuses a key neither knows (serde's `flatten` would not), and a
/// value's error keeps its location.
fn deserialize_entry<'de, D, T>(de: D, shape: &'static EntryShape) -> Result<(OwnKeys, T), D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct EntryVisitor<T>(&'static EntryShape, PhantomData<T>);

    impl<'de, T: Deserialize<'de>> Visitor<'de> for EntryVisitor<T> {
        type Value = (OwnKeys, T);

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            let mut split = SplitKeys {
                map,
                shape: self.0,
                own: OwnKeys::new(),
                derived: None,
                derived_given: false,
            };
            let request = T::deserialize(de::value::MapAccessDeserializer::new(&mut split))?;
            Ok((split.own, request))
        }
    }

    de.deserialize_map(EntryVisitor(shape, PhantomData))
}

/// The keys of an entry as the request `T` sees them: the own keys taken
/// out, the derived field added at the end.
struct SplitKeys<A> {
    map: A,
    shape: &'static EntryShape,
    own: OwnKeys,
    /// The derived field's value, between its key and its value.
    derived: Option<String>,
    derived_given: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for SplitKeys<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        loop {
            let Some(key) = self.map.next_key::<String>()? else {
                let own = &self.own;
                if let Some(missing) = self.shape.required.iter().find(|k| !own.contains_key(*k)) {
                    return Err(de::Error::missing_field(missing));
                }
                return match self.shape.derived {
                    Some((field, value)) if !self.derived_given => {
                        self.derived_given = true;
                        self.derived = Some(value(own));
                        seed.deserialize(IntoDeserializer::<A::Error>::into_deserializer(field))
                            .map(Some)
                    }
                    _ => Ok(None),
                };
            };
            if let Some(own) = self.shape.own.iter().find(|k| **k == key) {
                if self.own.contains_key(own) {
                    return Err(de::Error::duplicate_field(own));
                }
                let value = self.map.next_value::<String>()?;
                self.own.insert(own, value);
                continue;
            }
            let unknown = || de::Error::custom(format_args!("unknown field `{key}`"));
            if self.shape.derived.is_some_and(|(field, _)| field == key) {
                return Err(unknown());
            }
            return seed
                .deserialize(IntoDeserializer::<A::Error>::into_deserializer(
                    key.as_str(),
                ))
                .map(Some)
                .map_err(|_: A::Error| unknown());
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.derived.take() {
            Some(value) => seed.deserialize(IntoDeserializer::<A::Error>::into_deserializer(value)),
            None => self.map.next_value_seed(seed),
        }
    }
}

impl ConfigFile {
    /// Parses TOML text.
    ///
    /// # Errors
    /// Syntax errors, unknown keys and wrong types, with their location.
    pub fn from_toml(text: &str) -> anyhow::Result<Self> {
        toml::from_str(text).map_err(|e| anyhow!("invalid config file: {e}"))
    }

    /// Reads and parses the file at `path`.
    ///
    /// # Errors
    /// I/O and parse errors.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        Self::from_toml(&text).with_context(|| format!("in {}", path.display()))
    }
}

/// The fixed id of the entry `name` of kind `kind` (`provider`,
/// `model-config`): a version-8 UUID made from SHA-256 of both.
pub fn stable_id(kind: &str, name: &str) -> Uuid {
    let digest = Sha256::digest(format!("chatd:{kind}:{name}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_custom_bytes(bytes).into_uuid()
}

/// Validates `file` and writes its entries (see the module doc), sealing
/// API keys and MCP `env` and `headers` with `secrets` as the admin routes
/// do ([`chatd_store::secrets`]).
///
/// # Errors
/// A validation error naming the entry and field (nothing is written), or a
/// database error (the transaction is rolled back).
pub async fn apply(pool: &PgPool, secrets: &Secrets, file: &ConfigFile) -> anyhow::Result<()> {
    let plan = plan(file)?;
    config_sync::apply(pool, secrets, &plan).await?;
    tracing::info!(
        providers = plan.providers.len(),
        model_configs = plan.model_configs.len(),
        mcp_servers = plan.mcp_servers.len(),
        "applied config file"
    );
    Ok(())
}

/// The definitions `file` declares: each entry converted into its API
/// request, built by the request's `into_def` and checked as the admin
/// routes check it.
///
/// # Errors
/// The first entry refused, named with its field; nothing is written.
fn plan(file: &ConfigFile) -> anyhow::Result<ConfigSync> {
    let mut names = HashSet::new();
    let mut providers = Vec::new();
    for (i, p) in file.providers.iter().enumerate() {
        let at = format!("providers[{i}] ({:?})", p.name);
        check_key(&p.name).with_context(|| at.clone())?;
        if !names.insert(p.name.as_str()) {
            bail!("{at}: duplicate provider name");
        }
        let request = p.clone().into_request().map_err(|e| anyhow!("{at}: {e}"))?;
        let def = request.into_def(stable_id("provider", &p.name));
        admin::providers::validate_provider(&def).map_err(|e| invalid(&at, e))?;
        providers.push(def);
    }
    let mut config_names = HashSet::new();
    let mut model_configs = Vec::new();
    for (i, m) in file.model_configs.iter().enumerate() {
        let at = format!("model_configs[{i}] ({:?})", m.name);
        check_key(&m.name).with_context(|| at.clone())?;
        if !config_names.insert(m.name.as_str()) {
            bail!("{at}: duplicate model config name");
        }
        if !names.contains(m.provider.as_str()) {
            bail!(
                "{at}: provider {:?} is not declared in this file",
                m.provider
            );
        }
        let def = m
            .clone()
            .into_request()
            .into_def(stable_id("model-config", &m.name));
        admin::model_configs::validate_model_config(&def).map_err(|e| invalid(&at, e))?;
        model_configs.push(def);
    }
    if model_configs.iter().filter(|m| m.is_default).count() > 1 {
        bail!("model_configs: at most one entry may set is_default = true");
    }
    let mut slugs = HashSet::new();
    let mut mcp_servers = Vec::new();
    for (i, s) in file.mcp_servers.iter().enumerate() {
        let at = format!("mcp_servers[{i}] ({:?})", s.slug);
        if !slugs.insert(s.slug.as_str()) {
            bail!("{at}: duplicate slug");
        }
        let def = s.clone().into_def(stable_id("mcp-server", &s.slug));
        admin::mcp_servers::validate_mcp(&def).map_err(|e| invalid(&at, e))?;
        mcp_servers.push(def);
    }
    Ok(ConfigSync {
        providers,
        model_configs,
        mcp_servers,
    })
}

fn check_key(name: &str) -> anyhow::Result<()> {
    if name.trim().is_empty() || name.chars().count() > 64 {
        bail!("name must be 1 to 64 characters");
    }
    Ok(())
}

fn invalid(at: &str, err: ApiError) -> anyhow::Error {
    let details: Vec<String> = err
        .body()
        .validations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.detail))
        .collect();
    anyhow!("{at}: {}", details.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[[providers]]
name = "openai"
provider = "openai"
base_url = "https://api.openai.com/v1"
api_key = "sk-test"

[[model_configs]]
name = "gpt"
provider = "openai"
model = "gpt-4o"
context_limit = 128000
is_default = true
options = { max_output_tokens = 4096, reasoning_effort = { default = "medium", max = "high" } }

[[mcp_servers]]
slug = "files"
transport = "stdio"
command = "mcp-files"
args = ["--root", "/srv"]
"#;

    #[test]
    fn the_documented_example_parses_and_plans() {
        let file = ConfigFile::from_toml(EXAMPLE).unwrap();
        let plan = plan(&file).unwrap();
        assert_eq!(plan.providers.len(), 1);
        assert_eq!(plan.model_configs[0].provider_id, plan.providers[0].id);
        assert_eq!(plan.model_configs[0].options.max_output_tokens, Some(4096));
        assert_eq!(plan.mcp_servers[0].args, vec!["--root", "/srv"]);
    }

    #[test]
    fn entries_split_the_file_keys_from_the_request() {
        let file = ConfigFile::from_toml(EXAMPLE).unwrap();
        assert_eq!(file.providers[0].name, "openai");
        assert_eq!(
            file.providers[0].request.api_key.as_deref(),
            Some("sk-test")
        );
        let config = &file.model_configs[0];
        assert_eq!(
            (config.name.as_str(), config.provider.as_str()),
            ("gpt", "openai")
        );
        assert_eq!(config.request.provider_id, stable_id("provider", "openai"));
        // display_name defaults to the entry's name, not to the API's empty one.
        let plan = plan(&file).unwrap();
        assert_eq!(plan.providers[0].display_name, "openai");
        assert_eq!(plan.model_configs[0].display_name, "gpt");
        assert_eq!(plan.model_configs[0].compression_threshold, 70);
        // Keys neither the file nor the request knows are refused, and so is
        // the request's provider_id, which the file's `provider` gives.
        for (from, to) in [
            ("api_key = \"sk-test\"", "api_key = \"sk-test\"\nbogus = 1"),
            (
                "context_limit = 128000",
                "context_limit = 128000\nbogus = 1",
            ),
            (
                "context_limit = 128000",
                "context_limit = 128000\nprovider_id = \"00000000-0000-0000-0000-000000000000\"",
            ),
        ] {
            let err = ConfigFile::from_toml(&EXAMPLE.replace(from, to)).unwrap_err();
            assert!(err.to_string().contains("unknown field"), "{err}");
        }
        // The file's own keys are required where the request needs them.
        let nameless = EXAMPLE.replace("name = \"gpt\"\n", "");
        let err = ConfigFile::from_toml(&nameless).unwrap_err();
        assert!(err.to_string().contains("missing field `name`"), "{err}");
        let orphan = EXAMPLE.replace("provider = \"openai\"\nmodel", "model");
        let err = ConfigFile::from_toml(&orphan).unwrap_err();
        assert!(
            err.to_string().contains("missing field `provider`"),
            "{err}"
        );
        // A request field's error is the request's, at its line.
        let wrong = EXAMPLE.replace("context_limit = 128000", "context_limit = \"big\"");
        let err = ConfigFile::from_toml(&wrong).unwrap_err().to_string();
        assert!(
            err.contains("line 12, column 17") && err.contains("i64"),
            "{err}"
        );
        // The same entry in JSON.
        let json: ModelConfigEntry = serde_json::from_value(serde_json::json!({
            "name": "gpt", "provider": "openai", "model": "gpt-4o", "context_limit": 1000
        }))
        .unwrap();
        assert_eq!(json.request.provider_id, stable_id("provider", "openai"));
    }

    #[test]
    fn stable_ids_are_stable_and_distinct() {
        assert_eq!(stable_id("provider", "a"), stable_id("provider", "a"));
        assert_ne!(stable_id("provider", "a"), stable_id("model-config", "a"));
        assert_eq!(stable_id("provider", "a").get_version_num(), 8);
    }

    #[test]
    fn invalid_entries_are_named() {
        let bad = EXAMPLE.replace("context_limit = 128000", "context_limit = 0");
        let err = plan(&ConfigFile::from_toml(&bad).unwrap()).unwrap_err();
        assert!(err.to_string().contains("model_configs[0]"), "{err}");
        assert!(err.to_string().contains("context_limit"), "{err}");
        let unknown = format!("{EXAMPLE}\n[[widgets]]\nx = 1\n");
        assert!(ConfigFile::from_toml(&unknown).is_err());
        let undeclared =
            EXAMPLE.replace("provider = \"openai\"\nmodel", "provider = \"nope\"\nmodel");
        assert!(plan(&ConfigFile::from_toml(&undeclared).unwrap()).is_err());
    }
}
