//! This replica's runner slots (`--max-runners`; API.md "Limits, budgets
//! and the token lifecycle"): how many runners it holds, how many of those
//! wait in `requires_action` and do not count, and whether runnable chats
//! wait for a slot.
//!
//! A leaf shared by the acquisition loop (which claims at most the free
//! slots, [`crate::acquisition`]), the runner manager (which frees a slot
//! when a runner ends and reports parked runners) and the runners' abandon
//! tasks (which let an idle chat go at once while chats wait).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// This replica's runner slots (`--max-runners`) and whether runnable
/// chats wait for a slot, shared by the acquisition loop, the runner
/// manager and the runners' abandon tasks.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    /// Runners this replica holds: one more for every chat acquired, one
    /// fewer for every runner cleaned up (the manager's completion).
    held: AtomicUsize,
    /// Runners of [`Slots::held`] whose chat was in `requires_action` when
    /// the manager's database sync last read it: they wait for client tool
    /// results or approvals and do not count against `--max-runners`.
    parked: AtomicUsize,
    /// The last pass left runnable chats unclaimed for want of a slot: this
    /// replica's runners were all taken, or a user had more chats waiting
    /// than room under their running-chat cap.
    contended: AtomicBool,
    /// Woken when a runner ends while [`Slots::contended`].
    freed: tokio::sync::Notify,
}

impl Slots {
    /// Runners held now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Runners that count against `--max-runners`: those held, less those
    /// whose chat waits in `requires_action` (as the manager's database
    /// sync last saw it).
    pub(crate) fn counted(&self) -> usize {
        self.held()
            .saturating_sub(self.parked.load(Ordering::SeqCst))
    }

    /// The manager's database sync saw `parked` runners whose chat is in
    /// `requires_action`; when more than before, their slots are free and
    /// chats waiting for one are woken.
    pub(crate) fn set_parked(&self, parked: usize) {
        let before = self.parked.swap(parked, Ordering::SeqCst);
        if parked > before && self.contended() {
            self.freed.notify_one();
        }
    }

    /// Whether chats wait for a slot (as the last pass saw it): a runner
    /// should then let an idle chat go at once instead of keeping it for
    /// `abandon_idle_after`, since the chat keeps its owner's slot and a
    /// runner slot while held.
    pub(crate) fn contended(&self) -> bool {
        self.contended.load(Ordering::SeqCst)
    }

    /// Resolves when a slot was freed while [`Slots::contended`] (a runner
    /// ended, or a held chat went to `requires_action`).
    pub(crate) fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }

    /// A runner ended (cleaned up): its slot is free; wakes the acquisition
    /// loop when chats wait for one.
    pub(crate) fn runner_ended(&self) {
        let _ = self
            .held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if self.contended() {
            self.freed.notify_one();
        }
    }

    /// A chat was acquired: one more runner held.
    pub(crate) fn runner_started(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
    }

    /// What the last acquisition pass saw: whether runnable chats were left
    /// unclaimed for want of a slot.
    pub(crate) fn set_contended(&self, contended: bool) {
        self.contended.store(contended, Ordering::SeqCst);
    }
}
