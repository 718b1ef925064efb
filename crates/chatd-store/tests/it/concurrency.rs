//! Races against one chat from many tasks on a multi-thread runtime
//! (`spec/chatd-architecture.md`, "Transitions": every bundle locks the chat
//! row and advances `snapshot_version` exactly once). Each test lets the
//! tasks actually overlap, then checks invariants of what was committed.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chatd_core::{
    BusyBehavior, ChatStatus, ExecutionState, MessagePart, StateError, outstanding_tool_calls,
};
use chatd_pubsub::{ChatUpdate, chat_update_channel};
use chatd_store::{
    Chat, ChatMachine, EditMessageInput, NewMessage, SendMessageInput, StoreConfig, StoreError,
    StoreResult,
};
use serde_json::json;
use sqlx::types::Json;
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use uuid::Uuid;

use crate::common::{
    Harness, assistant_text, chat_error, retry_state, tool_call_message, user_text,
};

/// Bound on any single wait in these tests; generous for a loaded CI box.
const DEADLINE: Duration = Duration::from_secs(60);

/// Joins every task of `tasks` within [`DEADLINE`], in completion order.
async fn join_all<T: 'static>(mut tasks: JoinSet<T>) -> Vec<T> {
    tokio::time::timeout(DEADLINE, async move {
        let mut out = Vec::new();
        while let Some(joined) = tasks.join_next().await {
            out.push(joined.expect("task panicked"));
        }
        out
    })
    .await
    .expect("tasks finished before the deadline")
}

/// `RecordGenerationAttempt` in an optimistic bundle
/// (`ChatMachine::update_optimistic`): the attempt number and the row.
async fn optimistic_attempt(machine: &ChatMachine) -> StoreResult<(i64, Chat)> {
    machine
        .update_optimistic(
            |_| true,
            |tx, _| Box::pin(async move { tx.record_generation_attempt().await }),
        )
        .await
        .map(|r| r.expect("no precheck"))
}

fn send(text: String, busy_behavior: BusyBehavior) -> SendMessageInput {
    SendMessageInput {
        message: user_text(&text),
        busy_behavior,
        max_queue_size: None,
    }
}

/// The snapshot versions of the `chat:update:{id}` publications recorded
/// since the last take, in publish order.
fn published_snapshots(h: &Harness, id: Uuid) -> Vec<i64> {
    let channel = chat_update_channel(id);
    h.published
        .take()
        .into_iter()
        .filter(|p| p.channel == channel)
        .map(|p| {
            ChatUpdate::from_payload(&p.payload)
                .expect("ChatUpdate")
                .snapshot_version
        })
        .collect()
}

// Serialization of bundles.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_updates_on_one_chat_get_distinct_consecutive_snapshot_versions() {
    const N: usize = 40;
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let initial = h.snapshot_version(id).await;
    h.published.take();

    // Three kinds of bundle, all on the same row: a worker transition, an
    // ownership change, and a bundle that applies no transition at all.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        RetryState,
        Acquire,
        Empty,
    }
    let barrier = Arc::new(Barrier::new(N));
    let mut tasks = JoinSet::new();
    for i in 0..N {
        let machine = h.store.machine(id);
        let barrier = barrier.clone();
        tasks.spawn(async move {
            let kind = [Kind::RetryState, Kind::Acquire, Kind::Empty][i % 3];
            let runner = Uuid::new_v4();
            barrier.wait().await;
            let result: StoreResult<Chat> = match kind {
                Kind::RetryState => machine
                    .update(move |tx| {
                        Box::pin(async move {
                            tx.record_retry_state(retry_state(i as i64))
                                .await
                                .map(|_| ())
                        })
                    })
                    .await
                    .map(|((), chat)| chat),
                Kind::Acquire => machine
                    .update(move |tx| {
                        Box::pin(async move { tx.acquire(Uuid::new_v4(), runner).await })
                    })
                    .await
                    .map(|((), chat)| chat),
                Kind::Empty => match machine.begin().await {
                    Ok(tx) => tx.commit().await,
                    Err(err) => Err(err),
                },
            };
            (kind, i, runner, result)
        });
    }
    let results = join_all(tasks).await;

    let mut versions = Vec::new();
    let mut last_retry: Option<(i64, usize)> = None;
    let mut last_acquire: Option<(i64, Uuid)> = None;
    for (kind, i, runner, result) in results {
        let chat = result.unwrap_or_else(|err| panic!("{kind:?} #{i} failed: {err}"));
        versions.push(chat.snapshot_version);
        match kind {
            Kind::RetryState => {
                assert_eq!(chat.retry_state, Some(retry_state(i as i64)));
                assert_eq!(chat.retry_state_version, chat.snapshot_version);
                last_retry = last_retry.max(Some((chat.snapshot_version, i)));
            }
            Kind::Acquire => {
                assert_eq!(chat.runner_id, Some(runner));
                last_acquire = last_acquire.max(Some((chat.snapshot_version, runner)));
            }
            Kind::Empty => {}
        }
    }
    versions.sort_unstable();
    let expected: Vec<i64> = (initial + 1..=initial + N as i64).collect();
    assert_eq!(versions, expected, "each bundle got its own version");

    let chat = h.chat(id).await;
    assert_eq!(chat.snapshot_version, initial + N as i64);
    // The last writer of each field is the bundle with the highest version.
    let (retry_version, retry_task) = last_retry.unwrap();
    assert_eq!(chat.retry_state_version, retry_version);
    assert_eq!(chat.retry_state, Some(retry_state(retry_task as i64)));
    assert_eq!(chat.runner_id, Some(last_acquire.unwrap().1));
    assert_eq!(chat.status, ChatStatus::Running);

    let mut published = published_snapshots(&h, id);
    published.sort_unstable();
    assert_eq!(published, expected, "one chat:update per committed bundle");
}

/// Optimistic bundles (`ChatMachine::update_optimistic`, issue 15) of two
/// replicas, each guessing from the rows it committed last, race each other
/// and ordinary bundles on one chat: the version check in the first write
/// (or in the lock that a stale guess falls back to) gives every committed
/// bundle its own version, loses no write and publishes each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_bundles_of_two_replicas_racing_on_one_chat_lose_nothing() {
    const N: usize = 48;
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    // A second replica on the same database, with caches of its own.
    let other = chatd_store::Store::new(h.pool().clone(), h.published.clone());
    for store in [&h.store, &other] {
        store
            .machine(id)
            .update(|tx| Box::pin(async move { tx.record_retry_state(retry_state(0)).await }))
            .await
            .expect("a first commit on each replica");
    }
    let initial = h.chat(id).await;
    h.published.take();

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Kind {
        RetryState,
        Attempt,
        Acquire,
    }
    let barrier = Arc::new(Barrier::new(N));
    let mut tasks = JoinSet::new();
    for i in 0..N {
        let machine = [&h.store, &other][i % 2].machine(id);
        let kind = [Kind::RetryState, Kind::Attempt, Kind::Acquire][(i / 2) % 3];
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            let runner = Uuid::new_v4();
            let result: StoreResult<(i64, Chat)> = match kind {
                Kind::RetryState => machine
                    .update_optimistic(
                        |_| true,
                        move |tx, _| {
                            Box::pin(async move {
                                tx.record_retry_state(retry_state(i as i64))
                                    .await
                                    .map(|_| 0)
                            })
                        },
                    )
                    .await
                    .map(|r| r.expect("no precheck")),
                Kind::Attempt => machine
                    .update_optimistic(
                        |_| true,
                        |tx, _| Box::pin(async move { tx.record_generation_attempt().await }),
                    )
                    .await
                    .map(|r| r.expect("no precheck")),
                // An ordinary bundle, which locks first.
                Kind::Acquire => {
                    machine
                        .update(move |tx| {
                            Box::pin(
                                async move { tx.acquire(Uuid::new_v4(), runner).await.map(|()| 0) },
                            )
                        })
                        .await
                }
            };
            (kind, i, runner, result)
        });
    }
    let results = join_all(tasks).await;

    let mut versions = Vec::new();
    let mut attempts = Vec::new();
    let mut last_retry_write: Option<(i64, Option<usize>)> = None;
    let mut last_acquire: Option<(i64, Uuid)> = None;
    for (kind, i, runner, result) in results {
        let (value, chat) = result.unwrap_or_else(|err| panic!("{kind:?} #{i} failed: {err}"));
        versions.push(chat.snapshot_version);
        match kind {
            Kind::RetryState => {
                assert_eq!(chat.retry_state, Some(retry_state(i as i64)));
                assert_eq!(chat.retry_state_version, chat.snapshot_version);
                last_retry_write = last_retry_write.max(Some((chat.snapshot_version, Some(i))));
            }
            Kind::Attempt => {
                assert_eq!(chat.generation_attempt, value);
                assert_eq!(chat.retry_state, None, "an attempt clears the retry state");
                attempts.push(value);
                last_retry_write = last_retry_write.max(Some((chat.snapshot_version, None)));
            }
            Kind::Acquire => {
                assert_eq!(chat.runner_id, Some(runner));
                last_acquire = last_acquire.max(Some((chat.snapshot_version, runner)));
            }
        }
    }
    versions.sort_unstable();
    let expected: Vec<i64> =
        (initial.snapshot_version + 1..=initial.snapshot_version + N as i64).collect();
    assert_eq!(versions, expected, "each bundle got its own version");
    // Every attempt counted once: no two bundles applied the same guess.
    attempts.sort_unstable();
    let attempts_expected: Vec<i64> = (initial.generation_attempt + 1
        ..=initial.generation_attempt + attempts.len() as i64)
        .collect();
    assert_eq!(attempts, attempts_expected);

    let chat = h.chat(id).await;
    assert_eq!(chat.snapshot_version, initial.snapshot_version + N as i64);
    assert_eq!(
        chat.generation_attempt,
        initial.generation_attempt + attempts.len() as i64
    );
    let (_, last_retry) = last_retry_write.expect("retry writes");
    assert_eq!(chat.retry_state, last_retry.map(|i| retry_state(i as i64)));
    assert_eq!(chat.runner_id, Some(last_acquire.expect("acquired").1));
    assert_eq!(chat.status, ChatStatus::Running);
    assert_chat_invariants(&h, id, "after the optimistic race").await;

    let mut published = published_snapshots(&h, id);
    published.sort_unstable();
    assert_eq!(published, expected, "one chat:update per committed bundle");
}

