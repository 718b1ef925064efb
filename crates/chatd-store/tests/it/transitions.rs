//! Behaviour of individual transitions beyond the matrix: where messages go,
//! which rows are inserted, validation errors, and the miscellaneous rules.

use chatd_core::{
    BusyBehavior, ChatError, ChatErrorKind, ChatRole, ChatStatus, ExecutionState, FinishReason,
    INTERRUPTED_TOOL_RESULT, MessagePart, StateError, TIMED_OUT_TOOL_RESULT, ToolResultErrorKind,
};
use chatd_store::{
    CompleteRequiresActionInput, CreateChatInput, EditMessageInput, SendMessageInput, StoreConfig,
    StoreError, ToolResultInput,
};
use serde_json::json;
use uuid::Uuid;

use crate::common::{
    Harness, PENDING_CALL, assistant_text, pending_call_answer, retry_state, tool_call_message,
    user_text,
};

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

fn state_error(err: StoreError) -> StateError {
    match err {
        StoreError::State(e) => e,
        other => panic!("expected a state error, got {other:?}"),
    }
}

#[tokio::test]
async fn create_chat_starts_at_snapshot_one_with_history_version_one() {
    let h = Harness::new().await;
    let id = h.create().await;
    let chat = h.chat(id).await;
    assert_eq!(
        (
            chat.snapshot_version,
            chat.history_version,
            chat.queue_version,
            chat.generation_attempt
        ),
        (1, 1, 0, 0)
    );
    assert_eq!(chat.status, ChatStatus::Running);
    assert_eq!(chat.title, "New Chat");
    let messages = h.messages(id).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].revision, 1);
}

#[tokio::test]
async fn create_chat_rejects_empty_history_and_unknown_parent() {
    let h = Harness::new().await;
    let err = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            ..CreateChatInput::default()
        })
        .await
        .unwrap_err();
    assert!(matches!(
        state_error(err),
        StateError::InvalidInput {
            field: "initial_messages",
            ..
        }
    ));
    let err = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: Some(Uuid::new_v4()),
            initial_messages: vec![user_text("x")],
            ..CreateChatInput::default()
        })
        .await
        .unwrap_err();
    assert_eq!(state_error(err), StateError::ChatNotFound);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM chats")
        .fetch_one(h.pool())
        .await
        .unwrap();
    assert_eq!(count, 0);
}

#[tokio::test]
async fn create_child_chat_joins_the_parent_family() {
    let h = Harness::new().await;
    let root = h.create().await;
    let child = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: Some(root),
            initial_messages: vec![user_text("c")],
            ..Default::default()
        })
        .await
        .unwrap()
        .chat;
    let grandchild = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: Some(child.id),
            initial_messages: vec![user_text("g")],
            ..Default::default()
        })
        .await
        .unwrap()
        .chat;
    assert_eq!(child.root_chat_id, Some(root));
    assert_eq!(grandchild.root_chat_id, Some(root));
    assert_eq!(grandchild.parent_chat_id, Some(child.id));
}

#[tokio::test]
async fn send_message_interrupt_from_r0_queues_at_head_and_lands_i1() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let (result, _) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.send_message(send("urgent", BusyBehavior::Interrupt))
                    .await
            })
        })
        .await;
    assert!(result.inserted_messages.is_empty());
    let queue = h.queue(id).await;
    assert_eq!(queue.len(), 2);
    assert_eq!(text_of(&queue[0].content.0), "urgent");
    assert_eq!(Some(queue[0].id), result.queued_message.map(|q| q.id));
    assert_eq!(h.state(id).await, ExecutionState::I1);
}

#[tokio::test]
async fn send_message_queue_from_e1_appends_promotes_head_and_clears_error() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::E1).await;
    assert!(h.chat(id).await.last_error.is_some());
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.send_message(send("third", BusyBehavior::Queue)).await })
        })
        .await;
    assert_eq!(chat.last_error, None);
    assert_eq!(chat.status, ChatStatus::Running);
    // The old head ("queued") entered history with its queued id; "third" waits.
    let promoted = result.inserted_messages.last().unwrap();
    assert_eq!(text_of(&promoted.content.0), "queued");
    assert!(promoted.queued_message_id.is_some());
    let queue = h.queue(id).await;
    assert_eq!(
        queue
            .iter()
            .map(|q| text_of(&q.content.0))
            .collect::<Vec<_>>(),
        vec!["third"]
    );
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

#[tokio::test]
async fn send_message_interrupt_from_a1_answers_pending_calls_as_interrupted_and_lands_r1() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::A1).await;
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.send_message(send("stop", BusyBehavior::Interrupt)).await })
        })
        .await;
    assert_eq!(result.inserted_messages.len(), 1);
    match &result.inserted_messages[0].content.0[0] {
        MessagePart::ToolResult {
            tool_call_id,
            result,
            is_error,
            ..
        } => {
            assert_eq!(tool_call_id, PENDING_CALL);
            assert_eq!(result, &json!({"error": INTERRUPTED_TOOL_RESULT}));
            assert!(is_error);
        }
        other => panic!("unexpected part {other:?}"),
    }
    assert_eq!(chat.requires_action_deadline_at, None);
    let queue = h.queue(id).await;
    assert_eq!(
        text_of(&queue[0].content.0),
        "stop",
        "the interrupting message is next"
    );
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

