//! The acquisition loop (`spec/chatd-architecture.md`, "Acquisition loop";
//! API.md "Limits, budgets and the token lifecycle": `--max-runners`,
//! "Running chats").
//!
//! Woken by its timer, by `chat:ownership` hints and by a runner of this
//! replica ending while chats wait for a slot, it finds chats in a runnable
//! state (`R*`, `I*`, `A*`) that no runner holds (no worker, or no fresh
//! heartbeat for the current runner, by database time), claims each
//! without waiting on rows other transactions hold (`SKIP LOCKED`), re-checks
//! the conditions under the lock, applies `Acquire` with a fresh runner id and
//! asks the runner manager to spawn a runner. A held chat without a fresh
//! heartbeat is taken over only while the database still has its
//! heartbeats ([`chatd_store::heartbeats::intact`]): after a failover or a
//! crash of the database they are gone, and the claim gives them back
//! instead ([`chatd_store::heartbeats::recover_lost`]), or every running
//! chat would be taken over at once (issue 36).
//!
//! Two caps decide what a pass may take:
//!
//! - this replica's runners: at most `limits.max_runners` at once
//!   ([`crate::slots::Slots`]), not counting runners whose chat waits in
//!   `requires_action` (the manager's database sync reads every held
//!   chat's row each `db_sync_interval` and reports how many); a pass
//!   claims at most the free slots;
//! - the owner's running chats, across every replica: the database decides.
//!   The candidate query returns no more of a user's chats than the room
//!   under their cap, in the order their turns began
//!   ([`chatd_store::chats::acquisition_candidates`]), and every claim locks the
//!   owner's row and counts the chats runners hold before it acquires
//!   ([`chatd_store::chats::lock_owner_room`]), so two replicas claiming the same
//!   user's chats at once take turns and never pass the cap. The cap counts
//!   slots: one per chat family (a root and its sub-agents share the
//!   root's, so a sub-agent its parent waits for in `wait_agent` is always
//!   acquired: [`chatd_store::chats::family_holds_slot`]). Chats in
//!   `requires_action` take no slot, and they and `interrupting` chats are
//!   acquired without room (they wait on a timer, or only finish: an
//!   interrupted chat that waited for a slot lands at once); a held
//!   `interrupting` chat keeps the slot it ran in until its runner lets it
//!   go. A held idle chat counts: a runner
//!   keeps a chat that went idle for `abandon_idle_after` and answers a
//!   message sent meanwhile without a new `Acquire`, so only counting it
//!   closes that way around the cap. While chats wait for a slot, runners let idle chats go at once
//!   (the abandon task asks [`crate::slots::Slots::contended`]), and a runner that ends
//!   wakes this loop, which then claims the owner's next waiting chat.

use std::sync::Arc;

use futures::{FutureExt as _, StreamExt as _};

use chatd_core::ChatStatus;
use chatd_pubsub::OWNERSHIP_CHANNEL;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::context::WorkerContext;
use crate::manager::ManagerHandle;
use crate::runner::RunnerKey;
use crate::timeline::Hop;

/// At most how many candidates one pass claims at the same time; fewer
/// with a small pool ([`claim_concurrency`]).
const MAX_CLAIM_CONCURRENCY: usize = 24;

/// How many candidates one pass claims at the same time: half of the
/// pool's connections (so that a burst of new chats leaves the other half
/// to the API and the runners), between 1 and [`MAX_CLAIM_CONCURRENCY`].
/// Each claim is a transaction with a commit to wait for, and concurrent
/// commits share a WAL flush: with 24 at once a burst of 400 new chats is
/// acquired in about half the time 8 took (bench_worker, issue 15).
fn claim_concurrency(pool_max_connections: u32) -> usize {
    (pool_max_connections as usize / 2).clamp(1, MAX_CLAIM_CONCURRENCY)
}
/// Retries of a pass that skipped locked rows before waiting for the timer.
const LOCKED_RETRIES: u32 = 20;
/// Delay between those retries.
const LOCKED_RETRY_DELAY: std::time::Duration = std::time::Duration::from_millis(25);
/// How long after a lease's computed expiry the loop wakes, so that the
/// heartbeat is older than the bound by database time when the pass reads it.
const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_millis(50);

