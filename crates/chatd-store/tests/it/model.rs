//! Property test: random sequences of transitions applied both to a pure
//! model of the execution state and to the database agree, after every step,
//! on whether the transition was accepted and on the resulting execution
//! state.
//!
//! The model is deliberately independent of the store's code: it knows the
//! matrix (from `chatd-core`), the queue as its steer flags in order, a few
//! counters (pending tool calls, ownership), and derives each landing state
//! from the spec's prose and API.md "Busy behaviours and the queue".

use chatd_core::{BusyBehavior, ChatStatus, ExecutionState, Transition, classify, matrix};
use chatd_store::{
    CompleteRequiresActionInput, EditMessageInput, EditQueuedMessageInput, SendMessageInput,
    StoreConfig, StoreError, ToolResultInput,
};
use proptest::prelude::*;
use uuid::Uuid;

use crate::common::{
    Harness, assistant_text, chat_error, retry_state, tool_call_message, user_text,
};

const QUEUE_CAP: usize = 3;

#[derive(Debug, Clone, Copy)]
enum Op {
    Send(BusyBehavior),
    Edit,
    DeleteHead,
    PromoteLast,
    /// `EditQueuedMessage` of the head: mark it steer.
    SteerHead,
    /// `MoveQueuedMessage` of the last queued message to position 0.
    MoveLastToHead,
    Interrupt,
    Complete,
    Acquire,
    Abandon,
    Attempt,
    Retry,
    CommitText,
    CommitToolCall,
    /// `CommitStep` of a step that continues the turn (steer messages join).
    CommitSteering,
    EnterAction,
    FinishInterruption,
    FinishTurn,
    FinishError,
    Cancel,
    Archive(bool),
    RequestCompaction,
    Reconcile,
    /// An out-of-band write that makes a running chat invalid.
    Corrupt,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Send(BusyBehavior::Queue)),
        2 => Just(Op::Send(BusyBehavior::Interrupt)),
        2 => Just(Op::Send(BusyBehavior::Steer)),
        1 => Just(Op::Send(BusyBehavior::Reject)),
        1 => Just(Op::SteerHead),
        1 => Just(Op::MoveLastToHead),
        1 => Just(Op::CommitSteering),
        1 => Just(Op::Edit),
        1 => Just(Op::DeleteHead),
        1 => Just(Op::PromoteLast),
        2 => Just(Op::Interrupt),
        1 => Just(Op::Complete),
        1 => Just(Op::Acquire),
        1 => Just(Op::Abandon),
        1 => Just(Op::Attempt),
        1 => Just(Op::Retry),
        1 => Just(Op::CommitText),
        2 => Just(Op::CommitToolCall),
        2 => Just(Op::EnterAction),
        2 => Just(Op::FinishInterruption),
        3 => Just(Op::FinishTurn),
        1 => Just(Op::FinishError),
        1 => Just(Op::Cancel),
        1 => Just(Op::Archive(true)),
        1 => Just(Op::Archive(false)),
        1 => Just(Op::RequestCompaction),
        1 => Just(Op::Reconcile),
        1 => Just(Op::Corrupt),
    ]
}

/// The pure model of one chat.
#[derive(Debug, Clone)]
struct Model {
    status: ChatStatus,
    archived: bool,
    /// The queue, head first: each message's steer flag.
    queue: Vec<bool>,
    /// Tool calls without results in active history.
    pending: usize,
    owned: bool,
}

impl Model {
    fn state(&self) -> ExecutionState {
        classify(Some((self.status, self.archived, !self.queue.is_empty())))
    }

    fn transition(op: Op) -> Option<Transition> {
        Some(match op {
            Op::Send(busy_behavior) => Transition::SendMessage { busy_behavior },
            Op::Edit => Transition::EditMessage,
            Op::DeleteHead => Transition::DeleteQueuedMessage,
            Op::PromoteLast => Transition::PromoteQueuedMessage,
            Op::SteerHead => Transition::EditQueuedMessage,
            Op::MoveLastToHead => Transition::MoveQueuedMessage,
            Op::Interrupt => Transition::Interrupt,
            Op::Complete => Transition::CompleteRequiresAction,
            Op::Acquire => Transition::Acquire,
            Op::Abandon => Transition::Abandon,
            Op::Attempt => Transition::RecordGenerationAttempt,
            Op::Retry => Transition::RecordRetryState,
            Op::CommitText | Op::CommitToolCall | Op::CommitSteering => Transition::CommitStep,
            Op::EnterAction => Transition::EnterRequiresAction,
            Op::FinishInterruption => Transition::FinishInterruption,
            Op::FinishTurn => Transition::FinishTurn,
            Op::FinishError => Transition::FinishError,
            Op::Cancel => Transition::CancelRequiresAction,
            Op::Archive(archived) => Transition::SetArchived { archived },
            Op::RequestCompaction => Transition::RequestCompaction,
            Op::Reconcile => Transition::ReconcileInvalidState,
            Op::Corrupt => return None,
        })
    }

