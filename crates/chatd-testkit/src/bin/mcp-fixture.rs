//! A tiny MCP server for tests, over stdio or streamable HTTP (rmcp's
//! server side).
//!
//! ```text
//! mcp-fixture                       # stdio
//! mcp-fixture --http 127.0.0.1:0    # streamable HTTP at http://ADDR/mcp
//! ```
//!
//! In HTTP mode it prints `listening on http://ADDR/mcp` once it accepts
//! connections. On start it writes `mcp-fixture: started pid N` to stderr.
//!
//! Tools (`add`, `whoami` and `getenv` declare `readOnlyHint: true`):
//! - `add {a, b}`: the sum, as text (`5`);
//! - `fail {message}`: an `is_error` result with that text;
//! - `sleep {ms}`: waits, then answers `slept N ms`;
//! - `whoami {}`: structured `{"pid", "meta", "calls"}`: this process, the
//!   request's `_meta`, and how many calls this process answered;
//! - `log {message}`: writes the message to stderr, answers `logged`;
//! - `getenv {name}`: structured `{"value": ...}` (null when unset);
//! - `exit {}`: the process exits at once (a crash in the middle of a call).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Fixture {
    calls: Arc<AtomicU64>,
}

fn schema(value: Value) -> Arc<serde_json::Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(serde_json::Map::new()),
    }
}

fn tools() -> Vec<Tool> {
    let number = json!({"type": "number"});
    let text = json!({"type": "string"});
    vec![
        Tool::new(
            "add",
            "Adds two numbers.",
            schema(
                json!({"type": "object", "properties": {"a": number, "b": number}, "required": ["a", "b"]}),
            ),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "fail",
            "Always fails with the given message.",
            schema(json!({"type": "object", "properties": {"message": text}})),
        ),
        Tool::new(
            "sleep",
            "Waits ms milliseconds.",
            schema(json!({"type": "object", "properties": {"ms": number}})),
        ),
        Tool::new(
            "whoami",
            "This process's id, the request's _meta and the calls answered.",
            schema(json!({"type": "object"})),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "log",
            "Writes a message to stderr.",
            schema(json!({"type": "object", "properties": {"message": text}})),
        ),
        Tool::new(
            "getenv",
            "The value of an environment variable of this process.",
            schema(json!({"type": "object", "properties": {"name": text}})),
        )
        .annotate(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "exit",
            "Exits the server process at once.",
            schema(json!({"type": "object"})),
        ),
    ]
}

fn number(args: &serde_json::Map<String, Value>, key: &str) -> Result<f64, ErrorData> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| ErrorData::invalid_params(format!("{key} must be a number"), None))
}

impl ServerHandler for Fixture {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let calls = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let args = request.arguments.clone().unwrap_or_default();
        let text = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let result = match request.name.as_ref() {
            "add" => {
                let sum = number(&args, "a")? + number(&args, "b")?;
                let sum = if sum.fract() == 0.0 && sum.abs() < 1e15 {
                    format!("{}", sum as i64)
                } else {
                    sum.to_string()
                };
                CallToolResult::success(vec![ContentBlock::text(sum)])
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text(text("message"))]),
            "sleep" => {
                let ms = number(&args, "ms")?.max(0.0) as u64;
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    _ = context.ct.cancelled() => {
                        eprintln!("mcp-fixture: sleep cancelled");
                    }
                }
                CallToolResult::success(vec![ContentBlock::text(format!("slept {ms} ms"))])
            }
            "whoami" => CallToolResult::structured(json!({
                "pid": std::process::id(),
                "meta": serde_json::to_value(&context.meta).unwrap_or(Value::Null),
                "calls": calls,
            })),
            "log" => {
                eprintln!("{}", text("message"));
                CallToolResult::success(vec![ContentBlock::text("logged")])
            }
            "getenv" => CallToolResult::structured(json!({
                "value": std::env::var(text("name")).ok(),
            })),
            "exit" => {
                eprintln!("mcp-fixture: exiting on request");
                std::process::exit(3);
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut http = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--http" => http = Some(args.next().context("--http needs an address")?),
            "-h" | "--help" => {
                println!("usage: mcp-fixture [--http ADDR]");
                return Ok(());
            }
            other => anyhow::bail!("unknown argument {other:?}"),
        }
    }
    eprintln!("mcp-fixture: started pid {}", std::process::id());
    match http {
        None => {
            let service = Fixture::default()
                .serve(rmcp::transport::stdio())
                .await
                .context("starting the stdio server")?;
            service.waiting().await?;
        }
        Some(addr) => {
            use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
            use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
            let fixture = Fixture::default();
            let service = StreamableHttpService::new(
                move || Ok(fixture.clone()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .with_context(|| format!("binding {addr}"))?;
            println!("listening on http://{}/mcp", listener.local_addr()?);
            axum::serve(listener, app).await?;
        }
    }
    Ok(())
}
