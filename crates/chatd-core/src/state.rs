//! Execution states and the classifier (`spec/chatd-architecture.md`,
//! "Execution states"; `spec/chatstate-package.md`, `ClassifyExecutionState`).
//!
//! A chat's execution state is derived, never stored: it is a function of
//! whether the chat row exists, its `status`, its `archived` marker and
//! whether its queue is empty. Every combination outside the 13 valid states
//! classifies as [`ExecutionState::Invalid`].

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The `chats.status` column. Serialized in `snake_case`, as on the wire and in
/// the database (`waiting`, `running`, `interrupting`, `requires_action`,
/// `error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ChatStatus {
    /// No work for the worker.
    Waiting,
    /// A worker should be generating.
    Running,
    /// The user asked to stop; the worker commits partial output.
    Interrupting,
    /// Waiting for client-side (dynamic) tool results.
    RequiresAction,
    /// The last turn failed and stopped.
    Error,
}

impl ChatStatus {
    /// Every status, in declaration order.
    pub const ALL: [ChatStatus; 5] = [
        ChatStatus::Waiting,
        ChatStatus::Running,
        ChatStatus::Interrupting,
        ChatStatus::RequiresAction,
        ChatStatus::Error,
    ];

    /// The database and wire spelling of this status.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatStatus::Waiting => "waiting",
            ChatStatus::Running => "running",
            ChatStatus::Interrupting => "interrupting",
            ChatStatus::RequiresAction => "requires_action",
            ChatStatus::Error => "error",
        }
    }
}

impl fmt::Display for ChatStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error returned when a string is not a known [`ChatStatus`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown chat status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for ChatStatus {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ChatStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

impl TryFrom<String> for ChatStatus {
    type Error = UnknownStatus;

    fn try_from(value: String) -> Result<Self, UnknownStatus> {
        value.parse()
    }
}

/// A chat's execution state (`spec/chatd-architecture.md`, "Execution states").
///
/// The first letters give the status (`W`aiting, `E`rror, `R`unning,
/// `I`nterrupting, `A`ction required, `X` archived) and the digit whether the
/// queue is empty (`0`) or not (`1`). [`ExecutionState::N`] is "the chat does
/// not exist"; [`ExecutionState::Invalid`] groups every other combination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ExecutionState {
    /// The chat does not exist.
    N,
    /// `waiting`, empty queue, not archived.
    W,
    /// `error`, empty queue, not archived.
    E0,
    /// `error`, non-empty queue, not archived.
    E1,
    /// `running`, empty queue, not archived.
    R0,
    /// `running`, non-empty queue, not archived.
    R1,
    /// `interrupting`, empty queue, not archived.
    I0,
    /// `interrupting`, non-empty queue, not archived.
    I1,
    /// `requires_action`, empty queue, not archived.
    A0,
    /// `requires_action`, non-empty queue, not archived.
    A1,
    /// archived `waiting`, empty queue.
    XW,
    /// archived `error`, empty queue.
    XE0,
    /// archived `error`, non-empty queue.
    XE1,
    /// Any status/archived/queue combination outside the model.
    Invalid,
}

impl ExecutionState {
    /// The 12 valid row states plus `N` and `Invalid` (the spec counts `N` among its 13), in declaration order.
    pub const ALL: [ExecutionState; 14] = [
        ExecutionState::N,
        ExecutionState::W,
        ExecutionState::E0,
        ExecutionState::E1,
        ExecutionState::R0,
        ExecutionState::R1,
        ExecutionState::I0,
        ExecutionState::I1,
        ExecutionState::A0,
        ExecutionState::A1,
        ExecutionState::XW,
        ExecutionState::XE0,
        ExecutionState::XE1,
        ExecutionState::Invalid,
    ];

    /// The states a worker may acquire and drive: `R0`, `R1`, `I0`, `I1`,
    /// `A0`, `A1` (spec "Acquisition loop").
    pub fn is_runnable(self) -> bool {
        matches!(
            self,
            ExecutionState::R0
                | ExecutionState::R1
                | ExecutionState::I0
                | ExecutionState::I1
                | ExecutionState::A0
                | ExecutionState::A1
        )
    }

    /// The states `DELETE /chats/{chat}` may remove a chat in: the idle ones,
    /// archived or not, whatever the queue holds (`W`, `E0`, `E1`, `XW`,
    /// `XE0`, `XE1`; spec "HTTP endpoints"). A busy chat must be interrupted
    /// first and an invalid one reconciled.
    pub fn is_deletable(self) -> bool {
        matches!(
            self,
            ExecutionState::W
                | ExecutionState::E0
                | ExecutionState::E1
                | ExecutionState::XW
                | ExecutionState::XE0
                | ExecutionState::XE1
        )
    }

    /// Whether the chat is archived in this state (`XW`, `XE0`, `XE1`).
    pub fn is_archived(self) -> bool {
        matches!(
            self,
            ExecutionState::XW | ExecutionState::XE0 | ExecutionState::XE1
        )
    }

    /// The row values (`status`, `archived`, queue non-empty) that classify as
    /// this state, or `None` for `N` and `Invalid`.
    pub fn components(self) -> Option<(ChatStatus, bool, bool)> {
        use ChatStatus::*;
        use ExecutionState as S;
        Some(match self {
            S::W => (Waiting, false, false),
            S::E0 => (Error, false, false),
            S::E1 => (Error, false, true),
            S::R0 => (Running, false, false),
            S::R1 => (Running, false, true),
            S::I0 => (Interrupting, false, false),
            S::I1 => (Interrupting, false, true),
            S::A0 => (RequiresAction, false, false),
            S::A1 => (RequiresAction, false, true),
            S::XW => (Waiting, true, false),
            S::XE0 => (Error, true, false),
            S::XE1 => (Error, true, true),
            S::N | S::Invalid => return None,
        })
    }

    /// The shorthand used by the spec (`"R0"`, `"XE1"`, `"Invalid"`).
    pub fn as_str(self) -> &'static str {
        use ExecutionState as S;
        match self {
            S::N => "N",
            S::W => "W",
            S::E0 => "E0",
            S::E1 => "E1",
            S::R0 => "R0",
            S::R1 => "R1",
            S::I0 => "I0",
            S::I1 => "I1",
            S::A0 => "A0",
            S::A1 => "A1",
            S::XW => "XW",
            S::XE0 => "XE0",
            S::XE1 => "XE1",
            S::Invalid => "Invalid",
        }
    }
}

