//! SIGTERM and SIGINT (API.md, "Running a replica": both shut a replica down
//! gracefully, and SIGTERM then exits with status 0).
//!
//! The handlers are installed by [`Signals::install`], before anything else
//! starts, so a signal that arrives during startup (say while the embedded
//! PostgreSQL initialises) is not lost and does not kill the process before
//! it can clean up: startup notices it at its next step and unwinds.
//!
//! The first signal cancels [`Signals::shutdown`]: stop accepting requests,
//! drain in-flight ones within the grace period, deregister, stop. A second
//! signal cancels [`Signals::force`]: stop draining at once (cleanup still
//! runs).

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// Cancellation tokens driven by SIGTERM and SIGINT.
#[derive(Debug, Clone)]
pub struct Signals {
    /// Cancelled by the first SIGTERM or SIGINT.
    pub shutdown: CancellationToken,
    /// Cancelled by the second one.
    pub force: CancellationToken,
}

impl Signals {
    /// Installs the handlers and spawns the task that turns signals into
    /// cancellations. Must be called within a Tokio runtime.
    ///
    /// # Errors
    /// When a handler cannot be installed.
    pub fn install() -> anyhow::Result<Self> {
        let mut terminate = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        let signals = Self {
            shutdown: CancellationToken::new(),
            force: CancellationToken::new(),
        };
        let tokens = signals.clone();
        tokio::spawn(async move {
            for round in 0..2 {
                let name = tokio::select! {
                    Some(()) = terminate.recv() => "SIGTERM",
                    Some(()) = interrupt.recv() => "SIGINT",
                    else => return,
                };
                if round == 0 {
                    tracing::info!("received {name}: shutting down gracefully");
                    tokens.shutdown.cancel();
                } else {
                    tracing::warn!("received {name} again: not waiting for in-flight requests");
                    tokens.force.cancel();
                }
            }
        });
        Ok(signals)
    }
}