    /// Applies `op`; returns whether the model accepts it.
    fn apply(&mut self, op: Op) -> bool {
        use ChatStatus::*;
        use ExecutionState as S;
        let from = self.state();
        let Some(transition) = Self::transition(op) else {
            // Corrupt: only from running, as the database step does.
            if self.status == Running && !self.archived {
                self.archived = true;
            }
            return true;
        };
        if matrix::allowed_targets(transition, from).is_none() {
            return false;
        }
        match op {
            Op::Send(behavior) => match from {
                S::W | S::E0 => {
                    self.pending = 0;
                    self.status = Running;
                }
                S::E1 => {
                    if self.queue.len() >= QUEUE_CAP {
                        return false;
                    }
                    // Queued at the tail, then the head goes into history.
                    self.queue.push(false);
                    self.queue.remove(0);
                    self.pending = 0;
                    self.status = Running;
                }
                _ => {
                    if self.queue.len() >= QUEUE_CAP {
                        return false;
                    }
                    if behavior == BusyBehavior::Interrupt {
                        self.queue.insert(0, false);
                    } else {
                        let steer =
                            behavior == BusyBehavior::Steer && matches!(from, S::R0 | S::R1);
                        self.queue.push(steer);
                    }
                    if behavior == BusyBehavior::Interrupt {
                        match from {
                            S::R0 | S::R1 => self.status = Interrupting,
                            S::A0 | S::A1 => {
                                self.pending = 0;
                                self.status = Running;
                            }
                            _ => {}
                        }
                    }
                }
            },
            Op::Edit => {
                self.queue.clear();
                self.pending = 0;
                self.status = Running;
            }
            Op::DeleteHead => {
                self.queue.remove(0);
            }
            Op::PromoteLast => match from {
                S::E1 | S::A1 => {
                    self.queue.pop();
                    self.pending = 0;
                    self.status = Running;
                }
                _ => {
                    let last = self.queue.pop().expect("non-empty");
                    self.queue.insert(0, last);
                    self.status = Interrupting;
                }
            },
            Op::SteerHead => self.queue[0] = true,
            Op::MoveLastToHead => {
                let last = self.queue.pop().expect("non-empty");
                self.queue.insert(0, last);
            }
            // Steer messages join only a step that leaves no call open.
            Op::CommitSteering if self.pending == 0 => self.queue.retain(|steer| !steer),
            Op::CommitSteering => {}
            Op::Interrupt => match from {
                S::R0 | S::R1 => self.status = Interrupting,
                _ => {
                    self.pending = 0;
                    self.status = Running;
                }
            },
            Op::Complete => {
                self.pending = 0;
                self.status = Running;
            }
            Op::Acquire => self.owned = true,
            Op::Abandon => {
                if !self.owned {
                    return false;
                }
                self.owned = false;
            }
            Op::Attempt | Op::Retry | Op::CommitText => {}
            Op::CommitToolCall => self.pending += 1,
            Op::EnterAction => self.status = RequiresAction,
            Op::FinishInterruption => {
                self.pending = 0;
                if !self.queue.is_empty() {
                    self.queue.remove(0);
                    self.status = Running;
                } else {
                    self.status = Waiting;
                }
            }
            Op::FinishTurn => {
                if !self.queue.is_empty() {
                    // Steer messages go first, all together; else the head.
                    if self.queue.contains(&true) {
                        self.queue.retain(|steer| !steer);
                    } else {
                        self.queue.remove(0);
                    }
                    self.pending = 0;
                } else {
                    self.status = Waiting;
                }
            }
            Op::FinishError => self.status = Error,
            Op::Cancel => {
                self.pending = 0;
                self.status = Running;
            }
            Op::Archive(archived) => self.archived = archived,
            Op::RequestCompaction => {
                self.status = Running;
                self.owned = false;
            }
            Op::Reconcile => {
                self.pending = 0;
                self.archived = false;
                self.status = Error;
            }
            Op::Corrupt => unreachable!(),
        }
        true
    }
}