impl fmt::Display for ExecutionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Classifies a chat into its [`ExecutionState`].
///
/// `row` is `None` when the chat does not exist (state `N`); otherwise it is
/// `(status, archived, queue_non_empty)` read under the chat row lock in one
/// transaction. A flat match over the valid tuples: anything else (an archived
/// busy chat, `waiting` with a non-empty queue, ...) is `Invalid`.
pub fn classify(row: Option<(ChatStatus, bool, bool)>) -> ExecutionState {
    use ChatStatus::*;
    use ExecutionState as S;
    let Some(row) = row else {
        return S::N;
    };
    match row {
        (Waiting, false, false) => S::W,
        (Error, false, false) => S::E0,
        (Error, false, true) => S::E1,
        (Running, false, false) => S::R0,
        (Running, false, true) => S::R1,
        (Interrupting, false, false) => S::I0,
        (Interrupting, false, true) => S::I1,
        (RequiresAction, false, false) => S::A0,
        (RequiresAction, false, true) => S::A1,
        (Waiting, true, false) => S::XW,
        (Error, true, false) => S::XE0,
        (Error, true, true) => S::XE1,
        _ => S::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_round_trips_every_valid_state() {
        for state in ExecutionState::ALL {
            match state.components() {
                Some(row) => assert_eq!(classify(Some(row)), state),
                None => assert!(matches!(state, ExecutionState::N | ExecutionState::Invalid)),
            }
        }
        assert_eq!(classify(None), ExecutionState::N);
    }

    #[test]
    fn classify_marks_every_other_combination_invalid() {
        let mut valid = 0;
        for status in ChatStatus::ALL {
            for archived in [false, true] {
                for queued in [false, true] {
                    let state = classify(Some((status, archived, queued)));
                    if state == ExecutionState::Invalid {
                        assert!(
                            (archived
                                && matches!(
                                    status,
                                    ChatStatus::Running
                                        | ChatStatus::Interrupting
                                        | ChatStatus::RequiresAction
                                ))
                                || (status == ChatStatus::Waiting && queued)
                        );
                    } else {
                        valid += 1;
                    }
                }
            }
        }
        assert_eq!(valid, 12);
    }

    #[test]
    fn runnable_states_are_exactly_the_busy_ones() {
        let runnable: Vec<_> = ExecutionState::ALL
            .into_iter()
            .filter(|s| s.is_runnable())
            .collect();
        use ExecutionState::*;
        assert_eq!(runnable, vec![R0, R1, I0, I1, A0, A1]);
    }

    #[test]
    fn deletable_states_are_the_idle_ones() {
        use ExecutionState::*;
        let deletable: Vec<_> = ExecutionState::ALL
            .into_iter()
            .filter(|s| s.is_deletable())
            .collect();
        assert_eq!(deletable, vec![W, E0, E1, XW, XE0, XE1]);
        assert!(deletable.iter().all(|s| !s.is_runnable()));
    }

    #[test]
    fn status_parses_its_own_spelling() {
        for status in ChatStatus::ALL {
            assert_eq!(status.as_str().parse::<ChatStatus>(), Ok(status));
        }
        assert!("paused".parse::<ChatStatus>().is_err());
    }
}