#[tokio::test]
async fn send_message_into_a_full_queue_is_rejected_with_the_maximum() {
    let h = Harness::with_config(StoreConfig {
        max_queued_messages: 2,
        ..StoreConfig::default()
    })
    .await;
    let id = h.chat_in(ExecutionState::R1).await;
    h.run(id, |tx| {
        Box::pin(async move { tx.send_message(send("2", BusyBehavior::Queue)).await })
    })
    .await;
    let before = h.dump(id).await;
    let err = h
        .rejected(id, |tx| {
            Box::pin(async move { tx.send_message(send("3", BusyBehavior::Queue)).await })
        })
        .await;
    assert_eq!(state_error(err), StateError::MessageQueueFull { max: 2 });
    assert_eq!(h.dump(id).await, before);
    // The per-call override wins over the store's cap.
    h.run(id, |tx| {
        Box::pin(async move {
            tx.send_message(SendMessageInput {
                max_queue_size: Some(3),
                ..send("3", BusyBehavior::Queue)
            })
            .await
        })
    })
    .await;
    assert_eq!(h.queue(id).await.len(), 3);
}

#[tokio::test]
async fn edit_message_soft_deletes_suffix_clears_queue_and_inserts_replacement() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    h.commit_step(id, vec![assistant_text("answer")]).await;
    let original = h.messages(id).await;
    let first_user = original[0].id;
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.edit_message(EditMessageInput {
                    message_id: first_user,
                    replacement: user_text("better question"),
                    suffix_messages: vec![],
                })
                .await
            })
        })
        .await;
    assert_eq!(
        result.deleted_message_ids,
        original.iter().map(|m| m.id).collect::<Vec<_>>()
    );
    assert_eq!(result.deleted_queued_message_ids.len(), 1);
    assert!(h.queue(id).await.is_empty());
    let active = h.active_messages(id).await;
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].id, result.replacement_message.id);
    assert_eq!(text_of(&active[0].content.0), "better question");
    assert_eq!(chat.history_version, chat.snapshot_version);
    assert_eq!(chat.queue_version, chat.snapshot_version);
    // Soft-deleted rows are kept, with the edit's revision.
    for m in h.messages(id).await.into_iter().filter(|m| m.deleted) {
        assert_eq!(m.revision, chat.snapshot_version);
    }
    assert_eq!(h.state(id).await, ExecutionState::R0);
}

#[tokio::test]
async fn edit_message_rejects_non_user_unknown_and_deleted_messages() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    h.commit_step(id, vec![assistant_text("a")]).await;
    let messages = h.messages(id).await;
    let (user_id, assistant_id) = (messages[0].id, messages[1].id);
    let before = h.dump(id).await;
    let edit = |message_id: i64| EditMessageInput {
        message_id,
        replacement: user_text("x"),
        suffix_messages: vec![],
    };
    let cases = [
        (
            assistant_id,
            StateError::EditedMessageNotUser {
                message_id: assistant_id,
            },
        ),
        (
            987_654,
            StateError::MessageNotFound {
                message_id: 987_654,
            },
        ),
    ];
    for (message_id, expected) in cases {
        let err = h
            .rejected(id, |tx| {
                Box::pin(async move { tx.edit_message(edit(message_id)).await })
            })
            .await;
        assert_eq!(state_error(err), expected);
    }
    assert_eq!(h.dump(id).await, before);
    h.run(id, |tx| {
        Box::pin(async move { tx.edit_message(edit(user_id)).await })
    })
    .await;
    let err = h
        .rejected(id, |tx| {
            Box::pin(async move { tx.edit_message(edit(user_id)).await })
        })
        .await;
    assert_eq!(
        state_error(err),
        StateError::MessageNotFound {
            message_id: user_id
        }
    );
}

#[tokio::test]
async fn edit_message_of_another_chat_is_not_found() {
    let h = Harness::new().await;
    let a = h.chat_in(ExecutionState::W).await;
    let b = h.chat_in(ExecutionState::W).await;
    let foreign = h.messages(b).await[0].id;
    let err = h
        .rejected(a, |tx| {
            Box::pin(async move {
                tx.edit_message(EditMessageInput {
                    message_id: foreign,
                    replacement: user_text("x"),
                    suffix_messages: vec![],
                })
                .await
            })
        })
        .await;
    assert_eq!(
        state_error(err),
        StateError::MessageNotFound {
            message_id: foreign
        }
    );
}

#[tokio::test]
async fn delete_queued_message_unknown_id_is_not_found_and_empty_queue_is_not_allowed() {
    let h = Harness::new().await;
    let busy = h.chat_in(ExecutionState::R1).await;
    let idle = h.chat_in(ExecutionState::R0).await;
    let err = h
        .rejected(idle, |tx| {
            Box::pin(async move { tx.delete_queued_message(1).await })
        })
        .await;
    assert!(matches!(
        state_error(err),
        StateError::TransitionNotAllowed(_)
    ));
    // Unknown ids, and queued messages of another chat, are not found.
    let other = h.queue(busy).await[0].id;
    let third = h.chat_in(ExecutionState::R1).await;
    for (chat, queued_message_id) in [(busy, 424_242), (third, other)] {
        let err = h
            .rejected(chat, |tx| {
                Box::pin(async move { tx.delete_queued_message(queued_message_id).await })
            })
            .await;
        assert_eq!(
            state_error(err),
            StateError::QueuedMessageNotFound { queued_message_id }
        );
    }
}

#[tokio::test]
async fn promote_queued_message_from_r1_moves_it_to_the_head_and_interrupts() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    h.apply(id, |tx| {
        Box::pin(async move {
            tx.send_message(send("last", BusyBehavior::Queue))
                .await
                .map(|_| ())
        })
    })
    .await;
    let last = h.queue(id).await[1].id;
    h.apply(id, |tx| {
        Box::pin(async move { tx.promote_queued_message(last).await.map(|_| ()) })
    })
    .await;
    let queue = h.queue(id).await;
    assert_eq!(queue[0].id, last);
    assert_eq!(queue.len(), 2);
    assert_eq!(h.state(id).await, ExecutionState::I1);
    // Finishing the interruption promotes exactly that message.
    let (result, _) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.finish_interruption(vec![assistant_text("partial ans")])
                    .await
            })
        })
        .await;
    let promoted = result.promoted_message.unwrap();
    assert_eq!(promoted.queued_message_id, Some(last));
    assert_eq!(text_of(&promoted.content.0), "last");
    assert_eq!(
        text_of(&result.inserted_messages[0].content.0),
        "partial ans"
    );
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