/// An optimistic bundle whose guessed row admits its transition but whose
/// current row does not (another replica finished the turn) is run again
/// locked and rejected as the current state calls for; one whose guess
/// rejects what the current row admits is run again and succeeds. Neither
/// commits anything from the stale guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_optimistic_bundle_decides_on_the_current_row_when_its_guess_is_stale() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let other = chatd_store::Store::new(h.pool().clone(), h.published.clone());
    let machine = h.store.machine(id);
    optimistic_attempt(&machine).await.expect("attempt");
    let running_guess = h.store.row_cache().get(id).expect("committed here");

    // Elsewhere: the turn ends.
    other
        .machine(id)
        .update(|tx| Box::pin(async move { tx.finish_turn().await }))
        .await
        .expect("finish elsewhere");
    let before = h.dump(id).await;
    let err = optimistic_attempt(&machine)
        .await
        .expect_err("waiting: no attempt");
    assert!(
        matches!(err.state(), Some(StateError::TransitionNotAllowed(e)) if e.from == ExecutionState::W),
        "{err:?}"
    );
    assert_eq!(h.dump(id).await, before, "nothing committed");

    // Elsewhere: a message starts a turn; this replica still guesses W.
    let waiting =
        chatd_store::internals::chats::select_facts(&mut h.pool().acquire().await.unwrap(), id)
            .await
            .unwrap()
            .expect("row");
    other
        .machine(id)
        .update(|tx| {
            Box::pin(async move {
                tx.send_message(send("again".into(), BusyBehavior::Queue))
                    .await
            })
        })
        .await
        .expect("send elsewhere");
    h.store.row_cache().remove(id);
    h.store.row_cache().put(waiting);
    let (attempt, chat) = optimistic_attempt(&machine)
        .await
        .expect("running now: the attempt is recorded");
    assert_eq!((attempt, chat.status), (1, ChatStatus::Running));
    assert_eq!(h.chat(id).await, chat);
    // The guess of a row from before both is stale as well.
    h.store.row_cache().remove(id);
    h.store.row_cache().put(running_guess);
    let (attempt, _) = optimistic_attempt(&machine).await.expect("attempt");
    assert_eq!(attempt, 2);
}

/// Execution columns written without a snapshot bump (an operator's SQL)
/// leave the guess's version current but its contents wrong. An optimistic
/// bundle then decides as an ordinary one would: a rejection decided on the
/// guess (here the landing check refusing what the guess allowed, or the
/// guess refusing what the row allows) runs again locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_optimistic_bundle_decides_as_the_locked_row_after_execution_columns_changed_by_hand() {
    let h = Harness::new().await;

    // A message queued by hand while the turn runs: the guess has no queue
    // (R0), the row has one (R1). Finishing the turn promotes it, as the
    // locked row calls for.
    let id = h.chat_in(ExecutionState::R0).await;
    let machine = h.store.machine(id);
    optimistic_attempt(&machine).await.expect("attempt");
    sqlx::query("INSERT INTO chat_queued_messages (chat_id, content) VALUES ($1, $2)")
        .bind(id)
        .bind(json!([{"type": "text", "text": "queued by hand"}]))
        .execute(h.pool())
        .await
        .expect("queue by hand");
    let version = h.chat(id).await.snapshot_version;
    assert_eq!(
        h.store.row_cache().get(id).map(|f| f.chat.snapshot_version),
        Some(version),
        "the guess passes the version check"
    );
    let (_, chat) = machine
        .update_optimistic(
            |_| true,
            |tx, _| Box::pin(async move { tx.finish_turn().await }),
        )
        .await
        .map(|r| r.expect("no precheck"))
        .expect("R1: the turn ends into the queued message");
    assert_eq!(chat.status, ChatStatus::Running);
    assert_eq!(chat.snapshot_version, version + 1);
    let queued: i64 =
        sqlx::query_scalar("SELECT count(*) FROM chat_queued_messages WHERE chat_id = $1")
            .bind(id)
            .fetch_one(h.pool())
            .await
            .unwrap();
    assert_eq!(queued, 0, "promoted");
    let last_user: serde_json::Value = sqlx::query_scalar(
        "SELECT content FROM chat_messages WHERE chat_id = $1 AND role = 'user' ORDER BY id DESC LIMIT 1",
    )
    .bind(id)
    .fetch_one(h.pool())
    .await
    .unwrap();
    assert_eq!(last_user[0]["text"], "queued by hand");
    assert_eq!(h.chat(id).await, chat);
    assert_eq!(h.store.row_cache().get(id).map(|f| f.chat), Some(chat));

    // The turn stopped by hand (status set to waiting, no bump): the guess
    // (running) admits an attempt, the row does not. Rejected as from W,
    // nothing committed.
    let id = h.chat_in(ExecutionState::R0).await;
    let machine = h.store.machine(id);
    optimistic_attempt(&machine).await.expect("attempt");
    sqlx::query(
        "UPDATE chats SET status = 'waiting', worker_id = NULL, runner_id = NULL WHERE id = $1",
    )
    .bind(id)
    .execute(h.pool())
    .await
    .expect("stop by hand");
    let before = h.dump(id).await;
    let err = optimistic_attempt(&machine)
        .await
        .expect_err("waiting: no attempt");
    assert!(
        matches!(err.state(), Some(StateError::TransitionNotAllowed(e)) if e.from == ExecutionState::W),
        "decided on the locked row: {err:?}"
    );
    assert_eq!(h.dump(id).await, before, "nothing committed");
    assert!(
        h.store.row_cache().get(id).is_none(),
        "the wrong guess is dropped"
    );

    // The reverse: the guess (waiting) refuses an attempt the row (set
    // running by hand) admits.
    let row =
        chatd_store::internals::chats::select_facts(&mut h.pool().acquire().await.unwrap(), id)
            .await
            .unwrap()
            .expect("row");
    assert_eq!(row.chat.status, ChatStatus::Waiting);
    h.store.row_cache().put(row);
    sqlx::query("UPDATE chats SET status = 'running' WHERE id = $1")
        .bind(id)
        .execute(h.pool())
        .await
        .expect("start by hand");
    let (attempt, chat) = optimistic_attempt(&machine)
        .await
        .expect("running: the attempt is recorded");
    assert_eq!(chat.status, ChatStatus::Running);
    assert_eq!(attempt, 2);
}

