//! Fixture loading and a raw HTTP server that replays recorded responses.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chatd_llm::sse::{SseDecoder, decode};
use chatd_llm::{
    AnthropicProvider, ModelRequest, OpenAiProvider, Provider, ProviderError, RequestMessage,
    Response, ResponseBuilder, StreamEvent,
};
use futures::StreamExt as _;
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// The project's own fixtures (`tests/fixtures`).
pub fn own_fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// `shared/fixtures/providers` next to the workspace, if present. Tests that
/// need it print a message and skip when it is absent.
pub fn shared_fixtures() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/providers");
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!(
            "skipping the shared provider fixtures: {} is absent",
            dir.display()
        );
        None
    }
}

/// Where fixture `name` lives: the project's copy, else the shared directory.
pub fn fixture_path(name: &str) -> Option<PathBuf> {
    let own = own_fixtures().join(name);
    if own.exists() {
        return Some(own);
    }
    let shared = shared_fixtures()?.join(name);
    shared.exists().then_some(shared)
}

/// The bytes of fixture `name`, or `None` (with a message) when it is a
/// shared fixture and the shared directory is absent.
pub fn read_fixture(name: &str) -> Option<Vec<u8>> {
    let path = fixture_path(name)?;
    Some(std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display())))
}

/// A request that the replay server ignores (it answers whatever it is told).
pub fn hello_request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        messages: vec![RequestMessage::text(chatd_core::ChatRole::User, "Hello")],
        ..ModelRequest::default()
    }
}

/// Every item of a decoded stream, errors included.
pub type Items = Vec<Result<StreamEvent, ProviderError>>;

/// Decodes `pieces` (the body as split by the network) without HTTP, as
/// an OpenAI Chat Completions stream.
pub fn decode_pieces(pieces: Vec<Vec<u8>>) -> Items {
    decode_with(
        pieces,
        chatd_llm::openai::stream::Decoder::new("test".into()),
    )
}

/// Decodes `pieces` without HTTP, as an Anthropic Messages stream.
pub fn decode_anthropic_pieces(pieces: Vec<Vec<u8>>) -> Items {
    decode_with(
        pieces,
        chatd_llm::anthropic::stream::Decoder::new("test".into()),
    )
}

/// Decodes `pieces` without HTTP with any `decoder`.
pub fn decode_with(pieces: Vec<Vec<u8>>, decoder: impl SseDecoder) -> Items {
    let stream = futures::stream::iter(pieces.into_iter().map(Ok::<_, ProviderError>));
    futures::executor::block_on(decode(stream, decoder).collect())
}

/// The events of `items` (errors skipped) accumulated into a builder.
pub fn builder_of(items: &Items) -> ResponseBuilder {
    let mut builder = ResponseBuilder::new();
    for event in items.iter().flatten() {
        builder.push(event);
    }
    builder
}

/// The ids of the tool calls cut off before their end.
pub fn unfinished_ids(builder: &ResponseBuilder) -> Vec<String> {
    builder
        .unfinished_tool_calls()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

/// `(id, name, args)` of each tool call of `response`, in order.
pub fn call_triples(response: &Response) -> Vec<(&str, &str, &str)> {
    response
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), c.name.as_str(), c.args.as_str()))
        .collect()
}

/// A recorded response to replay: the raw status line and headers, and the
/// body split into the pieces written to the socket one by one.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status line and headers, ending with the blank line (CRLF).
    pub head: Vec<u8>,
    /// The body, in the pieces to write.
    pub pieces: Vec<Vec<u8>>,
    /// Pause after each piece, so that pieces arrive in separate reads.
    pub pause: Duration,
}

impl Reply {
    /// A `200 text/event-stream` reply with `body` in one piece.
    pub fn sse(body: Vec<u8>) -> Self {
        Reply {
            head: b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            pieces: vec![body],
            pause: Duration::ZERO,
        }
    }

    /// The recorded `.headers` file and the body, byte for byte.
    pub fn recorded(headers: Vec<u8>, body: Vec<u8>) -> Self {
        Reply {
            head: headers,
            pieces: vec![body],
            pause: Duration::ZERO,
        }
    }

    /// A reply with status `status`, JSON content type and `body`.
    pub fn status(status: u16, body: Vec<u8>) -> Self {
        let head = format!(
            "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        Reply {
            head: head.into_bytes(),
            pieces: vec![body],
            pause: Duration::ZERO,
        }
    }

    fn chunked(&self) -> bool {
        String::from_utf8_lossy(&self.head)
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
    }
}

/// A raw HTTP/1.1 server that answers every connection with the same
/// [`Reply`] and records the request bodies.
pub struct ReplayServer {
    /// `http://ADDR/v1`.
    pub base_url: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl ReplayServer {
    /// Starts serving `reply` on `127.0.0.1:0`.
    pub async fn start(reply: Reply) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let recorded = bodies.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                socket.set_nodelay(true).unwrap();
                let reply = reply.clone();
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let Some(body) = read_request(&mut socket).await else {
                        return;
                    };
                    recorded
                        .lock()
                        .unwrap()
                        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    let _ = write_reply(&mut socket, &reply).await;
                });
            }
        });
        ReplayServer { base_url, bodies }
    }

    /// The JSON bodies of the requests received so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    /// A provider pointed at this server.
    pub fn provider(&self) -> OpenAiProvider {
        OpenAiProvider::new(&self.base_url, Some("sk-test".into()), "replay").unwrap()
    }

    /// An Anthropic provider pointed at this server.
    pub fn anthropic(&self) -> AnthropicProvider {
        AnthropicProvider::new(&self.base_url, Some("sk-ant-test".into()), "replay").unwrap()
    }
}

async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf[head_end..head_end + length].to_vec())
}

async fn write_reply(socket: &mut tokio::net::TcpStream, reply: &Reply) -> std::io::Result<()> {
    socket.write_all(&reply.head).await?;
    let chunked = reply.chunked();
    for piece in &reply.pieces {
        if piece.is_empty() {
            continue;
        }
        if chunked {
            socket
                .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await?;
            socket.write_all(piece).await?;
            socket.write_all(b"\r\n").await?;
        } else {
            socket.write_all(piece).await?;
        }
        socket.flush().await?;
        if !reply.pause.is_zero() {
            tokio::time::sleep(reply.pause).await;
        }
    }
    if chunked {
        socket.write_all(b"0\r\n\r\n").await?;
    }
    socket.shutdown().await
}

/// Streams `request` through `provider` and returns every item, or the
/// error the request itself failed with.
pub async fn run(provider: &dyn Provider, request: &ModelRequest) -> Result<Items, ProviderError> {
    let stream = provider.stream(request).await?;
    Ok(stream.collect().await)
}

/// `body` cut at `cuts` (each taken modulo `body.len() + 1`; duplicates
/// ignored), in order: the pieces concatenate to `body`.
pub fn split_at(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut pieces = Vec::new();
    let mut start = 0;
    for cut in cuts {
        pieces.push(body[start..cut].to_vec());
        start = cut;
    }
    pieces.push(body[start..].to_vec());
    pieces
}
