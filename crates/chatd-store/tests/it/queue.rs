//! Steer messages, queue edits and moves (API.md "Busy behaviours and the
//! queue"; DESIGN.md "Steer", "Queue edit and move"): where the messages go,
//! the versions they advance, validation, and races against the worker
//! promoting the same message.

use std::sync::Arc;
use std::time::Duration;

use chatd_core::{BusyBehavior, ChatRole, ExecutionState, MessagePart, StateError};
use chatd_store::{
    EditQueuedMessageInput, NewMessage, QueuedMessage, SendMessageInput, StoreError,
};
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::common::{Harness, assistant_text, user_text};

fn send(text: &str, busy_behavior: BusyBehavior) -> SendMessageInput {
    SendMessageInput {
        message: user_text(text),
        busy_behavior,
        max_queue_size: None,
    }
}

fn text_of(parts: &[MessagePart]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            MessagePart::Text { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// Queues `texts` on running chat `id`, each with its busy behaviour;
/// returns the queued ids in order.
async fn queue_all(h: &Harness, id: Uuid, texts: &[(&str, BusyBehavior)]) -> Vec<i64> {
    let mut ids = Vec::new();
    for (text, behavior) in texts {
        let input = send(text, *behavior);
        let (sent, _) = h
            .run(id, |tx| {
                Box::pin(async move { tx.send_message(input).await })
            })
            .await;
        ids.push(sent.queued_message.expect("queued").id);
    }
    ids
}

fn queue_texts(queue: &[QueuedMessage]) -> Vec<String> {
    queue.iter().map(|q| text_of(&q.content.0)).collect()
}

/// A tool step: the assistant's call and its result.
fn tool_step() -> Vec<NewMessage> {
    vec![
        NewMessage::assistant(vec![MessagePart::ToolCall {
            tool_call_id: "call-1".into(),
            tool_name: "read".into(),
            args: "{}".into(),
        }]),
        NewMessage::tool(vec![MessagePart::ToolResult {
            tool_call_id: "call-1".into(),
            tool_name: "read".into(),
            result: serde_json::json!({"ok": true}),
            is_error: false,
        }]),
    ]
}

#[tokio::test]
async fn steer_messages_enter_history_right_after_the_step_that_continues_the_turn() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let ids = queue_all(
        &h,
        id,
        &[
            ("s1", BusyBehavior::Steer),
            ("q1", BusyBehavior::Queue),
            ("s2", BusyBehavior::Steer),
        ],
    )
    .await;
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.commit_step_steering(tool_step(), false).await })
        })
        .await;
    let steered: Vec<_> = result
        .steered_messages
        .iter()
        .map(|m| (text_of(&m.content.0), m.queued_message_id))
        .collect();
    assert_eq!(
        steered,
        vec![("s1".into(), Some(ids[0])), ("s2".into(), Some(ids[2]))]
    );
    // History: ..., the call, its result, then the steer messages.
    let active = h.active_messages(id).await;
    let tail: Vec<_> = active[active.len() - 4..].iter().map(|m| m.role).collect();
    assert_eq!(
        tail,
        [
            ChatRole::Assistant,
            ChatRole::Tool,
            ChatRole::User,
            ChatRole::User
        ]
    );
    assert_eq!(queue_texts(&h.queue(id).await), ["q1"]);
    // One transaction: history and queue changed in the step's snapshot.
    assert_eq!(chat.history_version, chat.snapshot_version);
    assert_eq!(chat.queue_version, chat.snapshot_version);
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

