//! The transition matrix as data (`spec/chatd-architecture.md`, "Execution
//! state transition diagram" and the per-endpoint tables of "HTTP endpoints").
//!
//! [`MATRIX`] lists every legal `(transition, from)` pair with the states it
//! may land in. A pair that is not listed is rejected. Where the spec gives a
//! transition two possible targets (for example `DeleteQueuedMessage` from
//! `R1` lands in `R0` or `R1` depending on whether the queue empties), both are
//! listed and the database decides which one happens.
//!
//! Decisions where the spec is silent, kept here so they are in one place:
//! - `Acquire` and `Abandon` change ownership only. They are allowed from
//!   every existing state, `Invalid` included, and keep the state unchanged,
//!   so that a worker can always release a chat that went invalid under it.
//! - `CreateChat` lands in `R0`, or `W` for a chat created idle (package doc
//!   `CreateChatInput.InitialStatus`).
//! - `RequestCompaction` (package doc) leaves `W`/`E0` for `R0` and `E1` for
//!   `R1`: busy chats answer `409` at the API.
//! - `ClearContext` (package doc: "lands in waiting") is allowed from `W` and
//!   `E0`; from `E1` it would strand a queue in `waiting`, an invalid state.
//! - `AppendMessages` (API.md "Compatible protocols": items added to a
//!   conversation) has the rows of `ClearContext`: idle chats only, and it
//!   clears a `last_error` like any history the user writes.
//! - `SendMessage(steer)` has the rows of `SendMessage(queue)` (API.md: in
//!   states other than running it behaves as `queue`); `SendMessage(reject)`
//!   only the idle and error rows, so a busy chat refuses it with `409`.
//! - `EditQueuedMessage` and `MoveQueuedMessage` (API.md "Busy behaviours
//!   and the queue") keep the state and are allowed wherever the queue is
//!   non-empty and the chat not archived (`E1`, `R1`, `I1`, `A1`).
//! - `CommitStep` from `R1` may land in `R0`: the step that continues a turn
//!   takes the waiting steer messages into history with it, which can empty
//!   the queue. A plain step keeps `R1` (listed first).

use crate::error::TransitionError;
use crate::state::ExecutionState;
use crate::transition::{BusyBehavior, Transition};

use BusyBehavior::{Interrupt as Int, Queue, Reject, Steer};
use ExecutionState::*;

const fn archive(archived: bool) -> Transition {
    Transition::SetArchived { archived }
}

const fn send(busy_behavior: BusyBehavior) -> Transition {
    Transition::SendMessage { busy_behavior }
}

/// One row of the matrix: from `from`, `transition` may land in any of `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// The transition.
    pub transition: Transition,
    /// The input execution state.
    pub from: ExecutionState,
    /// Every execution state the transition may land in from `from`.
    pub to: &'static [ExecutionState],
}

const fn row(transition: Transition, from: ExecutionState, to: &'static [ExecutionState]) -> Row {
    Row {
        transition,
        from,
        to,
    }
}