/// Metadata is written without a snapshot bump, so an optimistic bundle's
/// guess cannot tell it changed: whichever way the bundle checks its guess
/// (in a transition's `UPDATE`, or locking first for a step), the row it
/// commits and publishes has the new title.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_optimistic_bundle_commits_metadata_written_since_its_guess() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let machine = h.store.machine(id);
    optimistic_attempt(&machine).await.expect("attempt");
    let mut title = 0;
    for step in [false, true, false] {
        title += 1;
        let changes = chatd_store::internals::chats::MetadataChanges {
            title: Some(format!("renamed {title}")),
            ..Default::default()
        };
        let mut locked = h.store.machine(id).lock().await.expect("lock");
        chatd_store::internals::chats::update_metadata(locked.conn(), id, &changes)
            .await
            .expect("rename");
        locked.finish().await.expect("finish");
        assert!(h.store.row_cache().get(id).is_some(), "the guess is there");
        let (_, chat) = if step {
            machine
                .update_optimistic(
                    |_| true,
                    |tx, _| {
                        Box::pin(async move {
                            tx.commit_step(vec![assistant_text("step")], false)
                                .await
                                .map(|_| ())
                        })
                    },
                )
                .await
                .map(|r| r.expect("no precheck"))
        } else {
            machine
                .update_optimistic(
                    |_| true,
                    |tx, _| {
                        Box::pin(
                            async move { tx.record_retry_state(retry_state(1)).await.map(|_| ()) },
                        )
                    },
                )
                .await
                .map(|r| r.expect("no precheck"))
        }
        .expect("bundle");
        assert_eq!(chat.title, format!("renamed {title}"));
        assert_eq!(
            h.chat(id).await,
            chat,
            "the committed row is the returned one"
        );
        assert_eq!(h.store.row_cache().get(id).map(|f| f.chat), Some(chat));
    }
}