#[tokio::test]
async fn a_step_that_ends_the_turn_leaves_steer_messages_and_finish_turn_promotes_them_first() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    queue_all(
        &h,
        id,
        &[
            ("q1", BusyBehavior::Queue),
            ("s1", BusyBehavior::Steer),
            ("q2", BusyBehavior::Queue),
            ("s2", BusyBehavior::Steer),
        ],
    )
    .await;
    let (result, _) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.commit_step(vec![assistant_text("done")], false).await?;
                tx.finish_turn().await
            })
        })
        .await;
    let promoted: Vec<_> = result
        .promoted_messages
        .iter()
        .map(|m| text_of(&m.content.0))
        .collect();
    assert_eq!(promoted, ["s1", "s2"], "all steer messages, in queue order");
    assert_eq!(
        result.promoted_message.map(|m| text_of(&m.content.0)),
        Some("s2".into())
    );
    assert_eq!(queue_texts(&h.queue(id).await), ["q1", "q2"]);
    assert_eq!(h.state(id).await, ExecutionState::R1);
    // Without steer messages the head goes alone, as before.
    let (result, _) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.commit_step(vec![assistant_text("done")], false).await?;
                tx.finish_turn().await
            })
        })
        .await;
    let promoted: Vec<_> = result
        .promoted_messages
        .iter()
        .map(|m| text_of(&m.content.0))
        .collect();
    assert_eq!(promoted, ["q1"]);
    assert_eq!(queue_texts(&h.queue(id).await), ["q2"]);
}

#[tokio::test]
async fn a_steering_step_without_steer_messages_is_a_plain_step() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let before = h.queue(id).await;
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.commit_step_steering(tool_step(), false).await })
        })
        .await;
    assert!(result.steered_messages.is_empty());
    assert_eq!(result.inserted_messages.len(), 2);
    assert_eq!(h.queue(id).await, before);
    assert!(chat.queue_version < chat.snapshot_version);
}

#[tokio::test]
async fn reject_refuses_a_busy_chat_naming_its_state_and_sends_when_idle() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let before = h.dump(id).await;
    let err = h
        .rejected(id, |tx| {
            Box::pin(async move { tx.send_message(send("x", BusyBehavior::Reject)).await })
        })
        .await;
    match err {
        StoreError::State(StateError::TransitionNotAllowed(e)) => {
            assert_eq!(e.from, ExecutionState::R0);
        }
        other => panic!("expected TransitionNotAllowed, got {other:?}"),
    }
    assert_eq!(h.dump(id).await, before);
    let idle = h.chat_in(ExecutionState::W).await;
    let (sent, _) = h
        .run(idle, |tx| {
            Box::pin(async move { tx.send_message(send("x", BusyBehavior::Reject)).await })
        })
        .await;
    assert_eq!(sent.inserted_messages.len(), 1);
    assert_eq!(h.state(idle).await, ExecutionState::R0);
}

#[tokio::test]
async fn edit_queued_message_replaces_fields_and_advances_queue_version() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let qid = queue_all(&h, id, &[("tpyo", BusyBehavior::Queue)]).await[0];
    let model = None;
    let (row, chat) = h
        .run(id, move |tx| {
            Box::pin(async move {
                tx.edit_queued_message(EditQueuedMessageInput {
                    queued_message_id: qid,
                    content: Some(vec![MessagePart::text("typo")]),
                    model_config_id: Some(model),
                    steer: Some(true),
                })
                .await
            })
        })
        .await;
    assert_eq!((text_of(&row.content.0), row.steer), ("typo".into(), true));
    assert_eq!(chat.queue_version, chat.snapshot_version);
    assert!(chat.history_version < chat.snapshot_version);
    // An edit that changes nothing still counts as a queue change.
    let (_, again) = h
        .run(id, move |tx| {
            Box::pin(async move {
                tx.edit_queued_message(EditQueuedMessageInput {
                    queued_message_id: qid,
                    ..Default::default()
                })
                .await
            })
        })
        .await;
    assert_eq!(again.queue_version, again.snapshot_version);
}

#[tokio::test]
async fn edit_and_move_of_an_unknown_id_or_with_empty_content_change_nothing() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let queued = h.queue(id).await[0].id;
    let before = h.dump(id).await;
    let unknown = h
        .rejected(id, move |tx| {
            Box::pin(async move {
                tx.edit_queued_message(EditQueuedMessageInput {
                    queued_message_id: queued + 1000,
                    steer: Some(true),
                    ..Default::default()
                })
                .await
            })
        })
        .await;
    assert!(matches!(
        unknown,
        StoreError::State(StateError::QueuedMessageNotFound { .. })
    ));
    let empty = h
        .rejected(id, move |tx| {
            Box::pin(async move {
                tx.edit_queued_message(EditQueuedMessageInput {
                    queued_message_id: queued,
                    content: Some(vec![]),
                    ..Default::default()
                })
                .await
            })
        })
        .await;
    assert!(matches!(
        empty,
        StoreError::State(StateError::InvalidInput {
            field: "content",
            ..
        })
    ));
    let moved = h
        .rejected(id, move |tx| {
            Box::pin(async move { tx.move_queued_message(queued + 1000, 0).await })
        })
        .await;
    assert!(matches!(
        moved,
        StoreError::State(StateError::QueuedMessageNotFound { .. })
    ));
    assert_eq!(h.dump(id).await, before);
}

