//! The interval timer of the worker's background loops
//! (`spec/chatd-architecture.md`, "Runner manager"'s
//! database sync, heartbeat and heartbeat cleanup loops, "Auto-archive
//! loop", and the part buffer's garbage collection).
//!
//! The first tick is immediate; a tick missed while the loop was busy is
//! delayed, not made up in a burst, so a slow pass never triggers a run of
//! passes back to back.

use std::time::Duration;

use tokio::time::{Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// Ticks every `period` (see the module doc).
pub(crate) struct Ticker {
    interval: Interval,
}

impl Ticker {
    /// A ticker whose first tick is due now.
    pub(crate) fn new(period: Duration) -> Self {
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self { interval }
    }

    /// Waits for the next tick: `true`, or `false` once `cancel` fired
    /// first (the loop ends).
    pub(crate) async fn tick(&mut self, cancel: &CancellationToken) -> bool {
        tokio::select! {
            _ = cancel.cancelled() => false,
            _ = self.interval.tick() => true,
        }
    }
}
