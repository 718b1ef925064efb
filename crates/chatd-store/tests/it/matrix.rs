//! The exhaustive matrix: every transition × every execution state (`N`, the
//! 12 row states and `Invalid`). Allowed pairs land in the listed state with
//! the documented effects and advance `snapshot_version` by exactly one;
//! every other pair is rejected with the right error and changes nothing
//! (row, messages, queue, heartbeats and `snapshot_version` untouched).
//! Every chat has been through a retry while it ran, so that the effects on
//! `retry_state` show. `CommitStep` is also checked in its steering form
//! (the step that continues a turn) with a steer message queued, and
//! `CompleteRequiresAction` in its approval forms (API.md "Tool approval"):
//! the pending call is made an approval call (the chat's dynamic tools
//! cleared) and answered with an approval or a denial.

use chatd_core::{
    BusyBehavior, ChatError, ChatErrorKind, ExecutionState, MessagePart, StateError, Transition,
    matrix,
};
use chatd_store::{
    CompleteRequiresActionInput, EditMessageInput, EditQueuedMessageInput, NewMessage,
    SendMessageInput, StoreError, ToolResultInput,
};
use uuid::Uuid;

use crate::common::{
    Harness, PENDING_CALL, chat_error, pending_call_answer, retry_state, user_text,
};

/// Which form of a transition the matrix test applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// The ordinary inputs, with a cold context cache (as on a replica
    /// that never saw the chat).
    Plain,
    /// `CommitStep` as the step that continues the turn
    /// (`commit_step_steering`), every queued message marked steer first.
    Steering,
    /// `CompleteRequiresAction` approving the pending call, which waits
    /// for approval (the chat has no dynamic tools).
    Approving,
    /// `CompleteRequiresAction` denying it.
    Denying,
    /// `CommitStep` of a step whose `spawn_agent` call creates a child in
    /// the same bundle (`ChatTx::create_child`): the child exists exactly
    /// when the step committed.
    Spawning,
    /// The ordinary inputs with the replica's context cache holding the
    /// chat's entries and its tail's outstanding calls at its current
    /// history (as a read finds them): the paths that skip those reads
    /// (issue 15: a send answering calls from the cache, a step landing
    /// without reading the row back).
    Warm,
    /// The ordinary inputs in an optimistic bundle
    /// (`ChatMachine::update_optimistic`) whose guess is the chat's current
    /// row, as this replica's last commit leaves it (issue 15: the
    /// lock-and-bump folded into the first write). A missing chat's guess
    /// is a row it had before it was deleted.
    Guessed,
    /// The same with a stale guess: the row one version back and in the
    /// other of running and waiting, so that the guessed state admits what
    /// the current one rejects or the reverse. The bundle must end exactly
    /// as an ordinary one (run again, locked).
    Misguessed,
}

/// Applies `transition` to chat `id` with ordinary inputs in one bundle.
async fn apply(
    h: &Harness,
    id: Uuid,
    transition: Transition,
    form: Form,
) -> Result<(), StoreError> {
    if transition == Transition::CreateChat {
        let input = h.chat_input(id, "hi");
        return h.store.create_chat(input).await.map(|_| ());
    }
    let first_user = lowest_id(
        h,
        "SELECT coalesce(min(id), 1) FROM chat_messages WHERE chat_id = $1 AND role = 'user'",
        id,
    )
    .await;
    let first_queued = lowest_id(
        h,
        "SELECT coalesce(min(id), 1000000) FROM chat_queued_messages WHERE chat_id = $1",
        id,
    )
    .await;
    let last_answer = lowest_id(
        h,
        "SELECT coalesce(max(id), 1) FROM chat_messages WHERE chat_id = $1 AND role = 'assistant' AND NOT deleted",
        id,
    )
    .await;
    let mut child = h.chat_input(Uuid::new_v4(), "sub-task");
    child.spawn_key = Some(format!("{id}:spawn"));
    let inputs = Inputs {
        transition,
        form,
        first_user,
        first_queued,
        last_answer,
        child,
    };
    if matches!(form, Form::Guessed | Form::Misguessed) {
        let inputs = &inputs;
        h.store
            .machine(id)
            .update_optimistic(|_| true, |tx, _| Box::pin(run(tx, inputs.clone())))
            .await?;
        return Ok(());
    }
    let mut tx = h.store.machine(id).begin().await?;
    run(&mut tx, inputs).await?;
    tx.commit().await?;
    Ok(())
}