/// An optimistic bundle's guarded first statement that waits for the row
/// lock checks its guess on the row the holder leaves: after a metadata
/// write (no bump) it goes through with the new title, fused; after a
/// bundle that committed (a bump) it misses and runs again locked, which
/// here rejects the attempt of a chat that stopped running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_optimistic_bundle_waiting_for_the_lock_checks_its_guess_on_the_row_left_behind() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let machine = h.store.machine(id);
    optimistic_attempt(&machine).await.expect("attempt");
    let attempt = |machine: ChatMachine| async move { optimistic_attempt(&machine).await };

    // A metadata writer holds the row: the guess still holds after it.
    let mut locked = machine.lock().await.expect("lock");
    let holder = backend_pid(locked.conn()).await;
    let changes = chatd_store::internals::chats::MetadataChanges {
        title: Some("renamed while locked".into()),
        ..Default::default()
    };
    chatd_store::internals::chats::update_metadata(locked.conn(), id, &changes)
        .await
        .expect("rename");
    let waiting = tokio::spawn(attempt(machine.clone()));
    wait_until_blocked_by(&h, &[holder]).await;
    locked.finish().await.expect("finish");
    let (number, chat) = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("in time")
        .expect("task")
        .expect("the guess held");
    assert_eq!(number, 2);
    assert_eq!(chat.title, "renamed while locked");
    assert_eq!(h.chat(id).await, chat);

    // A bundle that finishes the turn holds the row: the guess is stale.
    let mut holder_tx = machine.begin().await.expect("begin");
    let holder = backend_pid(holder_tx.reader().await.expect("reader")).await;
    holder_tx.finish_turn().await.expect("finish turn");
    let waiting = tokio::spawn(attempt(machine.clone()));
    wait_until_blocked_by(&h, &[holder]).await;
    let finished = holder_tx.commit().await.expect("commit");
    let err = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("in time")
        .expect("task")
        .expect_err("waiting chats record no attempt");
    assert!(
        matches!(err.state(), Some(StateError::TransitionNotAllowed(e)) if e.from == ExecutionState::W),
        "{err:?}"
    );
    assert_eq!(
        h.chat(id).await,
        finished,
        "nothing committed after the finish"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_queue_sends_against_a_nearly_full_queue_admit_exactly_the_room_left() {
    const SENDERS: usize = 30;
    let h = Harness::with_config(StoreConfig {
        max_queued_messages: 5,
        ..StoreConfig::default()
    })
    .await;
    let id = h.chat_in(ExecutionState::R1).await;
    for n in 0..2 {
        h.apply(id, move |tx| {
            Box::pin(async move {
                tx.send_message(send(format!("pre-queued {n}"), BusyBehavior::Queue))
                    .await
                    .map(|_| ())
            })
        })
        .await;
    }
    assert_eq!(h.queue(id).await.len(), 3);
    let before = h.snapshot_version(id).await;

    let barrier = Arc::new(Barrier::new(SENDERS));
    let mut tasks = JoinSet::new();
    for i in 0..SENDERS {
        let machine = h.store.machine(id);
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            machine
                .update(move |tx| {
                    Box::pin(async move {
                        tx.send_message(send(format!("racer {i}"), BusyBehavior::Queue))
                            .await
                    })
                })
                .await
        });
    }
    let mut admitted = Vec::new();
    let mut full = 0;
    for result in join_all(tasks).await {
        match result {
            Ok((sent, _)) => admitted.push(sent.queued_message.expect("queued").id),
            Err(StoreError::State(StateError::MessageQueueFull { max: 5 })) => full += 1,
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    }
    assert_eq!(admitted.len(), 2);
    assert_eq!(full, SENDERS - 2);

    let queue = h.queue(id).await;
    assert_eq!(queue.len(), 5);
    let ids: HashSet<i64> = queue.iter().map(|q| q.id).collect();
    assert!(admitted.iter().all(|a| ids.contains(a)));
    let positions: HashSet<i64> = queue.iter().map(|q| q.position).collect();
    assert_eq!(positions.len(), 5);
    // Rejected sends rolled back their bump.
    let chat = h.chat(id).await;
    assert_eq!(chat.snapshot_version, before + 2);
    assert_eq!(chat.queue_version, before + 2);
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

// A mixed race of every user-facing and worker transition.

#[derive(Debug, Clone, Copy, PartialEq)]
enum RaceOp {
    Interrupt,
    SendQueue,
    SendInterrupt,
    Edit,
    FinishTurn,
    CommitStep,
    CommitToolStep,
    AwaitDynamicTool,
    DeleteQueued,
    Promote,
    FinishInterruption,
    FinishError,
    CancelRequiresAction,
    Regenerate,
    Activate,
}

const RACE_OPS: [RaceOp; 15] = [
    RaceOp::Interrupt,
    RaceOp::SendQueue,
    RaceOp::SendInterrupt,
    RaceOp::Edit,
    RaceOp::FinishTurn,
    RaceOp::CommitStep,
    RaceOp::CommitToolStep,
    RaceOp::AwaitDynamicTool,
    RaceOp::DeleteQueued,
    RaceOp::Promote,
    RaceOp::FinishInterruption,
    RaceOp::FinishError,
    RaceOp::CancelRequiresAction,
    RaceOp::Regenerate,
    RaceOp::Activate,
];

/// A server-side tool call answered in the same step, as a worker commits it.
fn answered_tool_step(call_id: &str) -> Vec<NewMessage> {
    vec![
        NewMessage::assistant(vec![MessagePart::ToolCall {
            tool_call_id: call_id.to_owned(),
            tool_name: "server_tool".to_owned(),
            args: "{}".to_owned(),
        }]),
        NewMessage::tool(vec![MessagePart::ToolResult {
            tool_call_id: call_id.to_owned(),
            tool_name: "server_tool".to_owned(),
            result: json!({"ok": true}),
            is_error: false,
        }]),
    ]
}

async fn run_race_op(
    machine: ChatMachine,
    op: RaceOp,
    tag: String,
    user_message: i64,
    queued_message: i64,
    answer: i64,
) -> StoreResult<()> {
    let result = match op {
        RaceOp::Regenerate => {
            machine
                .update(move |tx| {
                    Box::pin(async move { tx.regenerate_message(answer).await.map(|_| ()) })
                })
                .await
        }
        RaceOp::Activate => {
            machine
                .update(move |tx| {
                    Box::pin(async move { tx.activate_branch(user_message).await.map(|_| ()) })
                })
                .await
        }
        RaceOp::Interrupt => {
            machine
                .update(|tx| Box::pin(async move { tx.interrupt().await.map(|_| ()) }))
                .await
        }
        RaceOp::SendQueue | RaceOp::SendInterrupt => {
            let behavior = if op == RaceOp::SendQueue {
                BusyBehavior::Queue
            } else {
                BusyBehavior::Interrupt
            };
            machine
                .update(move |tx| {
                    Box::pin(async move { tx.send_message(send(tag, behavior)).await.map(|_| ()) })
                })
                .await
        }
        RaceOp::Edit => {
            machine
                .update(move |tx| {
                    Box::pin(async move {
                        tx.edit_message(EditMessageInput {
                            message_id: user_message,
                            replacement: user_text(&tag),
                            suffix_messages: vec![],
                        })
                        .await
                        .map(|_| ())
                    })
                })
                .await
        }
        RaceOp::FinishTurn => {
            machine
                .update(|tx| Box::pin(async move { tx.finish_turn().await.map(|_| ()) }))
                .await
        }
        RaceOp::CommitStep => {
            machine
                .update(move |tx| {
                    Box::pin(async move {
                        tx.commit_step(vec![assistant_text(&tag)], false)
                            .await
                            .map(|_| ())
                    })
                })
                .await
        }
        RaceOp::CommitToolStep => {
            machine
                .update(move |tx| {
                    Box::pin(async move {
                        tx.commit_step(answered_tool_step(&tag), false)
                            .await
                            .map(|_| ())
                    })
                })
                .await
        }
        RaceOp::AwaitDynamicTool => {
            // What a worker does when the model calls a client-side tool.
            machine
                .update(move |tx| {
                    Box::pin(async move {
                        tx.commit_step(vec![tool_call_message(&tag)], false).await?;
                        tx.enter_requires_action().await.map(|_| ())
                    })
                })
                .await
        }
        RaceOp::DeleteQueued => {
            machine
                .update(move |tx| {
                    Box::pin(
                        async move { tx.delete_queued_message(queued_message).await.map(|_| ()) },
                    )
                })
                .await
        }
        RaceOp::Promote => {
            machine
                .update(move |tx| {
                    Box::pin(
                        async move { tx.promote_queued_message(queued_message).await.map(|_| ()) },
                    )
                })
                .await
        }
        RaceOp::FinishInterruption => {
            machine
                .update(move |tx| {
                    Box::pin(async move {
                        tx.finish_interruption(vec![assistant_text(&tag)])
                            .await
                            .map(|_| ())
                    })
                })
                .await
        }
        RaceOp::FinishError => {
            machine
                .update(move |tx| Box::pin(async move { tx.finish_error(chat_error(&tag)).await }))
                .await
        }
        RaceOp::CancelRequiresAction => {
            machine
                .update(|tx| {
                    Box::pin(async move { tx.cancel_requires_action(None).await.map(|_| ()) })
                })
                .await
        }
    };
    result.map(|((), _)| ())
}

/// Every invariant a committed chat must satisfy, whatever raced before.
async fn assert_chat_invariants(h: &Harness, id: Uuid, context: &str) -> ExecutionState {
    let state = h.state(id).await;
    assert!(
        !matches!(state, ExecutionState::Invalid | ExecutionState::N),
        "{context}: classified {state}"
    );
    let chat = h.chat(id).await;

    let outstanding = h.outstanding_calls(id).await;
    if matches!(state, ExecutionState::A0 | ExecutionState::A1) {
        assert!(
            !outstanding.is_empty(),
            "{context}: {state} without a pending call"
        );
    } else {
        assert_eq!(
            outstanding,
            vec![],
            "{context}: unanswered calls in {state}"
        );
    }

    let queue = h.queue(id).await;
    let positions: HashSet<i64> = queue.iter().map(|q| q.position).collect();
    assert_eq!(
        positions.len(),
        queue.len(),
        "{context}: duplicate queue positions"
    );

    assert!(
        chat.history_version <= chat.snapshot_version,
        "{context}: {chat:?}"
    );
    assert!(
        chat.queue_version <= chat.snapshot_version,
        "{context}: {chat:?}"
    );
    assert!(
        chat.retry_state_version <= chat.snapshot_version,
        "{context}: {chat:?}"
    );
    let max_revision = h.messages(id).await.iter().map(|m| m.revision).max();
    assert_eq!(
        max_revision,
        Some(chat.history_version),
        "{context}: history_version is the latest message revision"
    );
    assert_eq!(
        chat.requires_action_deadline_at.is_some(),
        chat.status == ChatStatus::RequiresAction,
        "{context}: deadline {:?} in {state}",
        chat.requires_action_deadline_at
    );
    assert_eq!(
        chat.last_error.is_some(),
        chat.status == ChatStatus::Error,
        "{context}: last_error {:?} in {state}",
        chat.last_error
    );
    state
}

/// Reads consistent snapshots of the chat until `stop` is set (at least
/// once) and checks the invariants that must hold in every committed state.
/// Returns how many snapshots it checked, or the first violation.
async fn observe(machine: ChatMachine, stop: Arc<AtomicBool>) -> Result<usize, String> {
    let id = machine.chat_id();
    let mut observed = 0;
    loop {
        let finished = stop.load(Ordering::SeqCst);
        let mut snapshot = machine.snapshot().await.map_err(|e| e.to_string())?;
        let state = snapshot
            .execution_state()
            .await
            .map_err(|e| e.to_string())?;
        let contents: Vec<Json<Vec<MessagePart>>> = sqlx::query_scalar(
            "SELECT content FROM chat_messages WHERE chat_id = $1 AND NOT deleted ORDER BY id",
        )
        .bind(id)
        .fetch_all(snapshot.conn())
        .await
        .map_err(|e| e.to_string())?;
        let positions: Vec<i64> =
            sqlx::query_scalar("SELECT position FROM chat_queued_messages WHERE chat_id = $1")
                .bind(id)
                .fetch_all(snapshot.conn())
                .await
                .map_err(|e| e.to_string())?;
        let chat = snapshot.chat.clone();
        snapshot.finish().await.map_err(|e| e.to_string())?;

        let version = chat.snapshot_version;
        let outstanding = outstanding_tool_calls(contents.iter().map(|c| c.0.as_slice()));
        let awaiting = matches!(state, ExecutionState::A0 | ExecutionState::A1);
        let distinct: HashSet<i64> = positions.iter().copied().collect();
        if matches!(state, ExecutionState::Invalid | ExecutionState::N) {
            return Err(format!("snapshot {version} classified {state}"));
        }
        if awaiting == outstanding.is_empty() {
            return Err(format!(
                "snapshot {version} in {state} with outstanding calls {outstanding:?}"
            ));
        }
        if distinct.len() != positions.len() {
            return Err(format!(
                "snapshot {version}: duplicate positions {positions:?}"
            ));
        }
        if chat.history_version > version
            || chat.queue_version > version
            || chat.retry_state_version > version
        {
            return Err(format!(
                "snapshot {version}: a version ahead of it: {chat:?}"
            ));
        }
        observed += 1;
        if finished {
            return Ok(observed);
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_race_of_transitions_leaves_a_valid_consistent_chat() {
    const ROUNDS: usize = 8;
    const TASKS: usize = 26;
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R1).await;
    let mut succeeded_ops = HashSet::new();
    let mut observed = 0;
    // A fixed pseudo-random schedule (no rand dependency): reproducible.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };

    for round in 0..ROUNDS {
        let before = h.snapshot_version(id).await;
        h.published.take();
        let user_messages: Vec<i64> = h
            .active_messages(id)
            .await
            .iter()
            .filter(|m| m.role == chatd_core::ChatRole::User)
            .map(|m| m.id)
            .collect();
        let queued: Vec<i64> = h.queue(id).await.iter().map(|q| q.id).collect();
        // Every user message of the tree, on any branch: switching to any.
        let all_user_messages: Vec<i64> = h
            .messages(id)
            .await
            .iter()
            .filter(|m| m.role == chatd_core::ChatRole::User && m.parent_id.is_some())
            .map(|m| m.id)
            .collect();
        let answers: Vec<i64> = h
            .active_messages(id)
            .await
            .iter()
            .filter(|m| m.role == chatd_core::ChatRole::Assistant)
            .map(|m| m.id)
            .collect();

        // Watches committed states while the race runs.
        let stop = Arc::new(AtomicBool::new(false));
        let observer = tokio::spawn(observe(h.store.machine(id), stop.clone()));

        let barrier = Arc::new(Barrier::new(TASKS));
        let mut tasks = JoinSet::new();
        for i in 0..TASKS {
            let op = RACE_OPS[(next() % RACE_OPS.len() as u64) as usize];
            let pick = next() as usize;
            // Targets read before the race: they may be gone by the time the
            // operation runs, which must be a clean domain error.
            let user_messages = if op == RaceOp::Activate {
                &all_user_messages
            } else {
                &user_messages
            };
            let user_message = user_messages
                .get(pick % user_messages.len().max(1))
                .copied()
                .unwrap_or(i64::MAX);
            let answer = answers
                .get(pick % answers.len().max(1))
                .copied()
                .unwrap_or(i64::MAX);
            let queued_message = queued
                .get(pick % queued.len().max(1))
                .copied()
                .unwrap_or(i64::MAX);
            let machine = h.store.machine(id);
            let barrier = barrier.clone();
            let tag = format!("r{round}-t{i}");
            tasks.spawn(async move {
                barrier.wait().await;
                let result =
                    run_race_op(machine, op, tag, user_message, queued_message, answer).await;
                (op, result)
            });
        }

        let mut successes = 0;
        for (op, result) in join_all(tasks).await {
            match result {
                Ok(()) => {
                    successes += 1;
                    succeeded_ops.insert(format!("{op:?}"));
                }
                Err(StoreError::State(err)) => match &err {
                    StateError::TransitionNotAllowed(rejection) => assert!(
                        !rejection.reason.contains("would land in"),
                        "round {round}: {op:?} landed outside the matrix: {err}"
                    ),
                    StateError::MessageNotFound { .. }
                    | StateError::QueuedMessageNotFound { .. }
                    | StateError::MessageQueueFull { .. } => {}
                    other => panic!("round {round}: {op:?} failed with {other:?}"),
                },
                Err(other) => {
                    panic!("round {round}: {op:?} failed with a non-domain error: {other:?}")
                }
            }
        }
        stop.store(true, Ordering::SeqCst);
        observed += tokio::time::timeout(DEADLINE, observer)
            .await
            .expect("observer stopped")
            .expect("observer panicked")
            .unwrap_or_else(|violation| panic!("round {round}: {violation}"));

        let context = format!("after round {round}");
        assert_chat_invariants(&h, id, &context).await;
        crate::common::assert_tree(&h, id, &context).await;
        // Failed bundles rolled their bump back; each success advanced the
        // version once and published once.
        let after = h.snapshot_version(id).await;
        assert_eq!(after, before + successes as i64, "{context}");
        let mut published = published_snapshots(&h, id);
        published.sort_unstable();
        assert_eq!(
            published,
            (before + 1..=after).collect::<Vec<_>>(),
            "{context}"
        );
    }
    assert!(observed >= ROUNDS, "the observer saw {observed} snapshots");
    // The schedule is fixed but the interleaving is not: require only that
    // the race was more than one kind of operation winning.
    assert!(
        succeeded_ops.len() >= 3,
        "too few kinds of operation succeeded: {succeeded_ops:?}"
    );
}

// Row locks.

/// Polls until some backend of this database is waiting on a lock held by
/// one of `holders` (`pg_blocking_pids`), or panics at the deadline. Returns
/// the pids currently blocking it.
async fn wait_until_blocked_by(h: &Harness, holders: &[i32]) -> Vec<i32> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let blocking: Option<Vec<i32>> = sqlx::query_scalar(
            "SELECT pg_blocking_pids(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pg_blocking_pids(pid) && $1::int[]
             LIMIT 1",
        )
        .bind(holders)
        .fetch_optional(h.pool())
        .await
        .expect("pg_stat_activity");
        if let Some(blocking) = blocking {
            return blocking;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no backend blocked by {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn backend_pid(conn: &mut sqlx::PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .expect("pid")
}

/// Spawns a `RecordGenerationAttempt` bundle that reports whether `released`
/// was already set when it committed.
fn spawn_update(
    machine: ChatMachine,
    released: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(bool, StoreResult<(i64, Chat)>)> {
    tokio::spawn(async move {
        let result = machine
            .update(|tx| Box::pin(async move { tx.record_generation_attempt().await }))
            .await;
        (released.load(Ordering::SeqCst), result)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn update_waits_until_the_lock_holder_releases_the_chat() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let snapshot = h.snapshot_version(id).await;
    let machine = h.store.machine(id);

    let mut locked = machine.lock().await.unwrap();
    assert_eq!(locked.chat.snapshot_version, snapshot);
    let holder = backend_pid(locked.conn()).await;
    let released = Arc::new(AtomicBool::new(false));
    let update = spawn_update(machine.clone(), released.clone());

    assert_eq!(wait_until_blocked_by(&h, &[holder]).await, vec![holder]);
    assert!(!update.is_finished());
    // Plain reads are not blocked by the row lock.
    let snap = tokio::time::timeout(DEADLINE, machine.snapshot())
        .await
        .expect("snapshot is not blocked")
        .unwrap();
    assert_eq!(snap.chat.snapshot_version, snapshot);
    drop(snap);

    released.store(true, Ordering::SeqCst);
    locked.finish().await.unwrap();
    let (after_release, result) = tokio::time::timeout(DEADLINE, update)
        .await
        .expect("update finished after release")
        .unwrap();
    assert!(
        after_release,
        "update committed before the lock was released"
    );
    let (attempt, chat) = result.unwrap();
    assert_eq!(attempt, 1);
    assert_eq!(chat.snapshot_version, snapshot + 1);
    assert_eq!(h.snapshot_version(id).await, snapshot + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_lock_admits_concurrent_readers_and_holds_off_writers() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let snapshot = h.snapshot_version(id).await;
    let machine = h.store.machine(id);

    let mut first = machine.read_lock().await.unwrap();
    let mut second = tokio::time::timeout(DEADLINE, machine.read_lock())
        .await
        .expect("a second reader is not blocked by the first")
        .unwrap();
    assert_eq!(first.chat, second.chat);
    let first_pid = backend_pid(first.conn()).await;
    let second_pid = backend_pid(second.conn()).await;

    let released = Arc::new(AtomicBool::new(false));
    let update = spawn_update(machine.clone(), released.clone());
    let blocking = wait_until_blocked_by(&h, &[first_pid, second_pid]).await;
    assert!(
        blocking
            .iter()
            .all(|pid| *pid == first_pid || *pid == second_pid),
        "{blocking:?}"
    );

    // Releasing one reader is not enough for the writer.
    first.finish().await.unwrap();
    assert_eq!(
        wait_until_blocked_by(&h, &[second_pid]).await,
        vec![second_pid]
    );
    assert!(!update.is_finished());
    assert_eq!(h.snapshot_version(id).await, snapshot);

    released.store(true, Ordering::SeqCst);
    second.finish().await.unwrap();
    let (after_release, result) = tokio::time::timeout(DEADLINE, update)
        .await
        .expect("update finished after release")
        .unwrap();
    assert!(after_release);
    assert_eq!(result.unwrap().1.snapshot_version, snapshot + 1);
}

// Pool hygiene: a cancelled BEGIN (issue 14: a replica stopped past its
// lease cancels its tasks mid-statement).

/// `queries::begin` cancelled at every point of its flight (after 0 to 63
/// scheduler yields, or a timeout of 0 to 2 ms, on a pool of one
/// connection) never hands the pool a connection that is still inside a
/// transaction: the next autocommit statement runs in a transaction of its
/// own, and a read-only snapshot can still be the first statement of the
/// next transaction. With `Pool::begin` this fails within a few rounds
/// ("SET TRANSACTION ISOLATION LEVEL must be called before any query").
///
/// Cancellation points are counted in yields, not time, so a fast machine
/// (whose BEGIN round trip beats any timer) still cancels mid-flight; the
/// loop runs until both outcomes were seen often enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_begin_cancelled_mid_flight_never_leaves_a_pooled_connection_inside_a_transaction() {
    let db = chatd_testkit::TestDatabase::new(&chatd_store::MIGRATOR)
        .await
        .expect("database");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(db.url())
        .await
        .expect("pool");
    async fn yields(n: u64) {
        for _ in 0..n {
            tokio::task::yield_now().await;
        }
    }
    let (mut cancelled, mut completed) = (0u32, 0u32);
    let mut round = 0u64;
    while (cancelled < 100 || completed < 20) && round < 5_000 {
        let begin = chatd_store::internals::begin(&pool);
        let outcome = if round.is_multiple_of(2) {
            tokio::select! {
                biased;
                tx = begin => Some(tx),
                () = yields((round / 2) % 64) => None,
            }
        } else {
            let limit = Duration::from_micros((round / 2) % 2_000);
            tokio::time::timeout(limit, begin).await.ok()
        };
        match outcome {
            None => cancelled += 1,
            Some(tx) => {
                completed += 1;
                drop(tx.expect("begin"));
            }
        }
        // SAVEPOINT outside a transaction block is refused (25P01, no_active_sql_transaction).
        let savepoint = sqlx::query("SAVEPOINT hygiene").execute(&pool).await;
        let code = savepoint
            .as_ref()
            .err()
            .and_then(|e| e.as_database_error())
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(
            code.as_deref(),
            Some("25P01"),
            "round {round}: an autocommit statement ran inside a leftover transaction: {savepoint:?}"
        );
        let mut tx = chatd_store::internals::begin(&pool).await.expect("begin");
        chatd_store::internals::set_read_only_snapshot(&mut tx)
            .await
            .unwrap_or_else(|e| panic!("round {round}: snapshot not first statement: {e}"));
        tx.commit().await.expect("commit");
        round += 1;
    }
    assert!(
        cancelled >= 100 && completed >= 20,
        "after {round} rounds only {cancelled} begins were cancelled and {completed} completed"
    );
}

// Family archive against child creation (issue 14: a child created while
// its family was being archived stayed unarchived).

async fn create_member(h: &Harness, parent: Option<Uuid>) -> StoreResult<Uuid> {
    h.store
        .create_chat(chatd_store::CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: parent,
            initial_messages: vec![user_text("hi")],
            initial_status: Some(ChatStatus::Waiting),
            ..Default::default()
        })
        .await
        .map(|created| created.chat.id)
}

/// Archiving a family while children are created under its root and under
/// one of its children, released together 50 times: every create either
/// commits a member the archive then archives, or is refused with
/// `InvalidInput { field: "parent_chat_id" }` because it saw the archive;
/// never an unarchived member of an archived family, never a deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_family_archive_racing_child_creation_never_leaves_an_unarchived_member() {
    let h = Arc::new(Harness::new().await);
    let (mut created, mut refused) = (0, 0);
    for round in 0..50 {
        let root = create_member(&h, None).await.expect("root");
        let child = create_member(&h, Some(root)).await.expect("child");
        let barrier = Arc::new(Barrier::new(3));
        let mut tasks = JoinSet::new();
        for parent in [None, Some(root), Some(child)] {
            let (h, barrier) = (h.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                match parent {
                    None => h.store.set_family_archived(root, true).await.map(|_| None),
                    Some(parent) => create_member(&h, Some(parent)).await.map(Some),
                }
            });
        }
        for result in join_all(tasks).await {
            match result {
                Ok(None) => {}
                Ok(Some(_)) => created += 1,
                Err(err) => match err.state() {
                    Some(StateError::InvalidInput {
                        field: "parent_chat_id",
                        ..
                    }) => refused += 1,
                    _ => panic!("round {round}: {err:?}"),
                },
            }
        }
        let unarchived: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM chats WHERE (id = $1 OR root_chat_id = $1) AND NOT archived",
        )
        .bind(root)
        .fetch_all(h.pool())
        .await
        .unwrap();
        assert!(
            unarchived.is_empty(),
            "round {round}: members {unarchived:?} of archived family {root} are not archived"
        );
    }
    assert_eq!(created + refused, 100);
}

/// The heartbeat statements lock many `chat_heartbeats` rows each: one
/// replica's upsert of all its runners, another's cleanup of stale rows.
/// Racing them 30 times over 200 runners of 200 chats (upserted in reverse
/// order, the cleanup deleting every row it finds old) never deadlocks and
/// never fails: the upsert takes its rows in key order and the cleanup
/// skips rows another statement holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heartbeat_upserts_racing_stale_cleanup_never_deadlock() {
    let h = Arc::new(Harness::new().await);
    let mut runners = Vec::new();
    for _ in 0..200 {
        runners.push((h.create().await, Uuid::new_v4()));
    }
    chatd_store::internals::heartbeats::upsert_many(h.pool(), &runners)
        .await
        .unwrap();
    let mut reversed = runners.clone();
    reversed.reverse();
    let runners = Arc::new((runners, reversed));
    for round in 0..30 {
        let barrier = Arc::new(Barrier::new(4));
        let mut tasks = JoinSet::new();
        for job in 0..4 {
            let (h, barrier, runners) = (h.clone(), barrier.clone(), runners.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                match job {
                    0 => chatd_store::internals::heartbeats::upsert_many(h.pool(), &runners.0)
                        .await
                        .map(|_| ()),
                    1 => chatd_store::internals::heartbeats::upsert_many(h.pool(), &runners.1)
                        .await
                        .map(|_| ()),
                    // Everything is older than no time at all.
                    _ => chatd_store::internals::heartbeats::delete_stale(h.pool(), -1.0)
                        .await
                        .map(|_| ()),
                }
            });
        }
        for result in join_all(tasks).await {
            if let Err(err) = result {
                panic!("round {round}: {err}");
            }
        }
    }
}

/// `ClearContext` raced against a send and a compaction request on a
/// waiting chat, 30 rounds: the row lock orders them. A clear that wins
/// leaves its boundary before the sent message (the model sees the message
/// and nothing before the boundary); a clear that loses is refused because
/// the chat is busy, and changes nothing. `Chat.context` always matches
/// the history it was computed from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clear_context_racing_a_send_and_a_compaction_request_is_ordered_by_the_row_lock() {
    let h = Arc::new(Harness::new().await);
    let (mut cleared, mut refused) = (0, 0);
    for round in 0..30 {
        let id = h.chat_in(ExecutionState::W).await;
        let barrier = Arc::new(Barrier::new(3));
        let mut tasks = JoinSet::new();
        for job in 0..3 {
            let (h, barrier) = (h.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                let machine = h.store.machine(id);
                let result = match job {
                    0 => {
                        machine
                            .update(|tx| {
                                Box::pin(async move {
                                    let mut boundary = NewMessage::new(
                                        chatd_core::ChatRole::System,
                                        vec![chatd_core::MessagePart::ContextCleared],
                                    );
                                    boundary.visibility = chatd_core::Visibility::User;
                                    boundary.compressed = true;
                                    tx.clear_context(vec![boundary]).await.map(|_| ())
                                })
                            })
                            .await
                    }
                    1 => {
                        machine
                            .update(|tx| {
                                Box::pin(async move {
                                    tx.send_message(send("after".into(), BusyBehavior::Queue))
                                        .await
                                        .map(|_| ())
                                })
                            })
                            .await
                    }
                    _ => {
                        machine
                            .update(|tx| Box::pin(async move { tx.request_compaction().await }))
                            .await
                    }
                };
                (job, result.map(|_| ()))
            });
        }
        let mut clear_ok = None;
        let mut compaction_requested = false;
        for (job, result) in join_all(tasks).await {
            match (job, result) {
                (2, Ok(())) => compaction_requested = true,
                (0, Ok(())) => clear_ok = Some(true),
                (0, Err(err)) => {
                    assert!(
                        matches!(err.state(), Some(StateError::TransitionNotAllowed(_))),
                        "round {round}: {err:?}"
                    );
                    clear_ok = Some(false);
                }
                (_, Ok(())) => {}
                (2, Err(err)) => assert!(
                    matches!(err.state(), Some(StateError::TransitionNotAllowed(_))),
                    "round {round}: {err:?}"
                ),
                (_, Err(err)) => panic!("round {round}: job {job}: {err:?}"),
            }
        }
        let messages = h.active_messages(id).await;
        let boundary = messages.iter().find(|m| m.compressed).map(|m| m.id);
        let sent = messages
            .iter()
            .find(|m| m.content.0 == vec![chatd_core::MessagePart::text("after")])
            .map(|m| m.id);
        match clear_ok {
            Some(true) => {
                cleared += 1;
                let boundary = boundary.expect("the boundary row");
                if let Some(sent) = sent {
                    assert!(
                        sent > boundary,
                        "round {round}: the send came after the clear"
                    );
                }
                let model = chatd_store::internals::messages::active_history(h.pool(), id)
                    .await
                    .unwrap();
                assert!(model.iter().all(|m| m.id > boundary), "round {round}");
            }
            _ => {
                refused += 1;
                assert!(
                    boundary.is_none(),
                    "round {round}: a refused clear left a row"
                );
            }
        }
        // Chat.context is what the history says.
        let chat = h.chat(id).await;
        let mut tx = h.pool().begin().await.unwrap();
        chatd_store::internals::messages::refresh_context(&mut tx, id)
            .await
            .unwrap();
        let fresh: (Option<i64>, bool) =
            sqlx::query_as("SELECT context_tokens, context_estimated FROM chats WHERE id = $1")
                .bind(id)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(
            (chat.context_tokens, chat.context_estimated),
            fresh,
            "round {round}"
        );
        // RequestCompaction starts a history epoch without a message, which
        // the helper's history_version rule does not allow for.
        if !compaction_requested {
            assert_chat_invariants(&h, id, &format!("round {round}")).await;
        }
    }
    assert_eq!(cleared + refused, 30);
}