#[tokio::test]
async fn promote_from_a1_answers_pending_calls_and_inserts_the_message() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::A1).await;
    let qid = h.queue(id).await[0].id;
    let (result, _) = h
        .run(id, |tx| {
            Box::pin(async move { tx.promote_queued_message(qid).await })
        })
        .await;
    assert_eq!(result.cancellation_messages.len(), 1);
    assert_eq!(
        result.inserted_message.unwrap().queued_message_id,
        Some(qid)
    );
    assert!(h.outstanding_calls(id).await.is_empty());
    assert_eq!(h.state(id).await, ExecutionState::R0);
}

#[tokio::test]
async fn complete_requires_action_validates_the_exact_set() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::A0).await;
    let before = h.dump(id).await;
    let ok = |id: &str| ToolResultInput::output(id, "{\"ok\":true}", false);
    let cases = vec![
        (
            vec![ok(PENDING_CALL), ok(PENDING_CALL)],
            ToolResultErrorKind::Duplicate,
        ),
        (
            vec![ok(PENDING_CALL), ok("nope")],
            ToolResultErrorKind::Unexpected,
        ),
        (vec![], ToolResultErrorKind::Missing),
        (
            vec![ToolResultInput::output(PENDING_CALL, "{not json", false)],
            ToolResultErrorKind::InvalidJson,
        ),
    ];
    for (results, kind) in cases {
        let err = h
            .rejected(id, |tx| {
                Box::pin(async move {
                    tx.complete_requires_action(CompleteRequiresActionInput {
                        results,
                        ..Default::default()
                    })
                    .await
                })
            })
            .await;
        match state_error(err) {
            StateError::ToolResult(e) => assert_eq!(e.kind, kind),
            other => panic!("expected {kind:?}, got {other:?}"),
        }
        assert_eq!(h.dump(id).await, before, "{kind:?} changed something");
    }
    let (inserted, chat) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.complete_requires_action(pending_call_answer("\"blue\""))
                    .await
            })
        })
        .await;
    assert_eq!(inserted.len(), 1);
    assert_eq!(inserted[0].role, ChatRole::Tool);
    assert!(
        matches!(&inserted[0].content.0[0], MessagePart::ToolResult { result, is_error: false, .. } if result == &json!("blue"))
    );
    assert_eq!(chat.requires_action_deadline_at, None);
    assert_eq!(h.state(id).await, ExecutionState::R0);
}

#[tokio::test]
async fn enter_requires_action_sets_the_deadline_from_database_time() {
    let h = Harness::with_config(StoreConfig {
        requires_action_timeout: std::time::Duration::from_secs(120),
        ..StoreConfig::default()
    })
    .await;
    let id = h.chat_in(ExecutionState::R0).await;
    h.commit_step(id, vec![tool_call_message("c9")]).await;
    let (deadline, _) = h
        .run(id, |tx| {
            Box::pin(async move { tx.enter_requires_action().await })
        })
        .await;
    let seconds: f64 =
        sqlx::query_scalar("SELECT extract(epoch FROM $1::timestamptz - now())::float8")
            .bind(deadline)
            .fetch_one(h.pool())
            .await
            .unwrap();
    assert!(
        (115.0..=120.5).contains(&seconds),
        "deadline is {seconds}s away"
    );
}

#[tokio::test]
async fn cancel_requires_action_answers_pending_calls_as_timed_out() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::A1).await;
    let (cancellations, _) = h
        .run(id, |tx| {
            Box::pin(async move { tx.cancel_requires_action(None).await })
        })
        .await;
    assert_eq!(cancellations.len(), 1);
    assert!(
        matches!(&cancellations[0].content.0[0], MessagePart::ToolResult { result, is_error: true, .. } if result == &json!({"error": TIMED_OUT_TOOL_RESULT}))
    );
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

#[tokio::test]
async fn finish_interruption_keeps_partial_text_and_answers_unfinished_calls() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::I0).await;
    let mut partial = chatd_store::NewMessage::assistant(vec![
        MessagePart::text("I was say"),
        MessagePart::ToolCall {
            tool_call_id: "half".into(),
            tool_name: "search".into(),
            args: "{\"q\":".into(),
        },
    ]);
    partial.finish_reason = Some(FinishReason::Interrupted);
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.finish_interruption(vec![partial]).await })
        })
        .await;
    assert_eq!(result.inserted_messages.len(), 2);
    assert_eq!(text_of(&result.inserted_messages[0].content.0), "I was say");
    assert_eq!(
        result.inserted_messages[0].finish_reason,
        Some(FinishReason::Interrupted)
    );
    assert!(
        matches!(&result.inserted_messages[1].content.0[0], MessagePart::ToolResult { tool_call_id, result, .. } if tool_call_id == "half" && result == &json!({"error": INTERRUPTED_TOOL_RESULT}))
    );
    assert_eq!(
        result.inserted_messages[1].finish_reason, None,
        "the synthetic tool result has none"
    );
    assert_eq!(result.promoted_message, None);
    assert_eq!(chat.status, ChatStatus::Waiting);
}

