//! Tool approval in `CompleteRequiresAction` (API.md "Tool approval (human
//! in the loop)"): decisions are durable rows of history, answers must be
//! of the kind the call waits for, and concurrent decisions, deadlines and
//! interrupts leave every call with exactly one answer.

use std::sync::Arc;

use chatd_core::{
    ActionKind, ChatRole, DENIED_TOOL_RESULT, ExecutionState, MessagePart, StateError,
    TIMED_OUT_TOOL_RESULT, ToolResultErrorKind, Visibility, approved_tool_calls, pending_actions,
};
use chatd_store::{CompleteRequiresActionInput, NewMessage, StoreError, ToolResultInput};
use serde_json::json;
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::common::{DYNAMIC_TOOL, Harness};

/// The MCP tool the approval fixtures call (not a dynamic tool of the chat,
/// so its pending call waits for approval).
const APPROVAL_TOOL: &str = "fs__rm";

fn call(id: &str, tool: &str) -> MessagePart {
    MessagePart::ToolCall {
        tool_call_id: id.into(),
        tool_name: tool.into(),
        args: "{\"path\":\"/tmp/x\"}".into(),
    }
}

/// A chat in `A0` after a step calling `calls` (`(id, tool)`), as the
/// worker commits it: the step and `EnterRequiresAction` in one bundle.
async fn chat_waiting_on(h: &Harness, calls: &[(&str, &str)]) -> Uuid {
    let id = h.create().await;
    let parts: Vec<MessagePart> = calls.iter().map(|(c, t)| call(c, t)).collect();
    h.apply(id, move |tx| {
        Box::pin(async move {
            tx.commit_step(vec![NewMessage::assistant(parts)], false)
                .await?;
            tx.enter_requires_action().await.map(|_| ())
        })
    })
    .await;
    assert_eq!(h.state(id).await, ExecutionState::A0);
    id
}

async fn complete(
    h: &Harness,
    id: Uuid,
    results: Vec<ToolResultInput>,
) -> Result<Vec<chatd_store::ChatMessage>, StoreError> {
    h.store
        .machine(id)
        .update(move |tx| {
            Box::pin(async move {
                tx.complete_requires_action(CompleteRequiresActionInput {
                    results,
                    ..CompleteRequiresActionInput::default()
                })
                .await
            })
        })
        .await
        .map(|(inserted, _)| inserted)
}

/// How many answers (an approval or a result) call `call_id` has in active
/// history.
async fn answers(h: &Harness, id: Uuid, call_id: &str) -> usize {
    h.active_messages(id)
        .await
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter(|p| match p {
            MessagePart::ToolApproval { tool_call_id, .. }
            | MessagePart::ToolResult { tool_call_id, .. } => tool_call_id == call_id,
            _ => false,
        })
        .count()
}

#[tokio::test]
async fn an_approval_is_a_client_only_row_that_leaves_the_call_for_the_worker() {
    let h = Harness::new().await;
    let id = chat_waiting_on(&h, &[("c1", APPROVAL_TOOL), ("c2", DYNAMIC_TOOL)]).await;
    let inserted = complete(
        &h,
        id,
        vec![
            ToolResultInput::output("c2", "{\"color\":\"red\"}", false),
            ToolResultInput::decision("c1", true, Some("looks safe".into())),
        ],
    )
    .await
    .expect("approved");
    assert_eq!(h.state(id).await, ExecutionState::R0);
    // Stored in call order, whatever the submitted order.
    assert_eq!(inserted.len(), 2);
    assert_eq!(inserted[0].role, ChatRole::Tool);
    assert_eq!(inserted[0].visibility, Visibility::User);
    assert_eq!(
        inserted[0].content.0,
        vec![MessagePart::ToolApproval {
            tool_call_id: "c1".into(),
            tool_name: APPROVAL_TOOL.into(),
            approved: true,
            reason: Some("looks safe".into()),
        }]
    );
    assert_eq!(inserted[1].visibility, Visibility::Both);
    assert!(matches!(
        &inserted[1].content.0[..],
        [MessagePart::ToolResult { tool_call_id, result, is_error: false, .. }]
            if tool_call_id == "c2" && result == &json!({"color": "red"})
    ));
    // The approved call is still without a result: the worker runs it.
    let active = h.active_messages(id).await;
    let contents = || active.iter().map(|m| m.content.0.as_slice());
    let outstanding: Vec<String> = h
        .outstanding_calls(id)
        .await
        .into_iter()
        .map(|c| c.tool_call_id)
        .collect();
    assert_eq!(outstanding, vec!["c1"]);
    let approved: Vec<String> = approved_tool_calls(contents())
        .into_iter()
        .map(|c| c.tool_call_id)
        .collect();
    assert_eq!(approved, vec!["c1"]);
    assert!(pending_actions(contents(), |n| n == DYNAMIC_TOOL).is_empty());
    assert_eq!(h.chat(id).await.requires_action_deadline_at, None);
}