/// What [`run`] applies: the transition, its form and the rows it names.
#[derive(Clone)]
struct Inputs {
    transition: Transition,
    form: Form,
    first_user: i64,
    first_queued: i64,
    /// The newest assistant answer of the active branch.
    last_answer: i64,
    /// The child a spawning step creates.
    child: chatd_store::CreateChatInput,
}

/// Applies `inputs.transition` in the open bundle `tx`.
async fn run(tx: &mut chatd_store::ChatTx, inputs: Inputs) -> Result<(), StoreError> {
    let Inputs {
        transition,
        form,
        first_user,
        first_queued,
        last_answer,
        child,
    } = inputs;
    match transition {
        Transition::CreateChat => unreachable!(),
        Transition::SetArchived { archived } => tx.set_archived(archived).await?,
        Transition::SendMessage { busy_behavior } => tx
            .send_message(SendMessageInput {
                message: user_text("new"),
                busy_behavior,
                max_queue_size: None,
            })
            .await
            .map(|_| ())?,
        Transition::EditMessage => tx
            .edit_message(EditMessageInput {
                message_id: first_user,
                replacement: user_text("edited"),
                suffix_messages: vec![],
            })
            .await
            .map(|_| ())?,
        Transition::RegenerateMessage => tx.regenerate_message(last_answer).await.map(|_| ())?,
        Transition::ActivateBranch => tx.activate_branch(first_user).await.map(|_| ())?,
        Transition::RequestCompaction => tx.request_compaction().await?,
        Transition::ClearContext => {
            let mut boundary = NewMessage::system("context cleared");
            boundary.compressed = true;
            boundary.visibility = chatd_core::Visibility::Model;
            tx.clear_context(vec![boundary]).await.map(|_| ())?
        }
        Transition::AppendMessages => tx
            .append_messages(vec![
                user_text("appended"),
                NewMessage::assistant(vec![MessagePart::text("noted")]),
            ])
            .await
            .map(|_| ())?,
        Transition::DeleteQueuedMessage => {
            tx.delete_queued_message(first_queued).await.map(|_| ())?
        }
        Transition::PromoteQueuedMessage => {
            tx.promote_queued_message(first_queued).await.map(|_| ())?
        }
        Transition::EditQueuedMessage => tx
            .edit_queued_message(EditQueuedMessageInput {
                queued_message_id: first_queued,
                content: Some(vec![MessagePart::text("edited queued")]),
                model_config_id: None,
                steer: Some(true),
            })
            .await
            .map(|_| ())?,
        Transition::MoveQueuedMessage => {
            tx.move_queued_message(first_queued, 5).await.map(|_| ())?
        }
        Transition::Interrupt => tx.interrupt().await.map(|_| ())?,
        Transition::CompleteRequiresAction if matches!(form, Form::Approving | Form::Denying) => tx
            .complete_requires_action(CompleteRequiresActionInput {
                results: vec![ToolResultInput::decision(
                    PENDING_CALL,
                    form == Form::Approving,
                    Some("decided".into()),
                )],
                ..CompleteRequiresActionInput::default()
            })
            .await
            .map(|_| ())?,
        Transition::CompleteRequiresAction => tx
            .complete_requires_action(pending_call_answer("{\"color\":\"red\"}"))
            .await
            .map(|_| ())?,
        Transition::Acquire => tx.acquire(Uuid::new_v4(), Uuid::new_v4()).await?,
        Transition::Abandon => tx.abandon().await?,
        Transition::RecordGenerationAttempt => tx.record_generation_attempt().await.map(|_| ())?,
        Transition::RecordRetryState => tx.record_retry_state(retry_state(1)).await.map(|_| ())?,
        Transition::CommitStep if form == Form::Spawning => {
            tx.commit_step(
                vec![NewMessage::assistant(vec![MessagePart::text("step")])],
                false,
            )
            .await
            .map(|_| ())?;
            tx.create_child(child).await.map(|_| ())?
        }
        Transition::CommitStep if form == Form::Steering => tx
            .commit_step_steering(
                vec![NewMessage::assistant(vec![MessagePart::text("step")])],
                false,
            )
            .await
            .map(|_| ())?,
        Transition::CommitStep => tx
            .commit_step(
                vec![NewMessage::assistant(vec![MessagePart::text("step")])],
                false,
            )
            .await
            .map(|_| ())?,
        Transition::EnterRequiresAction => tx.enter_requires_action().await.map(|_| ())?,
        Transition::FinishInterruption => tx
            .finish_interruption(vec![NewMessage::assistant(vec![MessagePart::text(
                "partial",
            )])])
            .await
            .map(|_| ())?,
        Transition::FinishTurn => tx.finish_turn().await.map(|_| ())?,
        Transition::FinishError => tx.finish_error(chat_error("x")).await?,
        Transition::CancelRequiresAction => tx.cancel_requires_action(None).await.map(|_| ())?,
        Transition::ReconcileInvalidState => tx
            .reconcile_invalid_state(ChatError::new(
                ChatErrorKind::InvalidState,
                "Chat is in an invalid state.",
                false,
            ))
            .await
            .map(|_| ())?,
    }
    Ok(())
}