#[tokio::test]
async fn finish_interruption_after_an_interrupted_retry_clears_the_retry_state() {
    let h = Harness::new().await;
    // Interrupted during a retry's back-off: nothing streamed, nothing to keep.
    let id = h.chat_in_retrying(ExecutionState::I0).await;
    let interrupting = h.chat(id).await;
    assert_eq!(interrupting.retry_state, Some(retry_state(1)));
    let (result, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.finish_interruption(vec![]).await })
        })
        .await;
    assert!(result.inserted_messages.is_empty());
    assert_eq!(h.state(id).await, ExecutionState::W);
    assert_eq!(chat.retry_state, None, "no retry is coming any more");
    assert_eq!(chat.retry_state_version, chat.snapshot_version);
    assert_eq!(
        chat.history_version, interrupting.history_version,
        "history did not change: the transition itself clears the retry state"
    );
}

#[tokio::test]
async fn finish_reasons_are_stored_with_the_message_and_unknown_spellings_refused() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let messages: Vec<_> = FinishReason::ALL
        .into_iter()
        .map(|reason| {
            let mut m = assistant_text(reason.as_str());
            m.finish_reason = Some(reason);
            m
        })
        .chain([assistant_text("unknown")])
        .collect();
    h.apply(id, move |tx| {
        Box::pin(async move { tx.commit_step(messages, false).await.map(|_| ()) })
    })
    .await;
    let stored: Vec<_> = h
        .active_messages(id)
        .await
        .into_iter()
        .filter(|m| m.role == ChatRole::Assistant)
        .map(|m| (text_of(&m.content.0), m.finish_reason))
        .collect();
    let expected: Vec<_> = FinishReason::ALL
        .into_iter()
        .map(|r| (r.as_str().to_owned(), Some(r)))
        .chain([("unknown".to_owned(), None)])
        .collect();
    assert_eq!(stored, expected);
    // The column's check refuses any other spelling, so every stored value
    // decodes.
    let refused =
        sqlx::query("UPDATE chat_messages SET finish_reason = 'max_tokens' WHERE chat_id = $1")
            .bind(id)
            .execute(h.pool())
            .await
            .expect_err("check constraint");
    assert!(
        refused
            .to_string()
            .contains("chat_messages_finish_reason_check"),
        "{refused}"
    );
}

#[tokio::test]
async fn finish_turn_from_r1_promotes_the_head_with_its_queued_id() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let qid = h.queue(id).await[0].id;
    let (result, chat) = h
        .run(id, |tx| Box::pin(async move { tx.finish_turn().await }))
        .await;
    let promoted = result.promoted_message.unwrap();
    assert_eq!(promoted.queued_message_id, Some(qid));
    assert_eq!(promoted.role, ChatRole::User);
    assert_eq!(chat.history_version, chat.snapshot_version);
    assert_eq!(h.state(id).await, ExecutionState::R0);
}

#[tokio::test]
async fn generation_attempts_count_up_and_reset_when_history_changes() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    for expected in 1..=3 {
        let (attempt, _) = h
            .run(id, |tx| {
                Box::pin(async move { tx.record_generation_attempt().await })
            })
            .await;
        assert_eq!(attempt, expected);
    }
    let (chat, _) = h
        .run(id, |tx| {
            Box::pin(async move { tx.record_retry_state(retry_state(1)).await })
        })
        .await;
    assert_eq!(chat.retry_state_version, chat.snapshot_version);
    h.commit_step(id, vec![assistant_text("x")]).await;
    let chat = h.chat(id).await;
    assert_eq!(chat.generation_attempt, 0);
    assert_eq!(chat.retry_state, None);
    assert_eq!(chat.retry_state_version, chat.snapshot_version);
}

#[tokio::test]
async fn request_compaction_hands_off_ownership_with_a_fresh_epoch() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::E0).await;
    let (_, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.request_compaction().await })
        })
        .await;
    assert!(chat.compaction_requested_at.is_some());
    assert_eq!((chat.worker_id, chat.runner_id), (None, None));
    assert_eq!(chat.history_version, chat.snapshot_version);
    assert_eq!(chat.last_error, None);
    assert_eq!(h.state(id).await, ExecutionState::R0);
    h.apply(id, |tx| {
        Box::pin(async move {
            tx.commit_step(vec![assistant_text("summary")], true)
                .await
                .map(|_| ())
        })
    })
    .await;
    assert_eq!(h.chat(id).await.compaction_requested_at, None);
}

#[tokio::test]
async fn reconcile_invalid_state_unarchives_into_error() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::Invalid).await;
    let err = ChatError::new(
        ChatErrorKind::InvalidState,
        "Chat is in an invalid state.",
        false,
    );
    let expected = err.clone();
    let (_, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.reconcile_invalid_state(err).await })
        })
        .await;
    assert!(!chat.archived);
    assert_eq!(chat.status, ChatStatus::Error);
    assert_eq!(chat.last_error, Some(expected));
    assert_eq!(h.state(id).await, ExecutionState::E0);
}

#[tokio::test]
async fn abandon_of_an_unowned_chat_is_rejected() {
    let h = Harness::new().await;
    let id = h.create().await;
    let err = h
        .rejected(id, |tx| Box::pin(async move { tx.abandon().await }))
        .await;
    assert!(
        matches!(state_error(err), StateError::TransitionNotAllowed(e) if e.reason == "chat is not owned")
    );
}

#[tokio::test]
async fn acquire_writes_ownership_and_a_heartbeat() {
    let h = Harness::new().await;
    let id = h.create().await;
    let (worker, runner) = (Uuid::new_v4(), Uuid::new_v4());
    h.apply(id, move |tx| {
        Box::pin(async move { tx.acquire(worker, runner).await })
    })
    .await;
    let chat = h.chat(id).await;
    assert_eq!(
        (chat.worker_id, chat.runner_id),
        (Some(worker), Some(runner))
    );
    let beats: i64 = sqlx::query_scalar("SELECT count(*) FROM chat_heartbeats WHERE chat_id = $1 AND runner_id = $2 AND heartbeat_at > now() - interval '5 seconds'")
        .bind(id)
        .bind(runner)
        .fetch_one(h.pool())
        .await
        .unwrap();
    assert_eq!(beats, 1);
    h.apply(id, |tx| Box::pin(async move { tx.abandon().await }))
        .await;
    let beats: i64 = sqlx::query_scalar("SELECT count(*) FROM chat_heartbeats WHERE chat_id = $1")
        .bind(id)
        .fetch_one(h.pool())
        .await
        .unwrap();
    assert_eq!(beats, 0);
}