/// Transitions of a running child chat (each updates the child's row more
/// than once, which re-checks its foreign keys to the parent and root:
/// `FOR KEY SHARE` on them) racing archive attempts of its family (which
/// lock every member `FOR UPDATE`): 100 rounds of both at once, no
/// deadlock. The archive is refused (a member is busy) or applies; the
/// child's transitions all commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn child_transitions_racing_family_archives_never_deadlock() {
    let h = Arc::new(Harness::new().await);
    let root = create_member(&h, None).await.expect("root");
    let child = h
        .store
        .create_chat(chatd_store::CreateChatInput {
            owner_id: h.owner,
            parent_chat_id: Some(root),
            initial_messages: vec![user_text("work")],
            ..Default::default()
        })
        .await
        .expect("child")
        .chat
        .id;
    let mut deadlocks = Vec::new();
    for round in 0..100 {
        let barrier = Arc::new(Barrier::new(3));
        let mut tasks = JoinSet::new();
        for job in 0..3 {
            let (h, barrier) = (h.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                match job {
                    0 => h
                        .store
                        .set_family_archived(root, round % 2 == 0)
                        .await
                        .map(|_| ()),
                    1 => h
                        .store
                        .machine(child)
                        .update(|tx| {
                            Box::pin(
                                async move { tx.record_generation_attempt().await.map(|_| ()) },
                            )
                        })
                        .await
                        .map(|_| ()),
                    _ => h
                        .store
                        .machine(root)
                        .update(|tx| {
                            Box::pin(async move {
                                tx.send_message(send("root".into(), BusyBehavior::Queue))
                                    .await
                                    .map(|_| ())
                            })
                        })
                        .await
                        .map(|_| ()),
                }
            });
        }
        for result in join_all(tasks).await {
            if let Err(err) = result {
                let text = format!("{err:?}");
                if text.contains("40P01") || text.contains("deadlock") {
                    deadlocks.push(format!("round {round}: {text}"));
                }
            }
        }
    }
    assert!(
        deadlocks.is_empty(),
        "{} deadlocks: {:?}",
        deadlocks.len(),
        deadlocks.first()
    );
}