/// Applies `op` to the database chat; `Ok(true)` when accepted.
async fn apply_db(h: &Harness, id: Uuid, op: Op) -> Result<bool, StoreError> {
    if let Op::Corrupt = op {
        sqlx::query("UPDATE chats SET archived = true WHERE id = $1 AND status = 'running' AND NOT archived")
            .bind(id)
            .execute(h.pool())
            .await?;
        return Ok(true);
    }
    let first_user: i64 = sqlx::query_scalar("SELECT coalesce(min(id), 0) FROM chat_messages WHERE chat_id = $1 AND role = 'user' AND NOT deleted")
        .bind(id)
        .fetch_one(h.pool())
        .await?;
    let queue = h.queue(id).await;
    let pending = h.outstanding_calls(id).await;
    let mut tx = h.store.machine(id).begin().await?;
    let result = match op {
        Op::Send(busy_behavior) => tx
            .send_message(SendMessageInput {
                message: user_text("m"),
                busy_behavior,
                max_queue_size: None,
            })
            .await
            .map(|_| ()),
        Op::Edit => tx
            .edit_message(EditMessageInput {
                message_id: first_user,
                replacement: user_text("e"),
                suffix_messages: vec![],
            })
            .await
            .map(|_| ()),
        Op::DeleteHead => tx
            .delete_queued_message(queue.first().map_or(1, |q| q.id))
            .await
            .map(|_| ()),
        Op::PromoteLast => tx
            .promote_queued_message(queue.last().map_or(1, |q| q.id))
            .await
            .map(|_| ()),
        Op::SteerHead => tx
            .edit_queued_message(EditQueuedMessageInput {
                queued_message_id: queue.first().map_or(1, |q| q.id),
                steer: Some(true),
                ..EditQueuedMessageInput::default()
            })
            .await
            .map(|_| ()),
        Op::MoveLastToHead => tx
            .move_queued_message(queue.last().map_or(1, |q| q.id), 0)
            .await
            .map(|_| ()),
        Op::Interrupt => tx.interrupt().await.map(|_| ()),
        Op::Complete => tx
            .complete_requires_action(CompleteRequiresActionInput {
                results: pending
                    .iter()
                    .map(|c| ToolResultInput::output(c.tool_call_id.clone(), "1", false))
                    .collect(),
                ..Default::default()
            })
            .await
            .map(|_| ()),
        Op::Acquire => tx.acquire(Uuid::new_v4(), Uuid::new_v4()).await,
        Op::Abandon => tx.abandon().await,
        Op::Attempt => tx.record_generation_attempt().await.map(|_| ()),
        Op::Retry => tx.record_retry_state(retry_state(1)).await.map(|_| ()),
        Op::CommitText => tx
            .commit_step(vec![assistant_text("t")], false)
            .await
            .map(|_| ()),
        Op::CommitToolCall => tx
            .commit_step(vec![tool_call_message(&Uuid::new_v4().to_string())], false)
            .await
            .map(|_| ()),
        Op::CommitSteering => tx
            .commit_step_steering(vec![assistant_text("t")], false)
            .await
            .map(|_| ()),
        Op::EnterAction => tx.enter_requires_action().await.map(|_| ()),
        Op::FinishInterruption => tx.finish_interruption(vec![]).await.map(|_| ()),
        Op::FinishTurn => tx.finish_turn().await.map(|_| ()),
        Op::FinishError => tx.finish_error(chat_error("e")).await,
        Op::Cancel => tx.cancel_requires_action(None).await.map(|_| ()),
        Op::Archive(archived) => tx.set_archived(archived).await,
        Op::RequestCompaction => tx.request_compaction().await,
        Op::Reconcile => tx
            .reconcile_invalid_state(chat_error("invalid"))
            .await
            .map(|_| ()),
        Op::Corrupt => unreachable!(),
    };
    match result {
        Ok(()) => {
            tx.commit().await?;
            Ok(true)
        }
        Err(StoreError::State(_)) => Ok(false),
        Err(other) => Err(other),
    }
}

#[test]
fn random_transition_sequences_agree_with_the_pure_model() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = runtime.block_on(Harness::with_config(StoreConfig {
        max_queued_messages: QUEUE_CAP as i64,
        ..StoreConfig::default()
    }));
    let config = ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(ops in proptest::collection::vec(op(), 1..40))| {
        runtime.block_on(async {
            let id = h.create().await;
            let mut model = Model { status: ChatStatus::Running, archived: false, queue: vec![], pending: 0, owned: false };
            for (step, op) in ops.iter().enumerate() {
                let expected = model.clone().apply(*op);
                let accepted = apply_db(&h, id, *op).await.unwrap_or_else(|e| panic!("step {step} {op:?}: database error {e}"));
                assert_eq!(accepted, expected, "step {step} {op:?} from {} (model {model:?})", model.state());
                if accepted {
                    model.apply(*op);
                }
                let actual = h.state(id).await;
                assert_eq!(actual, model.state(), "step {step} {op:?}: database and model disagree (model {model:?})");
                let flags: Vec<bool> = h.queue(id).await.iter().map(|q| q.steer).collect();
                assert_eq!(flags.len(), model.queue.len(), "step {step} {op:?}: queue length");
                assert_eq!(flags, model.queue, "step {step} {op:?}: queue order and steer flags");
                assert_eq!(h.outstanding_calls(id).await.len(), model.pending, "step {step} {op:?}: pending tool calls");
                if !matches!(actual, ExecutionState::R0 | ExecutionState::R1 | ExecutionState::I0 | ExecutionState::I1 | ExecutionState::Invalid) {
                    assert_eq!(h.chat(id).await.retry_state, None, "step {step} {op:?}: retry_state outlived the generation");
                }
            }
        });
    });
}