/// The id `sql` selects for chat `id` (a `min(id)` with a fallback for
/// states that have no such row).
async fn lowest_id(h: &Harness, sql: &'static str, id: Uuid) -> i64 {
    sqlx::query_scalar(sql)
        .bind(id)
        .fetch_one(h.pool())
        .await
        .expect("lowest id")
}

/// Checks one transition against every state, with a cold and a warm
/// context cache.
async fn check_transition(transition: Transition) {
    check_form(transition, Form::Plain).await;
    if transition != Transition::CreateChat {
        check_form(transition, Form::Warm).await;
        check_form(transition, Form::Guessed).await;
        check_form(transition, Form::Misguessed).await;
    }
}

/// Puts chat `id`'s context entries and tail calls, read now, in the
/// replica's cache at its current `history_version` ([`Form::Warm`]).
async fn warm(h: &Harness, id: Uuid) {
    let chat = h.chat(id).await;
    let entries = chatd_store::internals::messages::context_entries(h.pool(), id)
        .await
        .expect("entries");
    let tail = chatd_store::internals::messages::tail_contents(h.pool(), id)
        .await
        .expect("tail");
    let calls = chatd_core::outstanding_tool_calls(tail.iter().map(Vec::as_slice));
    h.store.context_cache().put_log(
        id,
        chat.history_version,
        std::sync::Arc::new(entries),
        Some(std::sync::Arc::new(calls)),
    );
}

/// Puts the guess of [`Form::Guessed`] (the current row) or, with `stale`,
/// of [`Form::Misguessed`] in the replica's row cache for chat `id`; a
/// missing chat (`N`) gets the row of another chat under its id.
async fn guess(h: &Harness, id: Uuid, from: ExecutionState, stale: bool) {
    let source = if from == ExecutionState::N {
        h.store
            .create_chat(h.chat_input(Uuid::new_v4(), "stand-in"))
            .await
            .expect("stand-in chat")
            .chat
            .id
    } else {
        id
    };
    let mut conn = h.pool().acquire().await.expect("connection");
    let mut row = chatd_store::internals::chats::select_facts(&mut conn, source)
        .await
        .expect("facts")
        .expect("exists");
    row.chat.id = id;
    if stale {
        row.chat.snapshot_version -= 1;
        row.chat.status = if row.chat.status == chatd_core::ChatStatus::Running {
            chatd_core::ChatStatus::Waiting
        } else {
            chatd_core::ChatStatus::Running
        };
        row.queue_len = 0;
    }
    h.store.row_cache().remove(id);
    h.store.row_cache().put(row);
}