/// Every legal `(transition, from) → to` of the execution-state diagram, the
/// endpoint tables, and the ownership diagram (see the module doc for the
/// rows the spec leaves open).
pub const MATRIX: &[Row] = &[
    // Create (N only).
    row(Transition::CreateChat, N, &[R0, W]),
    // SetArchived.
    row(archive(true), W, &[XW]),
    row(archive(true), E0, &[XE0]),
    row(archive(true), E1, &[XE1]),
    row(archive(false), XW, &[W]),
    row(archive(false), XE0, &[E0]),
    row(archive(false), XE1, &[E1]),
    // SendMessage(queue).
    row(send(Queue), W, &[R0]),
    row(send(Queue), E0, &[R0]),
    row(send(Queue), E1, &[R1]),
    row(send(Queue), R0, &[R1]),
    row(send(Queue), R1, &[R1]),
    row(send(Queue), I0, &[I1]),
    row(send(Queue), I1, &[I1]),
    row(send(Queue), A0, &[A1]),
    row(send(Queue), A1, &[A1]),
    // SendMessage(interrupt).
    row(send(Int), W, &[R0]),
    row(send(Int), E0, &[R0]),
    row(send(Int), E1, &[R1]),
    row(send(Int), R0, &[I1]),
    row(send(Int), R1, &[I1]),
    row(send(Int), I0, &[I1]),
    row(send(Int), I1, &[I1]),
    row(send(Int), A0, &[R1]),
    row(send(Int), A1, &[R1]),
    // SendMessage(steer): as queue; steered only while running.
    row(send(Steer), W, &[R0]),
    row(send(Steer), E0, &[R0]),
    row(send(Steer), E1, &[R1]),
    row(send(Steer), R0, &[R1]),
    row(send(Steer), R1, &[R1]),
    row(send(Steer), I0, &[I1]),
    row(send(Steer), I1, &[I1]),
    row(send(Steer), A0, &[A1]),
    row(send(Steer), A1, &[A1]),
    // SendMessage(reject): idle and error only.
    row(send(Reject), W, &[R0]),
    row(send(Reject), E0, &[R0]),
    row(send(Reject), E1, &[R1]),
    // EditMessage.
    row(Transition::EditMessage, W, &[R0]),
    row(Transition::EditMessage, E0, &[R0]),
    row(Transition::EditMessage, E1, &[R0]),
    row(Transition::EditMessage, R0, &[R0]),
    row(Transition::EditMessage, R1, &[R0]),
    row(Transition::EditMessage, I0, &[R0]),
    row(Transition::EditMessage, I1, &[R0]),
    row(Transition::EditMessage, A0, &[R0]),
    row(Transition::EditMessage, A1, &[R0]),
    // RegenerateMessage and ActivateBranch (API.md "Branches, regenerate and
    // fork"): idle chats only, `E1` included in the refusals (its queue
    // would run on a history the caller did not choose).
    row(Transition::RegenerateMessage, W, &[R0]),
    row(Transition::RegenerateMessage, E0, &[R0]),
    row(Transition::ActivateBranch, W, &[W]),
    row(Transition::ActivateBranch, E0, &[W]),
    // RequestCompaction and ClearContext (package doc; see module doc).
    row(Transition::RequestCompaction, W, &[R0]),
    row(Transition::RequestCompaction, E0, &[R0]),
    row(Transition::RequestCompaction, E1, &[R1]),
    row(Transition::ClearContext, W, &[W]),
    row(Transition::ClearContext, E0, &[W]),
    row(Transition::AppendMessages, W, &[W]),
    row(Transition::AppendMessages, E0, &[W]),
    // DeleteQueuedMessage.
    row(Transition::DeleteQueuedMessage, E1, &[E0, E1]),
    row(Transition::DeleteQueuedMessage, R1, &[R0, R1]),
    row(Transition::DeleteQueuedMessage, I1, &[I0, I1]),
    row(Transition::DeleteQueuedMessage, A1, &[A0, A1]),
    // PromoteQueuedMessage.
    row(Transition::PromoteQueuedMessage, E1, &[R0, R1]),
    row(Transition::PromoteQueuedMessage, R1, &[I1]),
    row(Transition::PromoteQueuedMessage, I1, &[I1]),
    row(Transition::PromoteQueuedMessage, A1, &[R0, R1]),
    // EditQueuedMessage and MoveQueuedMessage (the queue stays non-empty).
    row(Transition::EditQueuedMessage, E1, &[E1]),
    row(Transition::EditQueuedMessage, R1, &[R1]),
    row(Transition::EditQueuedMessage, I1, &[I1]),
    row(Transition::EditQueuedMessage, A1, &[A1]),
    row(Transition::MoveQueuedMessage, E1, &[E1]),
    row(Transition::MoveQueuedMessage, R1, &[R1]),
    row(Transition::MoveQueuedMessage, I1, &[I1]),
    row(Transition::MoveQueuedMessage, A1, &[A1]),
    // Interrupt.
    row(Transition::Interrupt, R0, &[I0]),
    row(Transition::Interrupt, R1, &[I1]),
    row(Transition::Interrupt, A0, &[R0]),
    row(Transition::Interrupt, A1, &[R1]),
    // CompleteRequiresAction.
    row(Transition::CompleteRequiresAction, A0, &[R0]),
    row(Transition::CompleteRequiresAction, A1, &[R1]),
    // Worker transitions.
    row(Transition::RecordGenerationAttempt, R0, &[R0]),
    row(Transition::RecordGenerationAttempt, R1, &[R1]),
    row(Transition::RecordRetryState, R0, &[R0]),
    row(Transition::RecordRetryState, R1, &[R1]),
    row(Transition::CommitStep, R0, &[R0]),
    row(Transition::CommitStep, R1, &[R1, R0]),
    row(Transition::EnterRequiresAction, R0, &[A0]),
    row(Transition::EnterRequiresAction, R1, &[A1]),
    row(Transition::FinishTurn, R0, &[W]),
    row(Transition::FinishTurn, R1, &[R0, R1]),
    row(Transition::FinishError, R0, &[E0]),
    row(Transition::FinishError, R1, &[E1]),
    row(Transition::FinishInterruption, I0, &[W]),
    row(Transition::FinishInterruption, I1, &[R0, R1]),
    row(Transition::CancelRequiresAction, A0, &[R0]),
    row(Transition::CancelRequiresAction, A1, &[R1]),
    // Invalid states.
    row(Transition::ReconcileInvalidState, Invalid, &[E0, E1]),
    // Ownership (orthogonal: the execution state is kept).
    row(Transition::Acquire, W, &[W]),
    row(Transition::Acquire, E0, &[E0]),
    row(Transition::Acquire, E1, &[E1]),
    row(Transition::Acquire, R0, &[R0]),
    row(Transition::Acquire, R1, &[R1]),
    row(Transition::Acquire, I0, &[I0]),
    row(Transition::Acquire, I1, &[I1]),
    row(Transition::Acquire, A0, &[A0]),
    row(Transition::Acquire, A1, &[A1]),
    row(Transition::Acquire, XW, &[XW]),
    row(Transition::Acquire, XE0, &[XE0]),
    row(Transition::Acquire, XE1, &[XE1]),
    row(Transition::Acquire, Invalid, &[Invalid]),
    row(Transition::Abandon, W, &[W]),
    row(Transition::Abandon, E0, &[E0]),
    row(Transition::Abandon, E1, &[E1]),
    row(Transition::Abandon, R0, &[R0]),
    row(Transition::Abandon, R1, &[R1]),
    row(Transition::Abandon, I0, &[I0]),
    row(Transition::Abandon, I1, &[I1]),
    row(Transition::Abandon, A0, &[A0]),
    row(Transition::Abandon, A1, &[A1]),
    row(Transition::Abandon, XW, &[XW]),
    row(Transition::Abandon, XE0, &[XE0]),
    row(Transition::Abandon, XE1, &[XE1]),
    row(Transition::Abandon, Invalid, &[Invalid]),
];