#[tokio::test]
async fn move_queued_message_reorders_and_later_inserts_keep_their_ends() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let ids = queue_all(
        &h,
        id,
        &[
            ("a", BusyBehavior::Queue),
            ("b", BusyBehavior::Queue),
            ("c", BusyBehavior::Queue),
            ("d", BusyBehavior::Queue),
        ],
    )
    .await;
    // (id to move, index, expected order)
    let cases: [(usize, u64, [&str; 4]); 5] = [
        (2, 0, ["c", "a", "b", "d"]),
        (2, 99, ["a", "b", "d", "c"]),
        (0, 2, ["b", "d", "a", "c"]),
        (3, 3, ["b", "a", "c", "d"]),
        // Already there: the order stays, the queue version still moves.
        (1, 0, ["b", "a", "c", "d"]),
    ];
    for (who, index, expected) in cases {
        let qid = ids[who];
        let (queue, chat) = h
            .run(id, move |tx| {
                Box::pin(async move { tx.move_queued_message(qid, index).await })
            })
            .await;
        assert_eq!(queue_texts(&queue), expected, "move {who} to {index}");
        assert_eq!(queue_texts(&h.queue(id).await), expected);
        assert_eq!(chat.queue_version, chat.snapshot_version);
    }
    queue_all(&h, id, &[("tail", BusyBehavior::Queue)]).await;
    let input = send("head", BusyBehavior::Interrupt);
    h.run(id, |tx| {
        Box::pin(async move { tx.send_message(input).await })
    })
    .await;
    assert_eq!(
        queue_texts(&h.queue(id).await),
        ["head", "b", "a", "c", "d", "tail"]
    );
}

/// What one race did: whether the edit (or move) committed, and the
/// promoted message's text.
#[derive(Debug)]
struct RaceOutcome {
    edited: bool,
    promoted: String,
}