/// Checks one form of a transition against every state.
async fn check_form(transition: Transition, form: Form) {
    let h = Harness::new().await;
    for from in ExecutionState::ALL {
        let id = h.chat_in_retrying(from).await;
        if form == Form::Steering {
            sqlx::query("UPDATE chat_queued_messages SET steer = true WHERE chat_id = $1")
                .bind(id)
                .execute(h.pool())
                .await
                .expect("mark steer");
        }
        if matches!(form, Form::Approving | Form::Denying) && from != ExecutionState::N {
            sqlx::query("UPDATE chats SET dynamic_tools = '[]'::jsonb WHERE id = $1")
                .bind(id)
                .execute(h.pool())
                .await
                .expect("make the pending call an approval call");
        }
        if transition == Transition::RegenerateMessage && from != ExecutionState::N {
            // An answer to regenerate, in every state (the rejected ones
            // must refuse before looking at it).
            sqlx::query(
                "INSERT INTO chat_messages (chat_id, role, content)
                 VALUES ($1, 'assistant', '[{\"type\":\"text\",\"text\":\"answer\"}]')",
            )
            .bind(id)
            .execute(h.pool())
            .await
            .expect("an answer");
        }
        if matches!(form, Form::Guessed | Form::Misguessed) {
            guess(&h, id, from, form == Form::Misguessed).await;
        }
        if form == Form::Warm && from != ExecutionState::N {
            warm(&h, id).await;
        } else {
            // Every other form starts cold: the bundle reads what it needs.
            h.store.context_cache().remove(id);
        }
        let before = h.dump(id).await;
        let (version_before, retry_before) = if from == ExecutionState::N {
            (0, None)
        } else {
            let chat = h.chat(id).await;
            (chat.snapshot_version, chat.retry_state)
        };
        let turn_before = turn_started_at(&h, id).await;
        let result = apply(&h, id, transition, form).await;
        if form == Form::Spawning {
            let children: i64 =
                sqlx::query_scalar("SELECT count(*) FROM chats WHERE parent_chat_id = $1")
                    .bind(id)
                    .fetch_one(h.pool())
                    .await
                    .expect("count children");
            let expected = i64::from(matrix::allowed_targets(transition, from).is_some());
            assert_eq!(
                children, expected,
                "{transition} from {from}: a child exactly when the step commits"
            );
        }
        match matrix::allowed_targets(transition, from) {
            Some(targets) => {
                result.unwrap_or_else(|err| {
                    panic!("{transition} from {from} must be allowed, got {err}")
                });
                let to = h.state(id).await;
                // The builders leave at most one queued message, so a
                // transition with two targets lands in the first (emptied)
                // one; a steering step takes the (steer) message in, which
                // empties the queue.
                let expected = match (form, from) {
                    (Form::Steering, ExecutionState::R1) => ExecutionState::R0,
                    _ => targets[0],
                };
                assert!(targets.contains(&expected));
                assert_eq!(to, expected, "{transition} from {from} landed in {to}");
                let chat = h.chat(id).await;
                assert_eq!(
                    chat.snapshot_version,
                    version_before + 1,
                    "{transition} from {from}: snapshot advances once"
                );
                check_effects(&h, id, transition, form, from, to, &chat).await;
                check_context(&h, id, transition, from, &chat).await;
                check_queue_effects(&h, id, transition, form, from, &before, &chat).await;
                check_retry_state(transition, from, to, retry_before.is_some(), &chat);
                // A turn starts exactly when the chat becomes runnable
                // (migration 0016: the order waiting chats start in).
                if from != ExecutionState::N {
                    assert_eq!(
                        turn_started_at(&h, id).await != turn_before,
                        !from.is_runnable() && to.is_runnable(),
                        "{transition} from {from} to {to}: turn_started_at"
                    );
                }
            }
            None => {
                let err = result.expect_err(&format!("{transition} from {from} must be rejected"));
                let expected = match (from, &err) {
                    (_, StoreError::Database(db)) if transition == Transition::CreateChat => {
                        db.as_database_error().and_then(|e| e.code()).as_deref() == Some("23505")
                    }
                    (ExecutionState::N, StoreError::State(StateError::ChatNotFound)) => true,
                    (ExecutionState::Invalid, StoreError::State(StateError::InvalidState(e))) => {
                        e.transition == transition
                    }
                    (_, StoreError::State(StateError::TransitionNotAllowed(e))) => {
                        e.transition == transition && e.from == from
                    }
                    _ => false,
                };
                assert!(
                    expected,
                    "{transition} from {from}: unexpected error {err:?}"
                );
                assert_eq!(
                    h.dump(id).await,
                    before,
                    "{transition} from {from} was rejected but changed something"
                );
            }
        }
    }
}