/// The states `transition` may land in from `from`, or `None` when the pair is
/// not in the matrix (the transition must be rejected).
pub fn allowed_targets(
    transition: Transition,
    from: ExecutionState,
) -> Option<&'static [ExecutionState]> {
    MATRIX
        .iter()
        .find(|row| row.transition == transition && row.from == from)
        .map(|row| row.to)
}

/// Validates that `transition` may start from `from`.
///
/// # Errors
/// A [`TransitionError`] naming the transition and the input state when the
/// pair is not in [`MATRIX`]. Its [`TransitionError::is_invalid_state`] is true
/// when `from` is [`ExecutionState::Invalid`] and `is_not_found` when it is
/// [`ExecutionState::N`], so callers can map those to their own sentinels.
pub fn check(
    transition: Transition,
    from: ExecutionState,
) -> Result<&'static [ExecutionState], TransitionError> {
    allowed_targets(transition, from)
        .ok_or_else(|| TransitionError::new(transition, from, reason_for(transition, from)))
}

/// Validates that a transition that started in `from` may land in `to`.
///
/// # Errors
/// A [`TransitionError`] when `to` is not one of the listed targets. A store
/// that reaches this has a bug; it rolls back rather than commit an unlisted
/// edge.
pub fn check_landing(
    transition: Transition,
    from: ExecutionState,
    to: ExecutionState,
) -> Result<(), TransitionError> {
    let targets = check(transition, from)?;
    if targets.contains(&to) {
        Ok(())
    } else {
        Err(TransitionError::new(
            transition,
            from,
            format!("would land in {to}, which the matrix does not allow (allowed: {targets:?})"),
        ))
    }
}