/// A bundle knows its queue length from its lock-and-bump statement, whose
/// subqueries read the snapshot taken before it waited for the row lock.
/// When the lock's previous holder queued a message meanwhile, that
/// snapshot misses it: the bundle must notice and read the queue again, or
/// it would take `R1` for `R0` (and its commit would publish a stale
/// queue).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bundle_that_waited_for_the_lock_sees_the_queue_its_holder_committed() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let machine = h.store.machine(id);

    let mut holder = machine.begin().await.unwrap();
    let holder_pid = backend_pid(holder.reader().await.unwrap()).await;
    holder
        .send_message(send(
            "queued while the other waits".into(),
            BusyBehavior::Queue,
        ))
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let machine = machine.clone();
        async move {
            let mut tx = machine.begin().await?;
            let before = tx.execution_state().await?;
            let chat = tx.chat().await?;
            tx.record_generation_attempt().await?;
            let applied = tx.applied().to_vec();
            let committed = tx.commit().await?;
            StoreResult::Ok((before, chat.queue_version, applied, committed))
        }
    });
    wait_until_blocked_by(&h, &[holder_pid]).await;
    let queued = holder.commit().await.unwrap();
    let (before, queue_version, applied, committed) = tokio::time::timeout(DEADLINE, waiter)
        .await
        .expect("the waiter finished")
        .expect("no panic")
        .expect("the waiter's bundle committed");
    assert_eq!(
        before,
        ExecutionState::R1,
        "the waiter saw the queued message"
    );
    assert_eq!(queue_version, queued.queue_version);
    assert_eq!(
        applied,
        vec![(
            chatd_core::Transition::RecordGenerationAttempt,
            ExecutionState::R1,
            ExecutionState::R1
        )]
    );
    assert_eq!(committed.snapshot_version, queued.snapshot_version + 1);
    assert_eq!(h.state(id).await, ExecutionState::R1);
}

