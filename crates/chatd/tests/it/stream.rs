//! The live stream across real `chatd serve` processes on one PostgreSQL
//! (spec "Relay mechanism", "Sync poller"; API.md "Stream (WebSocket)"): a
//! client on one replica watches a chat owned by another and keeps watching
//! when the owner is killed; a replica whose streams ignore LISTEN/NOTIFY
//! still converges through the sync poller.

use std::collections::VecDeque;
use std::time::Duration;

use chatd_testkit::fake_llm::Script;
use futures::StreamExt as _;
use serde_json::Value;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use uuid::Uuid;

use crate::support::{ADMIN_TOKEN, Chatd};
use crate::worker::{create_chat, fixture, replica_args, replica_id, wait_owner, wait_turn_end};

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A stream client collecting events.
struct Watcher {
    ws: Ws,
    pending: VecDeque<Value>,
    events: Vec<Value>,
    closed: bool,
}

impl Watcher {
    async fn connect(server: &Chatd, chat: Uuid) -> anyhow::Result<Self> {
        let url = format!(
            "{}/api/v2/chats/{chat}/stream",
            server.url().replacen("http://", "ws://", 1)
        );
        let mut request = url.into_client_request()?;
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {ADMIN_TOKEN}").parse()?);
        let (ws, _) = tokio_tungstenite::connect_async(request).await?;
        Ok(Self {
            ws,
            pending: VecDeque::new(),
            events: Vec::new(),
            closed: false,
        })
    }

    /// Reads until an event satisfies `pred`.
    async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(event) = self.pending.pop_front() {
                self.events.push(event.clone());
                if pred(&event) {
                    return Ok(event);
                }
            }
            anyhow::ensure!(!self.closed, "the stream closed before {what}");
            let frame = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .map_err(|_| {
                    anyhow::anyhow!("timed out waiting for {what}; events: {:#?}", self.events)
                })?;
            match frame {
                Some(Ok(tungstenite::Message::Text(text))) => {
                    let batch: Vec<Value> = serde_json::from_str(text.as_str())?;
                    self.pending.extend(batch);
                }
                Some(Ok(tungstenite::Message::Close(frame))) => {
                    self.closed = true;
                    anyhow::bail!("the server closed the stream ({frame:?}) before {what}");
                }
                Some(Ok(_)) => {}
                None | Some(Err(_)) => {
                    self.closed = true;
                    anyhow::bail!("the stream broke before {what}");
                }
            }
        }
    }
}

/// `(history_version, generation_attempt, seq, text)` of every part.
fn parts(events: &[Value]) -> Vec<(i64, i64, u64, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "message_part")
        .map(|e| {
            let p = &e["message_part"];
            (
                p["history_version"].as_i64().unwrap_or_default(),
                p["generation_attempt"].as_i64().unwrap_or_default(),
                p["seq"].as_u64().unwrap_or_default(),
                p["part"]["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn is_status(event: &Value, status: &str) -> bool {
    event["type"] == "status" && event["status"]["status"] == status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_on_one_replica_follows_the_owners_parts_and_survives_the_owners_death()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    // B streams three parts and hangs; the survivor finishes the turn.
    llm.push(
        Script::new()
            .then_text("one ")
            .delay(Duration::from_millis(100))
            .then_text("two ")
            .delay(Duration::from_millis(100))
            .then_text("three ")
            .hang(),
    );
    llm.set_default(Script::text_in_parts(
        "finished by the survivor",
        4,
        Duration::from_millis(100),
    ));
    let mut args = replica_args(&db, &config, "500ms");
    args.extend(["--sync-poll-interval", "500ms"]);
    let mut a_args = args.clone();
    a_args.push("--no-worker");
    // A serves the watcher and acquires nothing; only B can take the chat.
    let mut a = Chatd::start(&a_args).await?;
    let mut b = Chatd::start(&args).await?;
    let b_id = replica_id(&db, &b).await?;
    let chat = create_chat(&a, "hi").await?;
    wait_owner(&db, chat, Duration::from_secs(30), "b owns the chat", b_id).await?;

    let mut watcher = Watcher::connect(&a, chat).await?;
    watcher
        .until("B's third part", Duration::from_secs(30), |e| {
            e["type"] == "message_part" && e["message_part"]["seq"] == 3
        })
        .await?;
    let from_b = parts(&watcher.events);
    assert_eq!(
        from_b
            .iter()
            .map(|(_, attempt, seq, text)| (*attempt, *seq, text.as_str()))
            .collect::<Vec<_>>(),
        [(1, 1, "one "), (1, 2, "two "), (1, 3, "three ")],
        "every part of B's attempt, in order"
    );

    // C joins after B owns the chat, then B dies mid-turn.
    let mut c = Chatd::start(&args).await?;
    let c_id = replica_id(&db, &c).await?;
    b.kill().await?;
    let seen = watcher.events.len();
    wait_owner(&db, chat, Duration::from_secs(30), "c takes over", c_id).await?;
    watcher
        .until("waiting", Duration::from_secs(60), |e| {
            is_status(e, "waiting")
        })
        .await?;
    wait_turn_end(&db, chat).await?;
    let after = &watcher.events[seen..];
    let reset = after
        .iter()
        .position(|e| e["type"] == "preview_reset")
        .expect("a preview_reset after the takeover");
    let new_parts = parts(&after[reset..]);
    assert!(!new_parts.is_empty(), "the new attempt's parts arrive");
    let attempt = new_parts[0].1;
    assert!(attempt >= 2, "a new attempt: {new_parts:?}");
    let seqs: Vec<u64> = new_parts.iter().map(|p| p.2).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let text: String = new_parts.iter().map(|p| p.3.as_str()).collect();
    assert_eq!(text, "finished by the survivor");
    let answer = watcher
        .events
        .iter()
        .rev()
        .find(|e| e["type"] == "message" && e["message"]["role"] == "assistant")
        .expect("the committed answer");
    assert_eq!(
        answer["message"]["content"][0]["text"],
        "finished by the survivor"
    );
    assert!(!watcher.closed, "the stream on A stayed open");
    assert!(c.terminate().await?.success());
    assert!(a.terminate().await?.success());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_listen_notify_disabled_a_replicas_streams_converge_through_the_sync_poller()
-> anyhow::Result<()> {
    let (db, llm, _dir, config) = fixture().await?;
    llm.push(Script::text_in_parts(
        "converged by polling",
        4,
        Duration::from_millis(100),
    ));
    let mut args = replica_args(&db, &config, "500ms");
    args.extend(["--sync-poll-interval", "300ms", "--no-listen-notify"]);
    let mut server = Chatd::start(&args).await?;
    assert!(
        server
            .log()
            .iter()
            .any(|l| l.contains("--no-listen-notify"))
    );
    let chat = create_chat(&server, "hi").await?;
    let mut watcher = Watcher::connect(&server, chat).await?;
    watcher
        .until("waiting", Duration::from_secs(30), |e| {
            is_status(e, "waiting")
        })
        .await?;
    let texts: Vec<&str> = watcher
        .events
        .iter()
        .filter(|e| e["type"] == "message")
        .filter_map(|e| e["message"]["content"][0]["text"].as_str())
        .collect();
    assert_eq!(texts, ["hi", "converged by polling"]);
    assert!(server.terminate().await?.success());
    Ok(())
}