#[tokio::test]
async fn a_bundle_of_transitions_commits_one_snapshot() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let before = h.snapshot_version(id).await;
    let (_, chat) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.record_generation_attempt().await?;
                tx.commit_step(vec![assistant_text("done")], false).await?;
                tx.finish_turn().await
            })
        })
        .await;
    assert_eq!(chat.snapshot_version, before + 1);
    assert_eq!(h.state(id).await, ExecutionState::W);
}

#[tokio::test]
async fn an_error_inside_a_bundle_rolls_back_the_earlier_transitions() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let before = h.dump(id).await;
    let err = h
        .rejected(id, |tx| {
            Box::pin(async move {
                tx.commit_step(vec![assistant_text("x")], false).await?;
                tx.finish_turn().await?;
                tx.interrupt().await // W does not allow Interrupt.
            })
        })
        .await;
    assert!(matches!(
        state_error(err),
        StateError::TransitionNotAllowed(_)
    ));
    assert_eq!(h.dump(id).await, before);
}

#[tokio::test]
async fn family_archive_is_all_or_nothing_and_root_only() {
    let h = Harness::new().await;
    let root = h.chat_in(ExecutionState::W).await;
    let child = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: Some(root),
            initial_messages: vec![user_text("c")],
            ..Default::default()
        })
        .await
        .unwrap()
        .chat
        .id;
    // The child is running: archiving the family fails and changes nothing.
    let before = (h.dump(root).await, h.dump(child).await);
    let err = h.store.set_family_archived(root, true).await.unwrap_err();
    assert!(matches!(
        state_error(err),
        StateError::TransitionNotAllowed(_)
    ));
    assert_eq!((h.dump(root).await, h.dump(child).await), before);
    let err = h.store.set_family_archived(child, true).await.unwrap_err();
    assert_eq!(state_error(err), StateError::ChatNotRoot);
    h.apply(child, |tx| {
        Box::pin(async move { tx.finish_turn().await.map(|_| ()) })
    })
    .await;
    let chats = h.store.set_family_archived(root, true).await.unwrap();
    assert_eq!(
        chats.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![root, child]
    );
    assert!(chats.iter().all(|c| c.archived));
    assert_eq!(h.state(child).await, ExecutionState::XW);
    // Unarchive is idempotent per member: already-unarchived members are bumped only.
    let chats = h.store.set_family_archived(root, false).await.unwrap();
    assert!(chats.iter().all(|c| !c.archived));
    let err = h
        .store
        .set_family_archived(Uuid::new_v4(), true)
        .await
        .unwrap_err();
    assert_eq!(state_error(err), StateError::ChatNotFound);
}

/// A step that only appends messages lands without reading the row back
/// (issue 15: the state cannot change by an insert); the bundle still
/// shows the current row (`ChatTx::chat`), the finish that follows in the
/// same bundle writes the context with its status, and what commits, with
/// or without a finish, is the row a read finds.
#[tokio::test]
async fn a_step_that_only_appends_lands_unread_and_commits_the_current_row() {
    use chatd_store::internals::chats::{self, LockMode};

    let h = Harness::new().await;
    let id = h.create().await;
    // Warm the replica's cache of the context entries (a cold bundle reads
    // them and lands as before).
    for _ in 0..2 {
        h.run(id, |tx| {
            Box::pin(async move {
                tx.record_generation_attempt().await?;
                tx.commit_step(vec![assistant_text("warm")], false).await
            })
        })
        .await;
    }
    assert!(
        h.store
            .context_cache()
            .get(id, h.chat(id).await.history_version)
            .is_some()
    );
    // A step alone: the row the bundle shows, and the committed one.
    let mut tx = h.store.machine(id).begin().await.unwrap();
    tx.record_generation_attempt().await.unwrap();
    tx.commit_step(vec![assistant_text("one")], false)
        .await
        .unwrap();
    let shown = tx.chat().await.unwrap();
    let read = chats::select(tx.reader().await.unwrap(), id, LockMode::None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shown.message_count, read.message_count);
    assert_eq!(shown.history_version, read.history_version);
    assert_eq!(shown.history_version, tx.snapshot_version());
    assert_eq!(shown.generation_attempt, 0, "the insert trigger resets it");
    assert_eq!(tx.execution_state().await.unwrap(), ExecutionState::R0);
    let committed = tx.commit().await.unwrap();
    assert_eq!(committed, h.chat(id).await);
    // A step and a finish in one bundle.
    let before = h.chat(id).await;
    let (_, committed) = h
        .run(id, |tx| {
            Box::pin(async move {
                tx.commit_step(vec![assistant_text("two"), assistant_text("three")], false)
                    .await?;
                tx.finish_turn().await
            })
        })
        .await;
    let current = h.chat(id).await;
    assert_eq!(committed, current);
    assert_eq!(current.status, ChatStatus::Waiting);
    assert_eq!(current.message_count, before.message_count + 2);
    assert_eq!(current.history_version, current.snapshot_version);
    let mut tx = h.pool().begin().await.unwrap();
    let fresh = chatd_store::internals::messages::refresh_context(&mut tx, id)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        (
            current.context_tokens,
            current.context_estimated,
            current.compactions
        ),
        (
            fresh.context_tokens,
            fresh.context_estimated,
            fresh.compactions
        )
    );
    assert!(current.context_tokens.unwrap_or(0) > before.context_tokens.unwrap_or(0));
}