#[tokio::test]
async fn a_denial_is_the_calls_error_result_with_the_reason() {
    let h = Harness::new().await;
    let id = chat_waiting_on(&h, &[("c1", APPROVAL_TOOL), ("c2", APPROVAL_TOOL)]).await;
    let inserted = complete(
        &h,
        id,
        vec![
            ToolResultInput::decision("c1", false, Some("not that file".into())),
            ToolResultInput::decision("c2", false, None),
        ],
    )
    .await
    .expect("denied");
    let results: Vec<(String, serde_json::Value, bool)> = inserted
        .iter()
        .flat_map(|m| m.content.0.iter())
        .filter_map(|p| match p {
            MessagePart::ToolResult {
                tool_call_id,
                result,
                is_error,
                ..
            } => Some((tool_call_id.clone(), result.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![
            (
                "c1".to_owned(),
                json!({"error": DENIED_TOOL_RESULT, "reason": "not that file"}),
                true
            ),
            (
                "c2".to_owned(),
                json!({"error": DENIED_TOOL_RESULT, "reason": null}),
                true
            ),
        ]
    );
    assert!(h.outstanding_calls(id).await.is_empty());
    assert_eq!(h.state(id).await, ExecutionState::R0);
}

#[tokio::test]
async fn an_answer_of_the_wrong_kind_is_rejected_and_changes_nothing() {
    let h = Harness::new().await;
    let id = chat_waiting_on(&h, &[("c1", APPROVAL_TOOL), ("c2", DYNAMIC_TOOL)]).await;
    let before = h.dump(id).await;
    let cases = [
        (
            vec![
                ToolResultInput::decision("c1", true, None),
                ToolResultInput::decision("c2", true, None),
            ],
            ToolResultErrorKind::ApprovalForClientTool,
            "c2",
        ),
        (
            vec![
                ToolResultInput::output("c1", "\"done\"", false),
                ToolResultInput::output("c2", "\"red\"", false),
            ],
            ToolResultErrorKind::OutputForApproval,
            "c1",
        ),
        (
            vec![ToolResultInput::decision("c1", true, None)],
            ToolResultErrorKind::Missing,
            "c2",
        ),
    ];
    for (results, kind, call_id) in cases {
        let err = complete(&h, id, results).await.expect_err("rejected");
        match err {
            StoreError::State(StateError::ToolResult(e)) => {
                assert_eq!((e.kind, e.tool_call_id.as_str()), (kind, call_id));
            }
            other => panic!("expected {kind:?}, got {other:?}"),
        }
        assert_eq!(h.dump(id).await, before, "{kind:?} changed something");
    }
    let tail: Vec<Vec<MessagePart>> = h
        .active_messages(id)
        .await
        .into_iter()
        .map(|m| m.content.0)
        .collect();
    let kinds: Vec<ActionKind> =
        pending_actions(tail.iter().map(Vec::as_slice), |n| n == DYNAMIC_TOOL)
            .into_iter()
            .map(|p| p.kind)
            .collect();
    assert_eq!(kinds, vec![ActionKind::Approval, ActionKind::ClientTool]);
}

/// Which operation a racing task applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Approve,
    Deny,
    Deadline,
    Interrupt,
}

async fn run(h: &Harness, id: Uuid, op: Op) -> Result<(), StoreError> {
    let machine = h.store.machine(id);
    let result = match op {
        Op::Approve | Op::Deny => {
            let input = CompleteRequiresActionInput {
                results: vec![ToolResultInput::decision("c1", op == Op::Approve, None)],
                ..CompleteRequiresActionInput::default()
            };
            machine
                .update(move |tx| {
                    Box::pin(async move { tx.complete_requires_action(input).await.map(|_| ()) })
                })
                .await
        }
        Op::Deadline => {
            machine
                .update(|tx| {
                    Box::pin(async move { tx.cancel_requires_action(None).await.map(|_| ()) })
                })
                .await
        }
        Op::Interrupt => {
            machine
                .update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) }))
                .await
        }
    };
    result.map(|((), _)| ())
}

