//! Stream watchers: each follows one chat over SSE (`GET /events`) from
//! random replicas, reconnecting with `after_id` after every disconnect
//! (and now and then on purpose), and keeps the history it reconstructs
//! from `message` and `history_reset` events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use rand::rngs::StdRng;
use rand::{RngExt as _, SeedableRng as _};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::client::Shared;
use crate::cluster::ADMIN_TOKEN;

/// What a watcher reconstructed: message id → revision.
#[derive(Debug, Default, Clone)]
pub struct View {
    /// Message id → latest revision received.
    pub messages: BTreeMap<i64, i64>,
    /// Connections made.
    pub connects: u64,
    /// When each `message` event arrived (the HA figures read when chats
    /// progressed again after a database fault).
    pub events: Vec<Instant>,
}

impl View {
    fn after_id(&self) -> i64 {
        self.messages.keys().next_back().copied().unwrap_or(0)
    }

    fn apply(&mut self, event: &Value) {
        match event["type"].as_str() {
            Some("message") => {
                self.events.push(Instant::now());
                let message = &event["message"];
                if let Some(id) = message["id"].as_i64() {
                    let revision = message["revision"].as_i64().unwrap_or(0);
                    let known = self.messages.entry(id).or_insert(revision);
                    *known = (*known).max(revision);
                }
            }
            Some("history_reset") => self.messages.clear(),
            _ => {}
        }
    }
}

/// Reads one connection until it ends, `stop` fires, or `until_status`
/// and a `status` event arrives (the end of the bootstrap). Returns whether
/// a `status` event arrived.
#[allow(clippy::too_many_arguments)] // one connection's whole context; a struct would only rename them
async fn follow_once(
    shared: &Shared,
    http: &reqwest::Client,
    rng: &mut StdRng,
    chat: &str,
    view: &mut View,
    until_status: bool,
    stop: &CancellationToken,
    hold: Duration,
) -> bool {
    let after = view.after_id();
    let url = format!(
        "{}/api/v2/chats/{chat}/events{}",
        shared.replica(rng),
        if after > 0 {
            format!("?after_id={after}")
        } else {
            String::new()
        }
    );
    let Ok(response) = http.get(&url).bearer_auth(ADMIN_TOKEN).send().await else {
        return false;
    };
    if !response.status().is_success() {
        return false;
    }
    view.connects += 1;
    let mut events = response.bytes_stream().eventsource();
    let deadline = tokio::time::sleep(hold);
    tokio::pin!(deadline);
    let mut saw_status = false;
    loop {
        tokio::select! {
            () = stop.cancelled(), if !until_status => return saw_status,
            () = &mut deadline => return saw_status,
            next = events.next() => {
                let Some(Ok(event)) = next else { return saw_status };
                let Ok(value) = serde_json::from_str::<Value>(&event.data) else { continue };
                view.apply(&value);
                if value["type"] == "status" {
                    saw_status = true;
                    if until_status {
                        return true;
                    }
                }
            }
        }
    }
}

/// Follows `chat` until `stop`, then returns the view.
pub async fn run_watcher(
    shared: Arc<Shared>,
    chat: String,
    seed: u64,
    stop: CancellationToken,
) -> View {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    let mut view = View::default();
    while !stop.is_cancelled() {
        let hold = Duration::from_millis(rng.random_range(1_000..8_000));
        follow_once(
            &shared, &http, &mut rng, &chat, &mut view, false, &stop, hold,
        )
        .await;
        tokio::time::sleep(Duration::from_millis(rng.random_range(50..500))).await;
    }
    view
}

/// After settling: one more reconnect with `after_id`, read until the
/// bootstrap's `status` event, so the view catches up.
pub async fn catch_up(shared: &Shared, chat: &str, view: &mut View, seed: u64) -> bool {
    let mut rng = StdRng::seed_from_u64(seed);
    let http = reqwest::Client::new();
    let never = CancellationToken::new();
    for _ in 0..10 {
        if follow_once(
            shared,
            &http,
            &mut rng,
            chat,
            view,
            true,
            &never,
            Duration::from_secs(20),
        )
        .await
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}