/// A send answers the calls its tail leaves without a result whether the
/// bundle read the tail or took the calls from the replica's cache (held
/// with the context entries and kept up to date by every append; issue
/// 15): the same synthetic results, and a cache that agrees with a read of
/// the tail after every bundle, also when another replica wrote between.
#[tokio::test]
async fn a_send_answers_the_outstanding_calls_from_the_cache_as_from_a_read_tail() {
    use chatd_core::{CANCELLED_TOOL_RESULT, ToolCallRef, outstanding_tool_calls};
    use chatd_store::NewMessage;

    let h = Harness::new().await;
    let id = h.create().await;
    let held = |version: i64| h.store.context_cache().outstanding(id, version);
    let read = || async {
        let tail = chatd_store::internals::messages::tail_contents(h.pool(), id)
            .await
            .unwrap();
        outstanding_tool_calls(tail.iter().map(Vec::as_slice))
    };
    let call = |id: &str| ToolCallRef {
        tool_call_id: id.into(),
        tool_name: chatd_testkit::store::DYNAMIC_TOOL.into(),
    };
    let step_and_finish = |messages: Vec<NewMessage>| {
        h.run(id, move |tx| {
            Box::pin(async move {
                tx.record_generation_attempt().await?;
                tx.commit_step(messages, false).await?;
                tx.finish_turn().await
            })
        })
    };
    // The send inserted the cancelled result of `call_id`, then the user
    // message.
    let answered = |sent: &chatd_store::SendMessageResult, call_id: &str| {
        let roles: Vec<ChatRole> = sent.inserted_messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![ChatRole::Tool, ChatRole::User]);
        assert_eq!(
            sent.inserted_messages[0].content.0,
            vec![MessagePart::synthetic_result(
                &call(call_id),
                CANCELLED_TOOL_RESULT
            )]
        );
    };
    let send_text = |text: &'static str| {
        h.run(id, move |tx| {
            Box::pin(async move { tx.send_message(send(text, BusyBehavior::Queue)).await })
        })
    };

    // A new chat's entries and tail are cached by its creation.
    assert_eq!(held(h.chat(id).await.history_version), Some(vec![]));
    let (_, chat) = step_and_finish(vec![assistant_text("hello")]).await;
    assert_eq!(held(chat.history_version), Some(vec![]));
    let (sent, chat) = send_text("one").await;
    assert_eq!(sent.inserted_messages.len(), 1, "nothing to answer");
    assert_eq!(held(chat.history_version), Some(vec![]));
    // A step leaves one call unanswered and answers another in the same
    // step: the cache follows both.
    let (_, chat) = step_and_finish(vec![
        tool_call_message("call-a"),
        tool_call_message("call-b"),
        NewMessage::tool(vec![MessagePart::ToolResult {
            tool_call_id: "call-b".into(),
            tool_name: chatd_testkit::store::DYNAMIC_TOOL.into(),
            result: json!({"ok": true}),
            is_error: false,
        }]),
    ])
    .await;
    assert_eq!(held(chat.history_version), Some(vec![call("call-a")]));
    assert_eq!(read().await, vec![call("call-a")]);
    // The send answers call-a from the cache, as it would from a read.
    let (sent, chat) = send_text("two").await;
    answered(&sent, "call-a");
    assert_eq!(held(chat.history_version), Some(vec![]));
    assert_eq!(read().await, vec![]);
    // Another replica (its own cache) leaves a call unanswered: this
    // replica's cached version is stale, so its send reads the tail.
    let other = chatd_store::Store::new(
        h.pool().clone(),
        std::sync::Arc::new(chatd_pubsub::RecordingPublisher::new()),
    );
    other
        .machine(id)
        .update(|tx| {
            Box::pin(async move {
                tx.record_generation_attempt().await?;
                tx.commit_step(vec![tool_call_message("call-c")], false)
                    .await?;
                tx.finish_turn().await
            })
        })
        .await
        .unwrap();
    let (sent, chat) = send_text("three").await;
    answered(&sent, "call-c");
    // That bundle read its entries afresh: the cache holds them, but not
    // the tail, until a bundle that starts from them reads it.
    assert_eq!(held(chat.history_version), None);
    assert_eq!(read().await, vec![]);
    let (_, chat) = step_and_finish(vec![tool_call_message("call-d")]).await;
    assert_eq!(held(chat.history_version), None);
    let (sent, chat) = send_text("four").await;
    assert_eq!(sent.inserted_messages.len(), 2, "call-d answered");
    assert_eq!(held(chat.history_version), Some(vec![]));
    let (_, chat) = step_and_finish(vec![tool_call_message("call-e")]).await;
    assert_eq!(held(chat.history_version), Some(vec![call("call-e")]));
    assert_eq!(read().await, vec![call("call-e")]);

    // A chat created with a call its initial history leaves unanswered
    // (after the last user message) has it cached, and its first send
    // answers it.
    let created = h
        .store
        .create_chat(CreateChatInput {
            owner_id: h.owner,
            initial_status: Some(ChatStatus::Waiting),
            initial_messages: vec![
                user_text("before"),
                tool_call_message("call-old"),
                user_text("question"),
                tool_call_message("call-new"),
            ],
            ..Default::default()
        })
        .await
        .unwrap();
    let other_id = created.chat.id;
    assert_eq!(
        h.store
            .context_cache()
            .outstanding(other_id, created.chat.history_version),
        Some(vec![call("call-new")])
    );
    let (sent, _) = h
        .run(other_id, |tx| {
            Box::pin(async move { tx.send_message(send("next", BusyBehavior::Queue)).await })
        })
        .await;
    assert_eq!(
        sent.inserted_messages[0].content.0,
        vec![MessagePart::synthetic_result(
            &call("call-new"),
            CANCELLED_TOOL_RESULT
        )]
    );
    assert_eq!(sent.inserted_messages.len(), 2);
}