/// A write through `ChatTx::conn` between transitions makes the bundle
/// read the row again, so the next transition and the commit see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_through_conn_between_transitions_is_seen_by_the_next_one_and_the_commit() {
    let h = Harness::new().await;
    let id = h.chat_in(ExecutionState::R0).await;
    let mut tx = h.store.machine(id).begin().await.unwrap();
    tx.record_generation_attempt().await.unwrap();
    // A queued row written behind the transitions' back (tests only: real
    // writers go through send_message), then a transition that must see it.
    let tail = chatd_store::internals::queue::QueueEnd::Tail;
    chatd_store::internals::queue::enqueue(
        tx.conn().await.unwrap(),
        id,
        &user_text("behind the back"),
        tail,
    )
    .await
    .unwrap();
    assert_eq!(tx.execution_state().await.unwrap(), ExecutionState::R1);
    tx.record_generation_attempt().await.unwrap();
    assert_eq!(
        tx.applied()[1],
        (
            chatd_core::Transition::RecordGenerationAttempt,
            ExecutionState::R1,
            ExecutionState::R1
        )
    );
    let committed = tx.commit().await.unwrap();
    assert_eq!(committed.queue_version, committed.snapshot_version);
    h.published.take();
}

/// `spawn_agent` commits racing on one parent (a retried step and its
/// original, many times over): one key makes one child, whatever the
/// interleaving; distinct keys make one child each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_spawns_with_one_key_create_one_child_and_distinct_keys_one_each() {
    let h = Arc::new(Harness::new().await);
    let parent = h.chat_in(ExecutionState::R0).await;
    let before = h.chat(parent).await.snapshot_version;
    let barrier = Arc::new(Barrier::new(16));
    let mut tasks = JoinSet::new();
    for i in 0..16 {
        let h = h.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            let key = if i < 8 {
                "same".to_owned()
            } else {
                format!("own-{i}")
            };
            let mut input = h.chat_input(Uuid::new_v4(), "sub-task");
            input.spawn_key = Some(key.clone());
            barrier.wait().await;
            loop {
                let attempt: StoreResult<(Uuid, bool)> = async {
                    let mut tx = h.store.machine(parent).begin().await?;
                    let child = tx.create_child(input.clone()).await?;
                    tx.commit().await?;
                    Ok(child)
                }
                .await;
                match attempt {
                    Ok((child, created)) => return (key, child, created),
                    // A deadlock victim or serialization failure: retried,
                    // as the worker's transition retries.
                    Err(StoreError::Database(_)) => continue,
                    Err(err) => panic!("spawn failed: {err}"),
                }
            }
        });
    }
    let results = join_all(tasks).await;
    let same: HashSet<Uuid> = results
        .iter()
        .filter(|(k, _, _)| k == "same")
        .map(|(_, c, _)| *c)
        .collect();
    assert_eq!(same.len(), 1, "one key, one child");
    assert_eq!(
        results
            .iter()
            .filter(|(k, _, created)| k == "same" && *created)
            .count(),
        1,
        "created once, found seven times"
    );
    let children: Vec<(Uuid, Option<String>, i32)> = sqlx::query_as(
        "SELECT id, spawn_key, depth FROM chats WHERE parent_chat_id = $1 ORDER BY spawn_key",
    )
    .bind(parent)
    .fetch_all(h.pool())
    .await
    .unwrap();
    assert_eq!(children.len(), 9, "{children:?}");
    assert!(children.iter().all(|(_, _, depth)| *depth == 1));
    let keys: HashSet<_> = children.iter().filter_map(|(_, k, _)| k.clone()).collect();
    assert_eq!(keys.len(), 9);
    // The parent's snapshot advanced once per committed bundle.
    assert_eq!(h.chat(parent).await.snapshot_version, before + 16);
}

/// The lock of a root chat's bundle (taken by the root statement of
/// `lock_and_bump`, issue 15) and of its children's (the family statement,
/// key-sharing the root and the parent): a child's open bundle holds the
/// root's off, the root's open bundle holds the child's off, and siblings
/// run side by side; `try_begin` skips instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_root_bundle_and_its_childrens_bundles_exclude_each_other_siblings_do_not() {
    let h = Harness::new().await;
    let root = h.create().await;
    let mut children = Vec::new();
    for name in ["one", "two"] {
        let mut input = h.chat_input(Uuid::new_v4(), name);
        input.parent_chat_id = Some(root);
        children.push(h.store.create_chat(input).await.unwrap().chat.id);
    }
    let root_machine = h.store.machine(root);
    let child_machine = h.store.machine(children[0]);

    // A child's bundle is open: its sibling's begins at once, the root's
    // waits (and `try_begin` on the root gives up).
    let mut child_tx = child_machine.begin().await.unwrap();
    let child_pid = backend_pid(child_tx.reader().await.unwrap()).await;
    let sibling = tokio::time::timeout(DEADLINE, h.store.machine(children[1]).begin())
        .await
        .expect("a sibling's bundle does not wait")
        .unwrap();
    assert!(root_machine.try_begin().await.unwrap().is_none());
    let released = Arc::new(AtomicBool::new(false));
    let waiting_root = spawn_update(root_machine.clone(), released.clone());
    wait_until_blocked_by(&h, &[child_pid]).await;
    released.store(true, Ordering::SeqCst);
    child_tx.commit().await.unwrap();
    sibling.commit().await.unwrap();
    let (after_release, result) = tokio::time::timeout(DEADLINE, waiting_root)
        .await
        .expect("the root's bundle finished")
        .expect("no panic");
    assert!(
        after_release,
        "the root committed only after the child's bundle"
    );
    result.expect("the root's bundle committed");

    // The root's bundle is open: the child's waits.
    let mut root_tx = root_machine.begin().await.unwrap();
    let root_pid = backend_pid(root_tx.reader().await.unwrap()).await;
    assert!(child_machine.try_begin().await.unwrap().is_none());
    let released = Arc::new(AtomicBool::new(false));
    let waiting_child = spawn_update(child_machine.clone(), released.clone());
    wait_until_blocked_by(&h, &[root_pid]).await;
    released.store(true, Ordering::SeqCst);
    let root_committed = root_tx.commit().await.unwrap();
    let (after_release, result) = tokio::time::timeout(DEADLINE, waiting_child)
        .await
        .expect("the child's bundle finished")
        .expect("no panic");
    assert!(
        after_release,
        "the child committed only after the root's bundle"
    );
    result.expect("the child's bundle committed");
    // Each bundle bumped its own row once.
    assert_eq!(
        h.chat(root).await.snapshot_version,
        root_committed.snapshot_version
    );
}