/// `chats.turn_started_at` of chat `id` (`None` when it does not exist).
async fn turn_started_at(h: &Harness, id: Uuid) -> Option<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar("SELECT turn_started_at FROM chats WHERE id = $1")
        .bind(id)
        .fetch_optional(h.pool())
        .await
        .expect("turn_started_at")
}

/// The committed `Chat.context` columns are what a full read of the
/// history computes, whichever way the bundle came by its entries.
async fn check_context(
    h: &Harness,
    id: Uuid,
    transition: Transition,
    from: ExecutionState,
    chat: &chatd_store::Chat,
) {
    let mut tx = h.pool().begin().await.expect("begin");
    let fresh = chatd_store::internals::messages::refresh_context(&mut tx, id)
        .await
        .expect("refresh");
    tx.rollback().await.expect("rollback");
    let fields = |c: &chatd_store::Chat| {
        (
            c.context_tokens,
            c.context_estimated,
            c.compacted_through_message_id,
            c.compactions,
            c.context_limit,
        )
    };
    assert_eq!(
        fields(chat),
        fields(&fresh),
        "{transition} from {from}: the committed context"
    );
}

/// The documented effects of an allowed transition.
async fn check_effects(
    h: &Harness,
    id: Uuid,
    transition: Transition,
    form: Form,
    from: ExecutionState,
    to: ExecutionState,
    chat: &chatd_store::Chat,
) {
    use ExecutionState as S;
    // Leaving error (except to archive) clears last_error.
    if matches!(from, S::E0 | S::E1) && !to.is_archived() && !matches!(to, S::E0 | S::E1) {
        assert_eq!(
            chat.last_error, None,
            "{transition} from {from} must clear last_error"
        );
    }
    if matches!(to, S::E0 | S::E1)
        && from != S::Invalid
        && !from.is_archived()
        && !matches!(from, S::E0 | S::E1)
    {
        assert!(
            chat.last_error.is_some(),
            "{transition} into {to} stores last_error"
        );
    }
    // Leaving requires_action (other than by completing it) answers every
    // pending call; nothing outside A* has unanswered calls in these
    // fixtures, except the approved call an approval leaves for the
    // worker.
    if form == Form::Approving {
        let active = h.active_messages(id).await;
        let approved =
            chatd_core::approved_tool_calls(active.iter().map(|m| m.content.0.as_slice()));
        assert_eq!(
            approved
                .iter()
                .map(|c| c.tool_call_id.as_str())
                .collect::<Vec<_>>(),
            vec![PENDING_CALL],
            "{transition} from {from}: the approved call waits for the worker"
        );
        let approval = active.last().expect("the approval row");
        assert_eq!(approval.visibility, chatd_core::Visibility::User);
        assert_eq!(chat.requires_action_deadline_at, None);
    } else if !matches!(to, S::A0 | S::A1) {
        assert!(
            h.outstanding_calls(id).await.is_empty(),
            "{transition} from {from}: calls left unanswered"
        );
        assert_eq!(
            chat.requires_action_deadline_at, None,
            "{transition} from {from}: deadline must be cleared"
        );
    } else {
        assert!(
            chat.requires_action_deadline_at.is_some(),
            "{transition} into {to}: deadline must be set"
        );
    }
    // EditMessage is exempt: the pending calls sit in the suffix it
    // truncates, so they leave active history with it.
    if matches!(from, S::A0 | S::A1)
        && !matches!(to, S::A0 | S::A1)
        && !matches!(
            transition,
            Transition::CompleteRequiresAction | Transition::EditMessage
        )
    {
        let synthetic = h
            .active_messages(id)
            .await
            .into_iter()
            .flat_map(|m| m.content.0)
            .any(|p| matches!(p, MessagePart::ToolResult { ref tool_call_id, is_error: true, .. } if tool_call_id == PENDING_CALL));
        assert!(
            synthetic,
            "{transition} from {from}: a synthetic cancellation result is required"
        );
    }
    // Ownership transitions keep the execution state.
    if transition.is_ownership() {
        assert_eq!(from, to);
        let owned = chat.worker_id.is_some();
        assert_eq!(
            owned,
            transition == Transition::Acquire,
            "{transition} ownership"
        );
    }
    if transition
        == (Transition::SendMessage {
            busy_behavior: BusyBehavior::Interrupt,
        })
        && matches!(from, S::R0 | S::R1 | S::I0 | S::I1)
    {
        let head = h.queue(id).await.into_iter().next().expect("queued");
        assert_eq!(
            head.content.0,
            vec![MessagePart::text("new")],
            "an interrupting send goes to the queue head"
        );
    }
}