/// Races `ops` (released together) on a fresh `A0` chat waiting for the
/// approval of call `c1`; returns the operations that succeeded, after
/// checking that every other one was refused by the matrix.
async fn race(h: &Arc<Harness>, ops: &[Op]) -> (Uuid, Vec<Op>) {
    let id = chat_waiting_on(h, &[("c1", APPROVAL_TOOL)]).await;
    let barrier = Arc::new(Barrier::new(ops.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for &op in ops {
        let (h, barrier) = (h.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            (op, run(&h, id, op).await)
        });
    }
    let mut won = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (op, result) = joined.expect("task");
        match result {
            Ok(()) => won.push(op),
            Err(StoreError::State(StateError::TransitionNotAllowed(e))) => {
                assert!(!e.reason.contains("would land in"), "{op:?}: {e}");
            }
            Err(other) => panic!("{op:?} failed with {other:?}"),
        }
    }
    (id, won)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_decisions_for_one_call_commit_exactly_one() {
    let h = Arc::new(Harness::new().await);
    let ops = [
        Op::Approve,
        Op::Deny,
        Op::Approve,
        Op::Deny,
        Op::Approve,
        Op::Deny,
    ];
    for round in 0..10 {
        let (id, won) = race(&h, &ops).await;
        assert_eq!(won.len(), 1, "round {round}: {won:?}");
        assert_eq!(answers(&h, id, "c1").await, 1, "round {round}");
        assert_eq!(h.state(id).await, ExecutionState::R0, "round {round}");
        let outstanding = h.outstanding_calls(id).await;
        // An approval leaves the call for the worker; a denial answers it.
        assert_eq!(
            outstanding.len(),
            usize::from(won[0] == Op::Approve),
            "round {round}: {won:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_decision_racing_the_deadline_and_an_interrupt_leaves_exactly_one_answer() {
    let h = Arc::new(Harness::new().await);
    let ops = [Op::Approve, Op::Deadline, Op::Interrupt, Op::Deny];
    let mut winners = std::collections::HashSet::new();
    for round in 0..16 {
        let (id, won) = race(&h, &ops).await;
        let answered_by: Vec<Op> = won
            .iter()
            .copied()
            .filter(|op| *op != Op::Interrupt)
            .collect();
        winners.insert(format!("{:?}", answered_by.first()));
        // Exactly one of them answered the call: a decision, the deadline's
        // timeout or the interrupt's cancellation, never two.
        assert_eq!(answers(&h, id, "c1").await, 1, "round {round}: {won:?}");
        assert!(answered_by.len() <= 1, "round {round}: {won:?}");
        let chat = h.chat(id).await;
        assert_eq!(chat.requires_action_deadline_at, None, "round {round}");
        // The interrupt always succeeds: from `A0` it answers the call
        // itself and lands in `R0`; after a decision it interrupts the
        // running chat (an approved call is then answered by
        // FinishInterruption).
        assert!(won.contains(&Op::Interrupt), "round {round}: {won:?}");
        let expected = if answered_by.is_empty() {
            ExecutionState::R0
        } else {
            ExecutionState::I0
        };
        assert_eq!(h.state(id).await, expected, "round {round}: {won:?}");
        if answered_by.first() == Some(&Op::Deadline) {
            let timed_out = h
                .active_messages(id)
                .await
                .into_iter()
                .flat_map(|m| m.content.0)
                .any(|p| matches!(p, MessagePart::ToolResult { result, .. } if result == json!({"error": TIMED_OUT_TOOL_RESULT})));
            assert!(timed_out, "round {round}");
        }
    }
    // The schedule is not fixed: require only that the race was real.
    assert!(!winners.is_empty(), "{winners:?}");
}