/// A workspace write of `bytes` bytes at `path`.
fn workspace_put(path: &str, bytes: usize) -> chatd_store::workspaces::WorkspaceChange {
    let content = vec![b'x'; bytes];
    chatd_store::workspaces::WorkspaceChange::Put {
        path: path.to_owned(),
        kind: chatd_store::workspaces::EntryKind::File,
        sha256: sha2_of(&content),
        content,
        executable: false,
    }
}

fn sha2_of(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes).to_vec()
}

/// The storage lock of `ChatTx::write_workspace` (issue 37): steps of one
/// owner's chats committing workspaces at once cannot pass the owner's
/// quota together; each decides on the bytes the others committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workspace_commits_of_one_owners_chats_racing_never_pass_the_storage_quota_together() {
    let h = Arc::new(Harness::new().await);
    let mut chats = Vec::new();
    for _ in 0..8 {
        chats.push(h.chat_in(ExecutionState::R0).await);
    }
    let owner = h.chat(chats[0]).await.owner_id;
    sqlx::query("UPDATE users SET max_storage_bytes = 100 WHERE id = $1")
        .bind(owner)
        .execute(h.pool())
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(chats.len()));
    let mut tasks = JoinSet::new();
    for chat in chats.clone() {
        let h = h.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            loop {
                let attempt: StoreResult<()> = async {
                    let mut tx = h.store.machine(chat).begin().await?;
                    tx.write_workspace(&[workspace_put("f", 30)], 1 << 20, 1 << 30)
                        .await?;
                    tx.commit().await?;
                    Ok(())
                }
                .await;
                match attempt {
                    Ok(()) => return true,
                    Err(StoreError::State(StateError::InvalidInput { field, .. })) => {
                        assert_eq!(field, "workspace");
                        return false;
                    }
                    Err(StoreError::Database(_)) => continue,
                    Err(err) => panic!("workspace commit failed: {err}"),
                }
            }
        });
    }
    let committed = join_all(tasks).await.into_iter().filter(|ok| *ok).count();
    assert_eq!(committed, 3, "30 bytes each under a quota of 100");
    let (rows, bytes): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(bytes), 0)::bigint FROM chat_workspace_files f
         JOIN chats c ON c.id = f.chat_id WHERE c.owner_id = $1",
    )
    .bind(owner)
    .fetch_one(h.pool())
    .await
    .unwrap();
    assert_eq!((rows, bytes), (3, 90));
    let summed: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(workspace_bytes), 0)::bigint FROM chats WHERE owner_id = $1",
    )
    .bind(owner)
    .fetch_one(h.pool())
    .await
    .unwrap();
    assert_eq!(summed, 90, "the summaries are the committed rows");
    // A refused write leaves its chat's workspace as it was (never set).
    let untouched = chats.len() - 3;
    let mut none = 0;
    for chat in chats {
        if h.chat(chat).await.workspace_summary().is_none() {
            none += 1;
        }
    }
    assert_eq!(none, untouched);
}

/// The storage lock of `ChatTx::copy_workspace_to_child`: sub-agents of one
/// owner's chats spawned at once, each copying its parent's workspace,
/// cannot pass the owner's quota together; a copy that does not fit is not
/// made, and its child still exists, with an empty workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workspace_copies_to_sub_agents_racing_never_pass_the_storage_quota_together() {
    let h = Arc::new(Harness::new().await);
    let mut parents = Vec::new();
    for _ in 0..6 {
        let chat = h.chat_in(ExecutionState::R0).await;
        let mut tx = h.store.machine(chat).begin().await.unwrap();
        tx.write_workspace(&[workspace_put("f", 30)], 1 << 20, 1 << 30)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        parents.push(chat);
    }
    let owner = h.chat(parents[0]).await.owner_id;
    // 180 committed; room for two copies of 30 more.
    sqlx::query("UPDATE users SET max_storage_bytes = 240 WHERE id = $1")
        .bind(owner)
        .execute(h.pool())
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(parents.len()));
    let mut tasks = JoinSet::new();
    for parent in parents.clone() {
        let h = h.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            let mut input = h.chat_input(Uuid::new_v4(), "sub-task");
            input.spawn_key = Some(format!("spawn-{parent}"));
            input.workspace = true;
            barrier.wait().await;
            loop {
                let attempt: StoreResult<(Uuid, chatd_store::WorkspaceCopy)> = async {
                    let mut tx = h.store.machine(parent).begin().await?;
                    let (child, created) = tx.create_child(input.clone()).await?;
                    assert!(created);
                    let copy = tx.copy_workspace_to_child(child, 1 << 30).await?;
                    tx.commit().await?;
                    Ok((child, copy))
                }
                .await;
                match attempt {
                    Ok(done) => return done,
                    Err(StoreError::Database(_)) => continue,
                    Err(err) => panic!("spawn failed: {err}"),
                }
            }
        });
    }
    let results = join_all(tasks).await;
    let copied: Vec<Uuid> = results
        .iter()
        .filter(|(_, c)| matches!(c, chatd_store::WorkspaceCopy::Copied { bytes: 30 }))
        .map(|(child, _)| *child)
        .collect();
    assert_eq!(copied.len(), 2, "{results:?}");
    for (child, copy) in &results {
        match copy {
            chatd_store::WorkspaceCopy::Copied { .. } => {
                let summary = h.chat(*child).await.workspace_summary().unwrap();
                assert_eq!((summary.bytes, summary.files), (30, 1));
            }
            chatd_store::WorkspaceCopy::OverQuota { bytes, storage } => {
                assert_eq!(*bytes, 30);
                assert!(storage.used + 30 > storage.quota, "{storage:?}");
                assert!(h.chat(*child).await.workspace_summary().is_none());
            }
            chatd_store::WorkspaceCopy::Empty => panic!("the parent's workspace is not empty"),
        }
    }
    let used: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(workspace_bytes), 0)::bigint FROM chats WHERE owner_id = $1",
    )
    .bind(owner)
    .fetch_one(h.pool())
    .await
    .unwrap();
    assert_eq!(used, 240, "six parents and two copies, exactly the quota");
}

/// `write_workspace` past `--max-workspace-bytes` is refused (the bundle is
/// dropped: nothing of it commits), and a shrinking write always fits, even
/// over a limit lowered since.
#[tokio::test]
async fn a_workspace_write_past_its_limit_is_refused_and_commits_nothing() {
    let h = Harness::new().await;
    let chat = h.chat_in(ExecutionState::R0).await;
    let mut tx = h.store.machine(chat).begin().await.unwrap();
    tx.write_workspace(&[workspace_put("a", 40)], 50, 1 << 30)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = h.store.machine(chat).begin().await.unwrap();
    let err = tx
        .write_workspace(&[workspace_put("b", 20)], 50, 1 << 30)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::State(StateError::InvalidInput { field: "workspace", detail }) if detail.contains("60 bytes")),
        "{err:?}"
    );
    drop(tx);
    let summary = h.chat(chat).await.workspace_summary().unwrap();
    assert_eq!((summary.bytes, summary.files), (40, 1));
    // Over a limit lowered since (5 bytes), the workspace may still shrink.
    let mut tx = h.store.machine(chat).begin().await.unwrap();
    tx.write_workspace(
        &[
            chatd_store::workspaces::WorkspaceChange::Delete { path: "a".into() },
            workspace_put("c", 10),
        ],
        5,
        1 << 30,
    )
    .await
    .expect("shrinking from 40 to 10 bytes is allowed");
    tx.commit().await.unwrap();
    let mut tx = h.store.machine(chat).begin().await.unwrap();
    tx.write_workspace(&[workspace_put("d", 1)], 5, 1 << 30)
        .await
        .expect_err("growing past a limit is not");
    drop(tx);
    let summary = h.chat(chat).await.workspace_summary().unwrap();
    assert_eq!((summary.bytes, summary.files), (10, 1));
}