/// `Chat.context` as a bundle commits it equals what a full read of the
/// history computes, whether the bundle took its context entries from the
/// replica's cache and the rows it appended (sends, steps), or read them
/// (a compaction boundary, an edit, a clear, a cold cache; issue 15).
#[tokio::test]
async fn the_committed_context_equals_a_full_read_with_or_without_the_cache() {
    use chatd_core::{Usage, Visibility};
    use chatd_store::{Chat, NewMessage};

    let h = Harness::new().await;
    let id = h.create().await;
    let check = |committed: Chat, what: &'static str| {
        let h = &h;
        async move {
            let mut tx = h.pool().begin().await.unwrap();
            let fresh = chatd_store::internals::messages::refresh_context(&mut tx, id)
                .await
                .unwrap();
            tx.rollback().await.unwrap();
            let fields = |c: &Chat| {
                (
                    c.context_tokens,
                    c.context_estimated,
                    c.compacted_through_message_id,
                    c.compactions,
                    c.context_limit,
                )
            };
            assert_eq!(fields(&committed), fields(&fresh), "after {what}");
            // The tail's outstanding calls, when cached with the entries,
            // are what a read of the tail finds.
            if let Some(held) = h
                .store
                .context_cache()
                .outstanding(id, committed.history_version)
            {
                let tail = chatd_store::internals::messages::tail_contents(h.pool(), id)
                    .await
                    .unwrap();
                let read = chatd_core::outstanding_tool_calls(tail.iter().map(Vec::as_slice));
                assert_eq!(held, read, "outstanding calls after {what}");
            }
            // The committed history's entries are cached: the next bundle
            // starts from them.
            assert!(
                h.store
                    .context_cache()
                    .get(id, committed.history_version)
                    .is_some(),
                "cached after {what}"
            );
        }
    };
    let answer = |text: &str, input: i64| {
        let mut m = assistant_text(text);
        m.usage = Some(Usage {
            input_tokens: input,
            output_tokens: 9,
            cache_read_tokens: 3,
            ..Usage::default()
        });
        m
    };
    let step = |messages: Vec<NewMessage>| {
        h.run(id, move |tx| {
            Box::pin(async move {
                tx.record_generation_attempt().await?;
                tx.commit_step(messages, false).await
            })
        })
    };

    // A cold cache (as on a replica that never saw the chat): the first
    // step reads the entries.
    h.store.context_cache().remove(id);
    let (_, chat) = step(vec![answer("first answer", 40)]).await;
    check(chat, "a step with a cold cache").await;
    // From the cache on: a step with a tool call and its result, a finish
    // and a send, a step whose estimate follows the reported usage.
    let (_, chat) = step(vec![
        tool_call_message("call-1"),
        NewMessage::tool(vec![MessagePart::ToolResult {
            tool_call_id: "call-1".into(),
            tool_name: chatd_testkit::store::DYNAMIC_TOOL.into(),
            result: json!({"picked": "blue"}),
            is_error: false,
        }]),
    ])
    .await;
    check(chat, "a step with a tool call").await;
    let (_, chat) = step(vec![answer("second answer", 80)]).await;
    check(chat, "a step from the cache").await;
    h.run(id, |tx| Box::pin(async move { tx.finish_turn().await }))
        .await;
    let (_, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.send_message(send("more", BusyBehavior::Queue)).await })
        })
        .await;
    check(chat, "a send").await;
    // Two models with windows of their own, the second the default: a send
    // that switches the chat to the first one, then steps under it.
    let provider = Uuid::new_v4();
    let (small, large) = (Uuid::new_v4(), Uuid::new_v4());
    sqlx::query("INSERT INTO chat_providers (id, provider) VALUES ($1, 'openai')")
        .bind(provider)
        .execute(h.pool())
        .await
        .unwrap();
    for (config, limit, default) in [(small, 8_000_i64, false), (large, 200_000, true)] {
        sqlx::query(
            "INSERT INTO chat_model_configs (id, provider_id, model, context_limit, is_default)
             VALUES ($1, $2, 'm', $3, $4)",
        )
        .bind(config)
        .bind(provider)
        .bind(limit)
        .bind(default)
        .execute(h.pool())
        .await
        .unwrap();
    }
    let (_, chat) = step(vec![answer("under the default model", 60)]).await;
    check(chat, "a step under the default model").await;
    assert_eq!(h.chat(id).await.context_limit, Some(200_000));
    h.run(id, |tx| Box::pin(async move { tx.finish_turn().await }))
        .await;
    let (_, chat) = h
        .run(id, move |tx| {
            Box::pin(async move {
                let mut message = user_text("switch");
                message.model_config_id = Some(small);
                tx.send_message(SendMessageInput {
                    message,
                    busy_behavior: BusyBehavior::Queue,
                    max_queue_size: None,
                })
                .await
            })
        })
        .await;
    check(chat.clone(), "a send that switches the model").await;
    assert_eq!(chat.context_limit, Some(8_000));
    let (_, chat) = step(vec![answer("under the small model", 70)]).await;
    check(chat, "a step under the small model").await;
    // A compaction summary: a boundary changes which rows count.
    let through = h.active_messages(id).await.last().unwrap().id;
    let mut summary = NewMessage::new(ChatRole::Assistant, vec![MessagePart::text("summary")]);
    summary.visibility = Visibility::Model;
    summary.compressed = true;
    summary.compacted_through_id = Some(through);
    let (_, chat) = step(vec![summary]).await;
    check(chat, "a compaction summary").await;
    let (_, chat) = step(vec![answer("after the summary", 30)]).await;
    check(chat, "a step after the summary").await;
    // An edit soft-deletes rows: the entries are read again.
    let first_user = h
        .active_messages(id)
        .await
        .into_iter()
        .find(|m| m.role == ChatRole::User)
        .unwrap()
        .id;
    let (_, chat) = h
        .run(id, move |tx| {
            Box::pin(async move {
                tx.edit_message(EditMessageInput {
                    message_id: first_user,
                    replacement: user_text("edited"),
                    suffix_messages: vec![],
                })
                .await
            })
        })
        .await;
    check(chat, "an edit").await;
    let (_, chat) = step(vec![answer("after the edit", 20)]).await;
    check(chat, "a step after the edit").await;
    // A clear-context marker.
    h.run(id, |tx| Box::pin(async move { tx.finish_turn().await }))
        .await;
    let (_, chat) = h
        .run(id, |tx| {
            Box::pin(async move {
                let mut marker =
                    NewMessage::new(ChatRole::System, vec![MessagePart::ContextCleared]);
                marker.visibility = Visibility::User;
                marker.compressed = true;
                tx.clear_context(vec![marker]).await
            })
        })
        .await;
    check(chat, "a clear").await;
    let (_, chat) = h
        .run(id, |tx| {
            Box::pin(async move { tx.send_message(send("fresh", BusyBehavior::Queue)).await })
        })
        .await;
    check(chat, "a send after the clear").await;
    // Another store (a replica with its own cache) changes the history: the
    // first one's cached version is stale, and its next bundle reads again.
    let other = chatd_store::Store::new(
        h.pool().clone(),
        std::sync::Arc::new(chatd_pubsub::RecordingPublisher::new()),
    );
    let (_, by_other) = other
        .machine(id)
        .update(|tx| {
            Box::pin(async move {
                tx.record_generation_attempt().await?;
                tx.commit_step(vec![assistant_text("from the other replica")], false)
                    .await
            })
        })
        .await
        .unwrap();
    assert!(
        h.store
            .context_cache()
            .get(id, by_other.history_version)
            .is_none()
    );
    let (_, chat) = step(vec![answer("back on the first", 50)]).await;
    check(chat, "a step after another replica's").await;
}