/// The queue-side effects: steer sends are flagged only while running,
/// queue edits and moves advance `queue_version`, and a steering step
/// puts the steer message into history right after its own row.
async fn check_queue_effects(
    h: &Harness,
    id: Uuid,
    transition: Transition,
    form: Form,
    from: ExecutionState,
    before: &serde_json::Value,
    chat: &chatd_store::Chat,
) {
    use ExecutionState as S;
    let queue = h.queue(id).await;
    match transition {
        Transition::SendMessage {
            busy_behavior: BusyBehavior::Steer,
        } if matches!(from, S::R0 | S::R1 | S::I0 | S::I1 | S::A0 | S::A1) => {
            let sent = queue
                .iter()
                .find(|q| q.content.0 == vec![MessagePart::text("new")])
                .expect("a busy steer send is queued");
            assert_eq!(
                sent.steer,
                matches!(from, S::R0 | S::R1),
                "steer from {from}: flagged only while running"
            );
        }
        Transition::EditQueuedMessage => {
            assert_eq!(chat.queue_version, chat.snapshot_version);
            assert_eq!(queue[0].content.0, vec![MessagePart::text("edited queued")]);
            assert!(queue[0].steer);
        }
        Transition::MoveQueuedMessage => {
            assert_eq!(chat.queue_version, chat.snapshot_version);
            assert_eq!(
                queue.len(),
                before["queue"].as_array().map_or(0, Vec::len),
                "a move keeps every queued message"
            );
        }
        Transition::CompleteRequiresAction if form == Form::Denying => {
            let denied = h
                .active_messages(id)
                .await
                .into_iter()
                .flat_map(|m| m.content.0)
                .any(|p| matches!(p, MessagePart::ToolResult { ref tool_call_id, ref result, is_error: true, .. }
                    if tool_call_id == PENDING_CALL
                        && result == &serde_json::json!({"error": chatd_core::DENIED_TOOL_RESULT, "reason": "decided"})));
            assert!(denied, "denial from {from}: the call's error result");
        }
        Transition::CommitStep if form == Form::Steering && from == S::R1 => {
            assert!(queue.is_empty(), "the steer message left the queue");
            assert_eq!(chat.queue_version, chat.snapshot_version);
            let active = h.active_messages(id).await;
            let n = active.len();
            assert_eq!(active[n - 2].content.0, vec![MessagePart::text("step")]);
            assert_eq!(active[n - 1].role, chatd_core::ChatRole::User);
            assert!(active[n - 1].queued_message_id.is_some());
        }
        _ => {}
    }
}