/// What one pass did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pass {
    /// How many chats the pass could take at most: the batch, or fewer
    /// when fewer runner slots were free.
    pub(crate) limit: i64,
    /// Chats this worker acquired.
    pub(crate) claimed: usize,
    /// Candidates whose row another transaction held (`SKIP LOCKED`).
    pub(crate) skipped_locked: usize,
    /// Candidates whose claim failed with an error (logged; tried again
    /// at the next pass).
    pub(crate) failed: usize,
    /// Candidates whose owner had no room under their running-chat cap
    /// once locked (another replica took the slot first).
    pub(crate) at_cap: usize,
}

pub(crate) struct AcquisitionLoop {
    pub(crate) ctx: Arc<WorkerContext>,
    pub(crate) manager: ManagerHandle,
    pub(crate) wake: Arc<tokio::sync::Notify>,
}

impl AcquisitionLoop {
    pub(crate) async fn run(self, cancel: CancellationToken) {
        let mut subscription = loop {
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return,
                s = self.ctx.pubsub.subscribe(OWNERSHIP_CHANNEL) => s,
            };
            match attempt {
                Ok(s) => break s,
                Err(err) => {
                    tracing::warn!(error = %err, "subscribing to chat:ownership failed; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(self.ctx.config.infra_backoff.1) => {}
                    }
                }
            }
        };
        // The first pass runs at once; later timer passes at the deadline
        // that `next_wait` sets. It is recomputed after a timer pass, and
        // after a hinted pass only when it lies further away than a lease:
        // leases counted last time can only have been renewed (expire later),
        // and one taken since expires no sooner than a lease from now.
        let mut deadline = tokio::time::Instant::now();
        loop {
            let timer = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep_until(deadline) => true,
                _ = self.wake.notified() => false,
                _ = self.ctx.slots.freed() => false,
                event = subscription.recv() => match event {
                    None => return,
                    Some(event) => {
                        self.report_hint(&event);
                        false
                    }
                },
            };
            // Hints that arrived meanwhile are served by this same pass: a
            // burst of new chats queued one pass per hint, and a chat created
            // right after the burst waited behind all of them (issue 31,
            // bench_fairness).
            loop {
                match subscription.recv().now_or_never() {
                    Some(Some(event)) => self.report_hint(&event),
                    Some(None) => return,
                    None => break,
                }
            }
            // Keep passing while a full batch was claimed (there may be
            // more), and retry soon when rows were locked by another
            // transaction at the time (a send or a runner task): no further
            // hint will come for them.
            let mut locked_retries = 0;
            loop {
                match self.pass().await {
                    Ok(pass)
                        if pass.limit >= self.ctx.config.acquisition_batch
                            && pass.claimed as i64 >= pass.limit =>
                    {
                        continue;
                    }
                    Ok(pass) if pass.skipped_locked > 0 && locked_retries < LOCKED_RETRIES => {
                        locked_retries += 1;
                        // A hint or a freed slot meanwhile passes at once:
                        // a new chat must not wait out the retry delay.
                        tokio::select! {
                            _ = cancel.cancelled() => return,
                            _ = tokio::time::sleep(LOCKED_RETRY_DELAY) => {}
                            _ = self.wake.notified() => {}
                            _ = self.ctx.slots.freed() => {}
                            event = subscription.recv() => match event {
                                None => return,
                                Some(event) => self.report_hint(&event),
                            },
                        }
                    }
                    Ok(_) => break,
                    Err(err) => {
                        tracing::warn!(error = %err, "acquisition pass failed");
                        break;
                    }
                }
            }
            let now = tokio::time::Instant::now();
            if timer || deadline > now + self.ctx.config.lease_stale_after {
                deadline = now + self.next_wait().await;
            }
        }
    }

    /// How long to sleep before the next timer pass: the acquisition
    /// interval, or less when another worker's lease goes stale sooner (a
    /// crashed owner's chat is then taken over within its lease, not up to
    /// an interval later; nothing else would wake this loop for it). A
    /// failed lookup falls back to the interval.
    async fn next_wait(&self) -> std::time::Duration {
        let interval = self.ctx.config.acquisition_interval;
        match chatd_store::chats::next_lease_expiry(
            self.ctx.store.pool(),
            self.ctx.config.worker_id,
            self.ctx.config.lease_stale_after.as_secs_f64(),
        )
        .await
        {
            Ok(Some(secs)) => interval.min(std::time::Duration::from_secs_f64(secs) + LEASE_MARGIN),
            Ok(None) => interval,
            Err(err) => {
                tracing::warn!(error = %err, "looking up the next lease expiry failed");
                interval
            }
        }
    }

    /// Reports a hint to the timeline, when one is installed.
    fn report_hint(&self, event: &chatd_pubsub::PubsubEvent) {
        let timeline = &self.ctx.config.timeline;
        if let (true, chatd_pubsub::PubsubEvent::Message(payload)) = (timeline.is_on(), event)
            && let Ok(hint) = serde_json::from_slice::<chatd_pubsub::OwnershipHint>(payload)
        {
            timeline.hop(hint.chat_id, Hop::Hint);
        }
    }

    /// One pass over the candidates: at most as many as runner slots are
    /// free (none when every slot is taken), within each owner's
    /// running-chat cap.
    pub(crate) async fn pass(&self) -> chatd_store::StoreResult<Pass> {
        let stale = self.ctx.config.lease_stale_after.as_secs_f64();
        let slots = &self.ctx.slots;
        let free = self
            .ctx
            .config
            .limits
            .max_runners
            .saturating_sub(slots.counted());
        let limit = self
            .ctx
            .config
            .acquisition_batch
            .min(i64::try_from(free).unwrap_or(i64::MAX));
        let mut pass = Pass {
            limit,
            ..Pass::default()
        };
        if limit <= 0 {
            // Every runner slot is taken: whatever waits, waits for one of
            // ours to end (or for another replica).
            slots.set_contended(true);
            return Ok(pass);
        }
        let candidates = chatd_store::chats::acquisition_candidates(
            self.ctx.store.pool(),
            stale,
            limit,
            self.ctx.config.limits.max_running_chats,
        )
        .await?;
        // Chats wait for a slot when an owner is at their cap, or when this
        // pass fills the last free runner slots (there may be more).
        let fills_runners = free as i64 <= self.ctx.config.acquisition_batch
            && candidates.chat_ids.len() as i64 >= limit;
        slots.set_contended(candidates.blocked || fills_runners);
        // One candidate that fails (a transient database error, a row in a
        // state that cannot be read) must not keep the others unowned: log
        // it and go on; the next pass tries it again. Claims run a few at a
        // time: each is a short transaction that never waits for a chat's
        // lock (`SKIP LOCKED`), and one after the other a burst of new chats
        // waited for every claim before it (issue 15).
        let mut claims = futures::stream::iter(candidates.chat_ids)
            .map(|chat_id| async move { (chat_id, self.claim(chat_id).await) })
            .buffer_unordered(claim_concurrency(
                self.ctx.store.pool().options().get_max_connections(),
            ));
        while let Some((chat_id, claimed)) = claims.next().await {
            match claimed {
                Ok(Claim::Acquired) => pass.claimed += 1,
                Ok(Claim::Locked) => pass.skipped_locked += 1,
                Ok(Claim::AtCap) => pass.at_cap += 1,
                Ok(Claim::NotACandidate) => {}
                Err(err) => {
                    tracing::warn!(%chat_id, error = %err, "acquiring a candidate failed");
                    pass.failed += 1;
                }
            }
        }
        if pass.at_cap > 0 {
            slots.set_contended(true);
        }
        Ok(pass)
    }

    /// Gives back the heartbeats the database lost
    /// ([`chatd_store::heartbeats::recover_lost`]) and says so.
    async fn recover_heartbeats(&self) -> chatd_store::StoreResult<()> {
        let recovered = chatd_store::heartbeats::recover_lost(self.ctx.store.pool()).await?;
        if recovered > 0 {
            tracing::warn!(
                heartbeats = recovered,
                "the database lost its heartbeats (a failover or crash recovery): gave every held \
                 chat one as of now; runners that are alive refresh theirs, the chats of the others \
                 are taken over one lease from now"
            );
        }
        Ok(())
    }

    /// Claims one candidate: re-checks it under its row lock, checks its
    /// owner's room under the owner's lock, and applies `Acquire` with a
    /// fresh runner id, then spawns its runner.
    async fn claim(&self, chat_id: Uuid) -> chatd_store::StoreResult<Claim> {
        let stale = self.ctx.config.lease_stale_after.as_secs_f64();
        let Some(mut tx) = self.ctx.store.machine(chat_id).try_begin().await? else {
            return Ok(Claim::Locked);
        };
        let chat = tx.chat().await?;
        if !tx.execution_state().await?.is_runnable() {
            return Ok(Claim::NotACandidate);
        }
        if let Some(runner) = chat.runner_id
            && chat.worker_id.is_some()
        {
            if chatd_store::heartbeats::is_fresh(tx.reader().await?, chat_id, runner, stale).await?
            {
                return Ok(Claim::NotACandidate);
            }
            // No fresh heartbeat. After a failover or a crash of the
            // database that says nothing: its UNLOGGED heartbeats are gone.
            // Read in this transaction, the marker cannot be lost before it
            // ends (a promotion or a crash would end it too).
            if !chatd_store::heartbeats::intact(tx.reader().await?).await? {
                drop(tx);
                self.recover_heartbeats().await?;
                return Ok(Claim::NotACandidate);
            }
        }
        // The owner's cap, decided under the owner's lock (after the chat's:
        // the one lock order of every claim) by a count that sees every
        // claim committed before it. A chat in `requires_action` or
        // `interrupting` needs no room (it waits on a timer, or only
        // finishes), and one whose family already holds a slot adds none
        // (a sub-agent its parent waits for).
        if !matches!(
            chat.status,
            ChatStatus::RequiresAction | ChatStatus::Interrupting
        ) {
            let room = chatd_store::chats::lock_owner_room(
                tx.reader().await?,
                chat.owner_id,
                self.ctx.config.limits.max_running_chats,
                stale,
            )
            .await?;
            if room <= 0
                && !chatd_store::chats::family_holds_slot(
                    tx.reader().await?,
                    chat.owner_id,
                    chat.root_chat_id.unwrap_or(chat.id),
                    stale,
                )
                .await?
            {
                return Ok(Claim::AtCap);
            }
        }
        let runner_id = Uuid::new_v4();
        tx.acquire(self.ctx.config.worker_id, runner_id).await?;
        let acquired = tx.commit().await?;
        self.ctx.slots.runner_started();
        self.ctx.config.timeline.hop(chat_id, Hop::Acquired);
        tracing::info!(%chat_id, %runner_id, previous_worker = ?chat.worker_id, "acquired chat");
        self.manager
            .spawn(RunnerKey { chat_id, runner_id }, acquired.snapshot_version);
        Ok(Claim::Acquired)
    }
}

/// What [`AcquisitionLoop::claim`] did with one candidate.
enum Claim {
    /// Acquired; its runner is spawned.
    Acquired,
    /// Another transaction held its row (`SKIP LOCKED`).
    Locked,
    /// Under the lock it was not runnable, or its lease was fresh.
    NotACandidate,
    /// Its owner's chats held by runners already reach their cap.
    AtCap,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_use_half_the_pool_between_one_and_the_cap() {
        assert_eq!(claim_concurrency(0), 1);
        assert_eq!(claim_concurrency(1), 1);
        assert_eq!(claim_concurrency(16), 8);
        assert_eq!(claim_concurrency(40), 20);
        assert_eq!(claim_concurrency(200), MAX_CLAIM_CONCURRENCY);
    }
}
