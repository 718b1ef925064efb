//! The event stream of a response (`stream: true`, and `GET
//! /v1/responses/{id}?stream=true&starting_after=N`): OpenAI's event types,
//! translated from the chat's live stream ([`crate::stream`]: the same
//! loop, relay and resume as the native SSE route), so it runs on any
//! replica and survives the replica that generates the answer.
//!
//! Sequence numbers are not a counter: each is computed from where the
//! event is in the turn, so that every replica numbers the same event the
//! same way and a resume after `N` continues exactly after it. They
//! increase strictly but are not contiguous. An event's number is
//! `2 + (((k · 64 + a) · 64 + p) << 26) + l` where `k` is the number of the
//! turn's committed messages before it, `a` the generation attempt that
//! streamed it (`63` for content sent whole from a committed message), `p`
//! the item within the message (`0` its text, then reasoning and calls) and
//! `l` the position within the item (`0` added, `1` the content part, `1 +`
//! the characters streamed so far for a text delta, the top three values
//! for the `done` events). `response.created` is `0`, `response.in_progress`
//! `1`, and the final event the first number of slot `k` after the last
//! message.
//!
//! An attempt discarded after it streamed (a retried call, a replica that
//! died mid-answer) never leaves text the client holds as the answer: its
//! item ends with `response.output_item.done` and `status: "incomplete"`,
//! and the answer follows as a new item. A resumed stream whose client was
//! in the middle of an item that it cannot prove is the committed one does
//! the same, so a sequence number is never sent with other content.
//!
//! The stream ends with `response.completed` (also for a cancelled or
//! function-calling response: its object says so), `response.failed` or
//! `response.incomplete`, carrying the response object as `GET` returns it.

use std::collections::HashSet;
use std::convert::Infallible;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chatd_core::{ChatRole, ChatStatus, MessagePart, PartDelta, Visibility};
use chatd_store::ChatMessage;
use chatd_store::responses::ResponseRow;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::items::{
    answer_item, function_call_item, message_status, reasoning_item, server_call_item,
};
use super::responses::{client_tools, readable_response, response_object, turn_of};
use crate::app::AppState;
use crate::auth::{Caller, readable_chat};
use crate::compat::turn;
use crate::error::ApiResult;
use crate::stream::StreamPayload;

/// Bits of the position within an item.
const LOCAL_BITS: u32 = 26;
/// The last position within an item (`output_item.done`).
const LOCAL_MAX: u64 = (1 << LOCAL_BITS) - 1;
/// The attempt slot of content sent whole from a committed message.
const COMMITTED: u64 = 63;

/// The sequence number of position `local` of item `p` of attempt `a` in
/// slot `k` (see the module doc).
pub fn sequence(k: u64, a: u64, p: u64, local: u64) -> u64 {
    2 + ((((k.min(1 << 10) * 64) + a.min(COMMITTED)) * 64 + p.min(63)) << LOCAL_BITS)
        + local.min(LOCAL_MAX)
}

/// `(k, a, p, local)` of sequence number `n` (`None` for `0` and `1`).
pub fn position(n: u64) -> Option<(u64, u64, u64, u64)> {
    let x = n.checked_sub(2)?;
    let local = x & LOCAL_MAX;
    let rest = x >> LOCAL_BITS;
    Some((rest >> 12, (rest >> 6) & 63, rest & 63, local))
}

/// A text item being streamed live.
#[derive(Debug)]
struct Live {
    episode: (i64, i64),
    k: u64,
    a: u64,
    id: String,
    output_index: u64,
    text: String,
}

/// Translates one response's chat events into OpenAI events.
pub(crate) struct Translator {
    row: ResponseRow,
    tools: HashSet<String>,
    start: Option<i64>,
    k: u64,
    live: Option<Live>,
    seen: HashSet<i64>,
    pending_calls: Vec<(String, Value, u64)>,
    output_index: u64,
    after: Option<u64>,
    /// The client's item it was in the middle of when it resumed: `(k, a)`.
    client_open: Option<(u64, u64)>,
    started: bool,
    /// Events ready to send: `(sequence number, event)`.
    out: Vec<(u64, Value)>,
    pub(crate) done: bool,
}