/// A retry state belongs to one generation: the transitions that end it
/// clear it, so no valid chat outside `R*`/`I*` keeps one (an `Invalid` chat,
/// archived while running, keeps what it had until it is reconciled), and
/// the clear advances `retry_state_version` so that streams see it.
fn check_retry_state(
    transition: Transition,
    from: ExecutionState,
    to: ExecutionState,
    had_retry_state: bool,
    chat: &chatd_store::Chat,
) {
    use ExecutionState as S;
    let ends_generation = matches!(
        transition,
        Transition::FinishTurn
            | Transition::FinishInterruption
            | Transition::FinishError
            | Transition::EnterRequiresAction
            | Transition::ReconcileInvalidState
    );
    if ends_generation || !matches!(to, S::R0 | S::R1 | S::I0 | S::I1 | S::Invalid) {
        assert_eq!(
            chat.retry_state, None,
            "{transition} from {from} into {to} must clear retry_state"
        );
    }
    if had_retry_state && chat.retry_state.is_none() {
        assert_eq!(
            chat.retry_state_version, chat.snapshot_version,
            "{transition} from {from}: clearing retry_state advances retry_state_version"
        );
    }
}

macro_rules! matrix_tests {
    ($($name:ident => $transition:expr,)*) => {
        $(
            #[tokio::test]
            async fn $name() {
                check_transition($transition).await;
            }
        )*
    };
}

matrix_tests! {
    matrix_create_chat => Transition::CreateChat,
    matrix_set_archived_true => Transition::SetArchived { archived: true },
    matrix_set_archived_false => Transition::SetArchived { archived: false },
    matrix_send_message_queue => Transition::SendMessage { busy_behavior: BusyBehavior::Queue },
    matrix_send_message_interrupt => Transition::SendMessage { busy_behavior: BusyBehavior::Interrupt },
    matrix_send_message_steer => Transition::SendMessage { busy_behavior: BusyBehavior::Steer },
    matrix_send_message_reject => Transition::SendMessage { busy_behavior: BusyBehavior::Reject },
    matrix_edit_message => Transition::EditMessage,
    matrix_regenerate_message => Transition::RegenerateMessage,
    matrix_activate_branch => Transition::ActivateBranch,
    matrix_request_compaction => Transition::RequestCompaction,
    matrix_clear_context => Transition::ClearContext,
    matrix_append_messages => Transition::AppendMessages,
    matrix_delete_queued_message => Transition::DeleteQueuedMessage,
    matrix_promote_queued_message => Transition::PromoteQueuedMessage,
    matrix_edit_queued_message => Transition::EditQueuedMessage,
    matrix_move_queued_message => Transition::MoveQueuedMessage,
    matrix_interrupt => Transition::Interrupt,
    matrix_complete_requires_action => Transition::CompleteRequiresAction,
    matrix_acquire => Transition::Acquire,
    matrix_abandon => Transition::Abandon,
    matrix_record_generation_attempt => Transition::RecordGenerationAttempt,
    matrix_record_retry_state => Transition::RecordRetryState,
    matrix_commit_step => Transition::CommitStep,
    matrix_enter_requires_action => Transition::EnterRequiresAction,
    matrix_finish_interruption => Transition::FinishInterruption,
    matrix_finish_turn => Transition::FinishTurn,
    matrix_finish_error => Transition::FinishError,
    matrix_cancel_requires_action => Transition::CancelRequiresAction,
    matrix_reconcile_invalid_state => Transition::ReconcileInvalidState,
}

#[tokio::test]
async fn matrix_commit_step_steering() {
    check_form(Transition::CommitStep, Form::Steering).await;
}

#[tokio::test]
async fn matrix_complete_requires_action_approving() {
    check_form(Transition::CompleteRequiresAction, Form::Approving).await;
}

#[tokio::test]
async fn matrix_complete_requires_action_denying() {
    check_form(Transition::CompleteRequiresAction, Form::Denying).await;
}

#[tokio::test]
async fn matrix_commit_step_spawning_a_child() {
    check_form(Transition::CommitStep, Form::Spawning).await;
}

#[test]
fn matrix_tests_cover_every_transition() {
    // 30 generated tests above, one per entry of Transition::ALL (RegenerateMessage and ActivateBranch joined in issue 33, AppendMessages in issue 35).
    assert_eq!(Transition::ALL.len(), 30);
}