/// `queries::messages::insert` returns the row without reading its content
/// back (issue 15): the row it returns is the row a read finds, for every
/// part kind and for JSON that `jsonb` could have rewritten (object keys in
/// any order, nested arrays, large and fractional numbers, escapes).
#[tokio::test]
async fn insert_returns_the_row_a_read_finds() {
    use chatd_store::NewMessage;
    use chatd_store::internals::{chats, messages};

    let h = Harness::new().await;
    let id = h.create().await;
    let result = json!({
        "zeta": [1, -2, 12345678901234567890_u64, 0.1, 1e-7, 2.5e300, -0.0, 5.0],
        "alpha": {"b": null, "a": true, "": "empty key"},
        "mid": "tab\tquote\"backslash\\ unicode é 漢 😀 \u{1}",
    });
    let mut message = NewMessage::assistant(vec![
        MessagePart::Reasoning {
            text: "think".into(),
            signature: Some("sig==".into()),
        },
        MessagePart::text("answer"),
        MessagePart::ToolCall {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            args: "{\"b\": 1, \"a\": [2, 3]}".into(),
        },
        MessagePart::ToolResult {
            tool_call_id: "c1".into(),
            tool_name: "t".into(),
            result,
            is_error: false,
        },
        MessagePart::File {
            file_id: Uuid::new_v4(),
            media_type: "image/png".into(),
            name: Some("a.png".into()),
        },
        MessagePart::ToolApproval {
            tool_call_id: "c2".into(),
            tool_name: "t".into(),
            approved: true,
            reason: None,
        },
    ]);
    message.usage = Some(chatd_core::Usage {
        input_tokens: 10,
        output_tokens: 2,
        ..Default::default()
    });
    message.finish_reason = Some(FinishReason::ToolCalls);
    message.provider_response_id = Some("resp-1".into());
    message.created_by = Some(h.owner);
    message.model_config_id = Some(Uuid::new_v4());
    message.reasoning_effort = Some("high".into());
    message.context_limit = Some(128_000);
    message.total_cost_micros = Some(17);
    message.runtime_ms = Some(250);
    message.client_message_id = Some("client-1".into());
    let mut tx = h.pool().begin().await.unwrap();
    chats::lock_and_bump(&mut tx, id).await.unwrap().unwrap();
    let returned = messages::insert(&mut tx, id, &message, Some(42))
        .await
        .unwrap();
    assert_eq!(returned.queued_message_id, Some(42));
    let read = messages::select(&mut *tx, id, returned.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(returned, read);
    assert_eq!(returned.content.0, message.content);
    // Floats that `jsonb` prints back as integers (`1e16` is
    // `10000000000000000` there): such content is read back.
    let floats = NewMessage::tool(vec![MessagePart::ToolResult {
        tool_call_id: "c3".into(),
        tool_name: "t".into(),
        result: json!({"big": 1e16, "bigger": 1.7e18, "negative": -2e17, "small": 0.25}),
        is_error: false,
    }]);
    let returned = messages::insert(&mut tx, id, &floats, None).await.unwrap();
    let read = messages::select(&mut *tx, id, returned.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(returned, read);
    // A summary boundary, whose defaults differ.
    let mut summary = NewMessage::new(ChatRole::Assistant, vec![MessagePart::text("summary")]);
    summary.visibility = chatd_core::Visibility::Model;
    summary.compressed = true;
    summary.compacted_through_id = Some(returned.id);
    let returned = messages::insert(&mut tx, id, &summary, None).await.unwrap();
    let read = messages::select(&mut *tx, id, returned.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(returned, read);
    tx.commit().await.unwrap();
}