impl Translator {
    /// A translator for `row`, resuming after `after` when given.
    pub(crate) fn new(row: ResponseRow, tools: HashSet<String>, after: Option<u64>) -> Self {
        let client_open = after.and_then(position).and_then(|(k, a, p, local)| {
            // Attempts count from 1: `a == 0` is the final event.
            (a != 0 && a != COMMITTED && p == 0 && local < LOCAL_MAX).then_some((k, a))
        });
        Self {
            start: row.start_message_id,
            row,
            tools,
            k: 0,
            live: None,
            seen: HashSet::new(),
            pending_calls: Vec::new(),
            output_index: 0,
            after,
            client_open,
            started: false,
            out: Vec::new(),
            done: false,
        }
    }

    fn emit(&mut self, seq: u64, kind: &str, mut event: Value) {
        if self.after.is_some_and(|after| seq <= after) {
            return;
        }
        event["type"] = json!(kind);
        event["sequence_number"] = json!(seq);
        self.out.push((seq, event));
    }

    /// The events ready to send.
    pub(crate) fn take(&mut self) -> Vec<(u64, Value)> {
        std::mem::take(&mut self.out)
    }

    /// `response.created` (and `response.in_progress` once the turn
    /// started), with the object as it is now.
    pub(crate) fn begin(&mut self, object: &Value) {
        let mut created = object.clone();
        created["status"] = json!(if self.start.is_some() {
            "in_progress"
        } else {
            "queued"
        });
        created["output"] = json!([]);
        self.emit(0, "response.created", json!({"response": created}));
        if self.start.is_some() {
            self.in_progress(object);
        }
    }

    fn in_progress(&mut self, object: &Value) {
        if self.started {
            return;
        }
        self.started = true;
        let mut progress = object.clone();
        progress["status"] = json!("in_progress");
        progress["output"] = json!([]);
        self.emit(1, "response.in_progress", json!({"response": progress}));
    }

    fn next_index(&mut self) -> u64 {
        let i = self.output_index;
        self.output_index += 1;
        i
    }

    /// Ends the item a resumed client held open when this stream will not
    /// continue it (attempt `a` of slot `k`).
    fn close_client_item(&mut self, keep: Option<(u64, u64)>) {
        if let Some((k, a)) = self.client_open
            && keep != Some((k, a))
        {
            self.client_open = None;
            let id = self.live_id(k, a);
            let index = self.next_index();
            let item = answer_item(&id, "", "incomplete");
            self.emit(
                sequence(k, a, 0, LOCAL_MAX),
                "response.output_item.done",
                json!({"output_index": index, "item": item}),
            );
        } else if keep.is_some() {
            self.client_open = None;
        }
    }

    fn live_id(&self, k: u64, a: u64) -> String {
        format!("msg_{}_{}_{}", self.start.unwrap_or(0), k, a)
    }

    /// Ends the live item as `incomplete` (its attempt was discarded).
    fn discard_live(&mut self) {
        if let Some(live) = self.live.take() {
            let item = answer_item(&live.id, &live.text, "incomplete");
            self.emit(
                sequence(live.k, live.a, 0, LOCAL_MAX),
                "response.output_item.done",
                json!({"output_index": live.output_index, "item": item}),
            );
        }
    }

    /// A live part of the chat's stream.
    pub(crate) fn part(&mut self, role: ChatRole, part: &PartDelta, episode: (i64, i64)) {
        if self.start.is_none() || self.done || role != ChatRole::Assistant {
            return;
        }
        let PartDelta::Text { text } = part else {
            return;
        };
        if self.live.as_ref().is_some_and(|l| l.episode != episode) {
            self.discard_live();
        }
        if self.live.is_none() {
            let k = self.k;
            let a = u64::try_from(episode.1).unwrap_or(0).min(COMMITTED - 1);
            self.close_client_item(Some((k, a)));
            let id = self.live_id(k, a);
            let output_index = self.next_index();
            let item = answer_item(&id, "", "in_progress");
            let mut added = item.clone();
            added["content"] = json!([]);
            self.emit(
                sequence(k, a, 0, 0),
                "response.output_item.added",
                json!({"output_index": output_index, "item": added}),
            );
            self.emit(
                sequence(k, a, 0, 1),
                "response.content_part.added",
                json!({"item_id": id, "output_index": output_index, "content_index": 0,
                       "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
            );
            self.live = Some(Live {
                episode,
                k,
                a,
                id,
                output_index,
                text: String::new(),
            });
        }
        let live = self.live.as_mut().expect("opened above");
        live.text.push_str(text);
        let (k, a, id, index) = (live.k, live.a, live.id.clone(), live.output_index);
        let end = 1 + live.text.chars().count() as u64;
        self.emit(
            sequence(k, a, 0, end.min(LOCAL_MAX - 3)),
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text,
                   "logprobs": []}),
        );
    }