/// Races `edit` of the queue head against `FinishTurn` promoting it, on
/// `rounds` chats at once; returns each outcome. Invariants checked here:
/// the loser is refused with not-found or not-allowed (the queue emptied),
/// the message is never both queued and in history, and `queue_version`
/// equals the snapshot of the last queue change.
async fn race_against_promotion<F>(rounds: usize, edit: F) -> Vec<RaceOutcome>
where
    F: Fn(i64) -> EditQueuedMessageInput + Send + Sync + 'static,
{
    let h = Arc::new(Harness::new().await);
    let edit = Arc::new(edit);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..rounds {
        let h = h.clone();
        let edit = edit.clone();
        tasks.spawn(async move {
            let id = h.chat_in(ExecutionState::R0).await;
            let ids = queue_all(&h, id, &[("original", BusyBehavior::Queue)]).await;
            let barrier = Arc::new(Barrier::new(2));
            let (b1, b2) = (barrier.clone(), barrier);
            let input = edit(ids[0]);
            let m1 = h.store.machine(id);
            let m2 = h.store.machine(id);
            let editor = tokio::spawn(async move {
                b1.wait().await;
                m1.update(move |tx| Box::pin(async move { tx.edit_queued_message(input).await }))
                    .await
            });
            let worker = tokio::spawn(async move {
                b2.wait().await;
                m2.update(|tx| Box::pin(async move { tx.finish_turn().await }))
                    .await
            });
            let edited = editor.await.expect("editor");
            let (finished, chat) = worker.await.expect("worker").expect("finish turn");
            let edited = match edited {
                Ok(_) => true,
                Err(StoreError::State(
                    StateError::QueuedMessageNotFound { .. } | StateError::TransitionNotAllowed(_),
                )) => false,
                Err(other) => panic!("unexpected error {other:?}"),
            };
            assert!(
                h.queue(id).await.is_empty(),
                "promoted, so no longer queued"
            );
            let promoted = finished.promoted_message.expect("promoted");
            assert_eq!(promoted.queued_message_id, Some(ids[0]));
            let in_history = h
                .active_messages(id)
                .await
                .iter()
                .filter(|m| m.queued_message_id == Some(ids[0]))
                .count();
            assert_eq!(in_history, 1, "promoted exactly once");
            let last = h.chat(id).await;
            assert_eq!(
                last.queue_version, chat.snapshot_version,
                "the promotion was the last queue change"
            );
            RaceOutcome {
                edited,
                promoted: text_of(&promoted.content.0),
            }
        });
    }
    let mut out = Vec::new();
    while let Some(joined) = tokio::time::timeout(Duration::from_secs(60), tasks.join_next())
        .await
        .expect("races finish")
    {
        out.push(joined.expect("race task"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn editing_a_queued_message_races_the_worker_promoting_it() {
    let outcomes = race_against_promotion(12, |qid| EditQueuedMessageInput {
        queued_message_id: qid,
        content: Some(vec![MessagePart::text("edited")]),
        ..Default::default()
    })
    .await;
    for o in &outcomes {
        // The edit either committed before the promotion (which then took
        // the edited text) or found the message gone: never lost, never
        // applied to a message already in history.
        let expected = if o.edited { "edited" } else { "original" };
        assert_eq!(o.promoted, expected, "{o:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn moving_a_queued_message_races_a_steering_step() {
    let h = Arc::new(Harness::new().await);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let h = h.clone();
        tasks.spawn(async move {
            let id = h.chat_in(ExecutionState::R0).await;
            let ids = queue_all(
                &h,
                id,
                &[("q", BusyBehavior::Queue), ("s", BusyBehavior::Steer)],
            )
            .await;
            let barrier = Arc::new(Barrier::new(2));
            let (b1, b2) = (barrier.clone(), barrier);
            let (m1, m2) = (h.store.machine(id), h.store.machine(id));
            let steer = ids[1];
            let mover = tokio::spawn(async move {
                b1.wait().await;
                m1.update(move |tx| Box::pin(async move { tx.move_queued_message(steer, 0).await }))
                    .await
            });
            let worker = tokio::spawn(async move {
                b2.wait().await;
                m2.update(|tx| {
                    Box::pin(async move { tx.commit_step_steering(tool_step(), false).await })
                })
                .await
            });
            let moved = mover.await.expect("mover");
            let (step, _) = worker.await.expect("worker").expect("step");
            // Whatever the order, the steer message went into history once
            // and the ordinary one stayed queued.
            assert_eq!(step.steered_messages.len(), 1);
            assert_eq!(step.steered_messages[0].queued_message_id, Some(steer));
            assert_eq!(queue_texts(&h.queue(id).await), ["q"]);
            match moved {
                Ok((queue, _)) => assert_eq!(queue_texts(&queue), ["s", "q"]),
                Err(StoreError::State(StateError::QueuedMessageNotFound { .. })) => {}
                Err(other) => panic!("unexpected error {other:?}"),
            }
        });
    }
    while let Some(joined) = tokio::time::timeout(Duration::from_secs(60), tasks.join_next())
        .await
        .expect("races finish")
    {
        joined.expect("race task");
    }
}

#[tokio::test]
async fn a_steering_step_that_leaves_a_call_open_steers_nothing_and_cancels_nothing() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    queue_all(&h, id, &[("s", BusyBehavior::Steer)]).await;
    let call = vec![NewMessage::assistant(vec![MessagePart::ToolCall {
        tool_call_id: "open-call".into(),
        tool_name: "pick".into(),
        args: "{}".into(),
    }])];
    let (result, _) = h
        .run(id, |tx| {
            Box::pin(async move { tx.commit_step_steering(call, false).await })
        })
        .await;
    assert!(result.steered_messages.is_empty());
    assert_eq!(
        h.outstanding_calls(id).await.len(),
        1,
        "the call stays open"
    );
    assert_eq!(queue_texts(&h.queue(id).await), ["s"]);
    assert_eq!(h.state(id).await, ExecutionState::R1);
}