fn reason_for(transition: Transition, from: ExecutionState) -> String {
    match from {
        N => "chat does not exist".to_owned(),
        Invalid => "chat is in an invalid execution state".to_owned(),
        s if s.is_archived()
            && !matches!(transition, Transition::SetArchived { archived: false }) =>
        {
            "chat is archived".to_owned()
        }
        _ => format!("{transition} is not allowed from {from}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_is_unique() {
        for (i, a) in MATRIX.iter().enumerate() {
            for b in &MATRIX[i + 1..] {
                assert!(
                    !(a.transition == b.transition && a.from == b.from),
                    "duplicate row {} from {}",
                    a.transition,
                    a.from
                );
            }
        }
    }

    #[test]
    fn only_reconcile_and_ownership_leave_invalid() {
        for t in Transition::ALL {
            let allowed = allowed_targets(t, Invalid).is_some();
            assert_eq!(
                allowed,
                t.is_ownership() || t == Transition::ReconcileInvalidState,
                "{t}"
            );
        }
    }

    #[test]
    fn only_create_starts_from_n() {
        for t in Transition::ALL {
            assert_eq!(
                allowed_targets(t, N).is_some(),
                t == Transition::CreateChat,
                "{t}"
            );
        }
    }

    #[test]
    fn archived_states_only_unarchive_or_change_ownership() {
        for from in [XW, XE0, XE1] {
            for t in Transition::ALL {
                let expected = t.is_ownership() || t == archive(false);
                assert_eq!(
                    allowed_targets(t, from).is_some(),
                    expected,
                    "{t} from {from}"
                );
            }
        }
    }

    #[test]
    fn no_transition_lands_in_n_and_only_ownership_lands_in_invalid() {
        for row in MATRIX {
            assert!(!row.to.contains(&N));
            if row.to.contains(&Invalid) {
                assert!(row.transition.is_ownership());
            }
        }
    }

    #[test]
    fn diagram_edges_are_all_present() {
        // A spot check of the spec's examples.
        assert_eq!(allowed_targets(send(Int), R0), Some(&[I1][..]));
        assert_eq!(allowed_targets(Transition::Interrupt, W), None);
        assert_eq!(allowed_targets(Transition::DeleteQueuedMessage, W), None);
        assert_eq!(
            allowed_targets(Transition::FinishTurn, R1),
            Some(&[R0, R1][..])
        );
    }

    #[test]
    fn steer_sends_like_queue_and_reject_refuses_every_busy_state() {
        for from in ExecutionState::ALL {
            assert_eq!(
                allowed_targets(send(Steer), from),
                allowed_targets(send(Queue), from),
                "{from}"
            );
            let busy = matches!(from, R0 | R1 | I0 | I1 | A0 | A1);
            let expected = if busy {
                None
            } else {
                allowed_targets(send(Queue), from)
            };
            assert_eq!(allowed_targets(send(Reject), from), expected, "{from}");
        }
    }

    #[test]
    fn queue_edits_need_a_non_empty_queue_and_keep_the_state() {
        for t in [Transition::EditQueuedMessage, Transition::MoveQueuedMessage] {
            for from in ExecutionState::ALL {
                let expected = matches!(from, E1 | R1 | I1 | A1).then_some(from);
                assert_eq!(
                    allowed_targets(t, from).map(|to| to[0]),
                    expected,
                    "{t} from {from}"
                );
            }
        }
    }

    #[test]
    fn check_landing_rejects_unlisted_targets() {
        assert!(check_landing(Transition::FinishTurn, R0, W).is_ok());
        assert!(check_landing(Transition::FinishTurn, R0, R0).is_err());
        let err = check(Transition::Interrupt, XW).unwrap_err();
        assert_eq!(err.reason, "chat is archived");
    }
}