    /// A discarded preview (`preview_reset`).
    pub(crate) fn preview_reset(&mut self) {
        self.discard_live();
    }

    /// A committed message of the chat's stream; `true` when it is the
    /// next turn's message (this one is over: the caller sends the final
    /// event, since the chat may go on running the next turn).
    pub(crate) fn message(&mut self, m: &ChatMessage, object: &Value) -> bool {
        if self.done {
            return false;
        }
        let Some(start) = self.start else {
            if m.role == ChatRole::User
                && m.queued_message_id.is_some()
                && m.queued_message_id == self.row.queued_message_id
            {
                self.start = Some(m.id);
                self.seen.insert(m.id);
                self.in_progress(object);
            }
            return false;
        };
        if m.id <= start || !self.seen.insert(m.id) {
            return false;
        }
        if m.visibility == Visibility::Model || m.role == ChatRole::System {
            return false;
        }
        match m.role {
            ChatRole::User => return true,
            ChatRole::Tool => self.tool_message(m),
            ChatRole::Assistant => self.assistant_message(m),
            ChatRole::System => {}
        }
        self.k += 1;
        false
    }

    fn tool_message(&mut self, m: &ChatMessage) {
        let k = self.k;
        for part in &m.content.0 {
            let MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } = part
            else {
                continue;
            };
            let Some(i) = self
                .pending_calls
                .iter()
                .position(|(id, _, _)| id == tool_call_id)
            else {
                continue;
            };
            let (_, item, index) = self.pending_calls.remove(i);
            let name = item["server_label"].as_str().map_or(String::new(), |s| {
                if s == "chatd" {
                    item["name"].as_str().unwrap_or_default().to_owned()
                } else {
                    format!("{s}__{}", item["name"].as_str().unwrap_or_default())
                }
            });
            let done = server_call_item(
                item["id"].as_str().unwrap_or_default(),
                &name,
                item["arguments"].as_str().unwrap_or_default(),
                Some((result, *is_error)),
            );
            self.emit(
                sequence(k, COMMITTED, i as u64, LOCAL_MAX),
                "response.output_item.done",
                json!({"output_index": index, "item": done}),
            );
        }
    }

    fn assistant_message(&mut self, m: &ChatMessage) {
        let k = self.k;
        let text = turn::text_of(m);
        let status = message_status(m);
        // The live item continues into this message when its text is a
        // prefix of the committed text; otherwise it was another attempt.
        let continues = self
            .live
            .as_ref()
            .is_some_and(|l| l.k == k && text.starts_with(&l.text));
        let (a, live) = if continues {
            let live = self.live.take().expect("checked");
            (live.a, Some(live))
        } else {
            self.discard_live();
            (COMMITTED, None)
        };
        if a == COMMITTED {
            self.close_client_item(None);
        }
        if !text.is_empty() || live.is_some() {
            let (id, index, sent) = match &live {
                Some(l) => (l.id.clone(), l.output_index, l.text.clone()),
                None => {
                    let id = format!("msg_{}", m.id);
                    let index = self.next_index();
                    let mut added = answer_item(&id, "", "in_progress");
                    added["content"] = json!([]);
                    self.emit(
                        sequence(k, a, 0, 0),
                        "response.output_item.added",
                        json!({"output_index": index, "item": added}),
                    );
                    self.emit(
                        sequence(k, a, 0, 1),
                        "response.content_part.added",
                        json!({"item_id": id, "output_index": index, "content_index": 0,
                               "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}),
                    );
                    (id, index, String::new())
                }
            };
            let rest = &text[sent.len()..];
            if !rest.is_empty() {
                let end = 1 + text.chars().count() as u64;
                self.emit(
                    sequence(k, a, 0, end.min(LOCAL_MAX - 3)),
                    "response.output_text.delta",
                    json!({"item_id": id, "output_index": index, "content_index": 0,
                           "delta": rest, "logprobs": []}),
                );
            }
            self.emit(
                sequence(k, a, 0, LOCAL_MAX - 2),
                "response.output_text.done",
                json!({"item_id": id, "output_index": index, "content_index": 0, "text": text,
                       "logprobs": []}),
            );
            self.emit(
                sequence(k, a, 0, LOCAL_MAX - 1),
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": text, "annotations": [], "logprobs": []}}),
            );
            self.emit(
                sequence(k, a, 0, LOCAL_MAX),
                "response.output_item.done",
                json!({"output_index": index, "item": answer_item(&id, &text, status)}),
            );
        }
        let mut p = 1;
        let reasoning = turn::reasoning_of(m);
        if !reasoning.is_empty() {
            let item = reasoning_item(&format!("rs_{}", m.id), &reasoning);
            self.whole_item(k, a, p, item);
            p += 1;
        }
        for (i, (call_id, name, args)) in turn::calls_of(m).into_iter().enumerate() {
            if self.tools.contains(name) {
                let item = function_call_item(&format!("fc_{}_{i}", m.id), call_id, name, args);
                let index = self.next_index();
                let mut added = item.clone();
                added["status"] = json!("in_progress");
                self.emit(
                    sequence(k, a, p, 0),
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                );
                self.emit(
                    sequence(k, a, p, LOCAL_MAX - 1),
                    "response.function_call_arguments.done",
                    json!({"item_id": item["id"], "output_index": index, "arguments": args,
                           "name": name}),
                );
                self.emit(
                    sequence(k, a, p, LOCAL_MAX),
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                );
            } else {
                let item = server_call_item(&format!("mcp_{}_{i}", m.id), name, args, None);
                let index = self.next_index();
                self.emit(
                    sequence(k, a, p, 0),
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                );
                self.pending_calls.push((call_id.to_owned(), item, index));
            }
            p += 1;
        }
    }

    fn whole_item(&mut self, k: u64, a: u64, p: u64, item: Value) {
        let index = self.next_index();
        self.emit(
            sequence(k, a, p, 0),
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
        );
        self.emit(
            sequence(k, a, p, LOCAL_MAX),
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }

    /// Whether the response is queued and its queued message is no longer
    /// in `queue` (it was promoted, and then its message came first, or
    /// removed).
    pub(crate) fn waits_for(&self, queue: &[crate::objects::ChatQueuedMessage]) -> bool {
        self.start.is_none()
            && self
                .row
                .queued_message_id
                .is_some_and(|id| !queue.iter().any(|q| q.id == id))
    }

    /// The queued message of a response that has not started.
    pub(crate) fn queued(&self) -> Option<i64> {
        self.start
            .is_none()
            .then_some(self.row.queued_message_id)
            .flatten()
    }

    /// Whether `status` may end the response: the chat stopped running.
    pub(crate) fn ends_with(&self, status: ChatStatus) -> bool {
        !matches!(status, ChatStatus::Running | ChatStatus::Interrupting)
    }

    /// The final event, with the response object as it is now (`object`
    /// must be final).
    pub(crate) fn finish(&mut self, object: &Value) {
        if self.done {
            return;
        }
        self.discard_live();
        self.close_client_item(None);
        self.done = true;
        let kind = match object["status"].as_str() {
            Some("failed") => "response.failed",
            Some("incomplete") => "response.incomplete",
            _ => "response.completed",
        };
        let k = self.k;
        self.emit(sequence(k, 0, 0, 0), kind, json!({"response": object}));
    }
}

/// Streams response `id` as Server-Sent Events (see the module doc),
/// after sequence number `after` when resuming.
pub(crate) async fn stream_response(
    state: &AppState,
    caller: &Caller,
    id: &str,
    after: Option<u64>,
) -> ApiResult<Response> {
    let (row, chat) = readable_response(state, caller, id).await?;
    let (_, access) = readable_chat(state, caller, chat.id).await?;
    stream_row(state, caller, row, chat, access, after).await
}

/// [`stream_response`] of a response already read (`row`, its `chat`,
/// reached with `access`).
pub(crate) async fn stream_row(
    state: &AppState,
    caller: &Caller,
    row: ResponseRow,
    chat: chatd_store::Chat,
    access: crate::auth::ChatAccess,
    after: Option<u64>,
) -> ApiResult<Response> {
    let after_id = match row.start_message_id {
        Some(start) => start,
        None => chat.active_leaf_id.unwrap_or(0),
    };
    let mut events_rx =
        crate::compat::chat_events(state, caller, chat.id, access, after_id).await?;
    let (sse_tx, sse_rx) = mpsc::channel::<Event>(256);
    let state = state.clone();
    let caller = caller.clone();
    let id = row.id.clone();
    tokio::spawn(async move {
        let tools = client_tools(&row, &chat);
        // `response.created` and `response.in_progress` carry the object
        // without output: no need to read the turn first.
        let (object, _) = response_object(&row, &chat, None);
        let mut translator = Translator::new(row, tools, after);
        translator.begin(&object);
        if !send(&sse_tx, translator.take()).await {
            return;
        }
        while let Some(event) = events_rx.recv().await {
            match &event.payload {
                StreamPayload::MessagePart { message_part } => translator.part(
                    message_part.role,
                    &message_part.part,
                    (
                        message_part.history_version,
                        message_part.generation_attempt,
                    ),
                ),
                StreamPayload::PreviewReset => translator.preview_reset(),
                StreamPayload::HistoryReset => {}
                StreamPayload::Message { message } => {
                    // The store's row behind the API object: read it back
                    // (messages are few per turn).
                    if let Ok(Some(row)) = chatd_store::messages::select(
                        state.store().pool(),
                        event.chat_id,
                        message.id,
                    )
                    .await
                        && translator.message(&row, &object)
                        && let Some((object, true)) = current_object(&state, &caller, &id).await
                    {
                        translator.finish(&object);
                    }
                }
                StreamPayload::QueueUpdate { queued_messages }
                    if translator.waits_for(queued_messages) =>
                {
                    // Its queued message left the queue without a turn: it
                    // was removed (a cancel).
                    if let Some((object, true)) = current_object(&state, &caller, &id).await {
                        translator.finish(&object);
                    }
                }
                StreamPayload::Status { status }
                    if status.status == ChatStatus::Error && translator.queued().is_some() =>
                {
                    // Queued behind a turn that failed: it runs now.
                    if let Some(queued) = translator.queued() {
                        crate::compat::start_after_error(&state, event.chat_id, queued).await;
                    }
                }
                StreamPayload::Status { status } if translator.ends_with(status.status) => {
                    if let Some((object, true)) = current_object(&state, &caller, &id).await {
                        translator.finish(&object);
                    }
                }
                _ => {}
            }
            if !send(&sse_tx, translator.take()).await || translator.done {
                return;
            }
        }
    });
    let stream = futures::stream::unfold(sse_rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().text("keep-alive"))
        .into_response())
}

async fn current_object(state: &AppState, caller: &Caller, id: &str) -> Option<(Value, bool)> {
    let (row, chat) = readable_response(state, caller, id).await.ok()?;
    let turn = turn_of(state, &row, &chat).await.ok()?;
    Some(response_object(&row, &chat, turn.as_ref()))
}

async fn send(tx: &mpsc::Sender<Event>, events: Vec<(u64, Value)>) -> bool {
    for (_, event) in events {
        let kind = event["type"].as_str().unwrap_or("message").to_owned();
        let sse = Event::default()
            .event(kind)
            .data(serde_json::to_string(&event).expect("JSON serializes"));
        if tx.send(sse).await.is_err() {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_numbers_order_by_slot_attempt_item_and_position() {
        let a = sequence(0, 1, 0, 5);
        let b = sequence(0, 2, 0, 0);
        let c = sequence(0, COMMITTED, 0, 0);
        let d = sequence(1, 0, 0, 0);
        assert!(1 < sequence(0, 0, 0, 0) && a < b && b < c && c < d);
        assert_eq!(position(a), Some((0, 1, 0, 5)));
        assert_eq!(
            position(sequence(7, 3, 2, LOCAL_MAX)),
            Some((7, 3, 2, LOCAL_MAX))
        );
        assert!(sequence(1 << 10, COMMITTED, 63, LOCAL_MAX) < (1 << 53));
    }
}
