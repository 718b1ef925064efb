//! The notifier task of [`super::PgPubsub`]: sends queued publications with
//! `pg_notify`, in publish order (`spec/chatd-architecture.md`,
//! "Notification emission rules": post-commit, best effort).
//!
//! Everything queued when the task wakes goes out in one statement (at most
//! [`MAX_BATCH`]), so one round trip and one commit carry a burst of
//! publications (issue 15: one notification per transaction capped a
//! replica at about a thousand a second). PostgreSQL delivers the
//! notifications of one transaction in the order they were sent, and
//! transactions in commit order, so publish order holds. It folds identical
//! notifications (same channel and payload) of one transaction into one: a
//! batch ends before a publication identical to one already in it, which
//! goes into the next.
//!
//! Under a burst of publications (more than a few chats can make, see
//! `Pace`) the task waits [`LINGER`] before it takes a batch, so that
//! fewer, larger statements carry them; otherwise it sends at once.
//!
//! The statement commits with `synchronous_commit` off: a notification
//! transaction writes nothing durable, and listeners hear it at its commit
//! either way, so waiting for its WAL flush only delays the next batch.
//!
//! Error policy: a failed `pg_notify` is retried after 50 ms, 100 ms, … up
//! to `publish_attempts` attempts, then logged and dropped; receivers
//! tolerate drops. On shutdown, queued notifications get one attempt each
//! within [`DRAIN_TIMEOUT`]; the rest are logged and dropped.

use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Sends a batch: `$1` the channels, `$2` the payloads, in order (a
/// function scan yields the arrays' elements in order, and each row's
/// `pg_notify` runs as it is produced).
const NOTIFY_SQL: &str = "SELECT count(pg_notify(t.c, t.p))
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS s,
          unnest($1::text[], $2::text[]) AS t(c, p)";

/// Most publications in one statement.
pub(crate) const MAX_BATCH: usize = 256;

/// Most times the task yields to let a burst of publications queue up
/// before it sends them.
const MAX_YIELDS: usize = 4;

/// Under a burst, how long the task waits after a publication arrives
/// before it sends, so that one statement carries what arrives meanwhile.
const LINGER: Duration = Duration::from_millis(2);

/// A burst: at least [`BURST_NOTIFICATIONS`] notifications sent within the
/// last [`BURST_WINDOW`].
const BURST_WINDOW: Duration = Duration::from_millis(4);

/// See [`BURST_WINDOW`].
const BURST_NOTIFICATIONS: usize = 8;

/// Delay before the first retry; retry `n` waits `n` times this.
const RETRY_DELAY: Duration = Duration::from_millis(50);

/// How long shutdown waits for queued notifications to go out.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// A validated publication waiting to be sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Notification {
    pub(crate) channel: String,
    pub(crate) payload: String,
}

/// The notifier task's state. See the module docs.
pub(crate) struct NotifierLoop {
    pool: PgPool,
    queue: mpsc::UnboundedReceiver<Notification>,
    attempts: u32,
    pace: Pace,
}

/// What the notifier sent lately, to tell a burst from the ordinary pace
/// of a few chats: under a burst (hundreds of commits a second each
/// publishing) it lingers [`LINGER`] before a batch, which turns many small
/// `pg_notify` transactions into a few larger ones (each costs PostgreSQL
/// an XID, a commit record and the global notification lock); at the pace
/// of a few chats (a turn publishes about five notifications over several
/// milliseconds) it sends at once, so their notifications are not delayed.
#[derive(Debug, Default)]
struct Pace {
    /// When recent batches went out and how many notifications each had,
    /// oldest first, within [`BURST_WINDOW`] of the newest.
    sent: std::collections::VecDeque<(Instant, usize)>,
}

impl Pace {
    /// Notes a batch of `len` notifications sent at `now`.
    fn sent(&mut self, now: Instant, len: usize) {
        self.sent.push_back((now, len));
        self.forget_before(now);
    }

    /// Whether the notifications sent within [`BURST_WINDOW`] before `now`
    /// make a burst.
    fn bursting(&mut self, now: Instant) -> bool {
        self.forget_before(now);
        self.sent.iter().map(|(_, len)| len).sum::<usize>() >= BURST_NOTIFICATIONS
    }

    fn forget_before(&mut self, now: Instant) {
        while self
            .sent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > BURST_WINDOW)
        {
            self.sent.pop_front();
        }
    }
}

impl NotifierLoop {
    pub(crate) fn new(
        pool: PgPool,
        queue: mpsc::UnboundedReceiver<Notification>,
        attempts: u32,
    ) -> Self {
        Self {
            pool,
            queue,
            attempts: attempts.max(1),
            pace: Pace::default(),
        }
    }

    /// Sends queued notifications until `cancel` fires, then drains.
    pub(crate) async fn run(mut self, cancel: CancellationToken) {
        // A publication that did not fit the last batch (a duplicate of
        // one in it) starts the next.
        let mut carried: Option<Notification> = None;
        loop {
            let first = match carried.take() {
                Some(notification) => notification,
                None => tokio::select! {
                    biased;
                    () = cancel.cancelled() => break,
                    next = self.queue.recv() => match next {
                        Some(notification) => notification,
                        None => return,
                    },
                },
            };
            // Under a burst, wait a little: what arrives meanwhile goes in
            // the same statement (see `Pace`).
            if self.pace.bursting(Instant::now()) {
                tokio::select! {
                    biased;
                    () = cancel.cancelled() => {}
                    () = tokio::time::sleep(LINGER) => {}
                }
            }
            // Let the tasks that are ready to run (commits finishing beside
            // this one) queue theirs first, while they keep coming (at most
            // `MAX_YIELDS` times): one statement then carries the burst.
            // Costs no wait when nothing else is ready.
            let mut queued = self.queue.len();
            for _ in 0..MAX_YIELDS {
                tokio::task::yield_now().await;
                let now = self.queue.len();
                if now == queued {
                    break;
                }
                queued = now;
            }
            let (batch, rest) = next_batch(first, &mut self.queue);
            carried = rest;
            self.pace.sent(Instant::now(), batch.len());
            self.send_with_retries(&batch).await;
        }
        self.drain().await;
    }

    async fn send_with_retries(&self, batch: &[Notification]) {
        for attempt in 1..=self.attempts {
            match notify(&self.pool, batch).await {
                Ok(()) => return,
                Err(error) if attempt < self.attempts => {
                    tracing::warn!(
                        channel = %batch[0].channel,
                        batch = batch.len(),
                        attempt,
                        %error,
                        "pubsub notify failed; retrying"
                    );
                    tokio::time::sleep(RETRY_DELAY * attempt).await;
                }
                Err(error) => tracing::error!(
                    channel = %batch[0].channel,
                    batch = batch.len(),
                    attempts = self.attempts,
                    %error,
                    "pubsub notify failed; dropping the notifications"
                ),
            }
        }
    }

    async fn drain(mut self) {
        self.queue.close();
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while let Ok(first) = self.queue.try_recv() {
            let mut pending = Some(first);
            while let Some(first) = pending.take() {
                let (batch, rest) = next_batch(first, &mut self.queue);
                pending = rest;
                match tokio::time::timeout_at(deadline, notify(&self.pool, &batch)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::warn!(
                        batch = batch.len(),
                        %error,
                        "pubsub notify failed during shutdown; dropping the notifications"
                    ),
                    Err(_elapsed) => {
                        tracing::warn!(
                            dropped =
                                self.queue.len() + batch.len() + usize::from(pending.is_some()),
                            "pubsub shutdown deadline passed; dropping queued notifications"
                        );
                        return;
                    }
                }
            }
        }
    }
}

/// `first` and what else is queued now, in order, up to [`MAX_BATCH`] and
/// stopping before a publication identical to one already taken (returned
/// as the second value, to start the next batch).
fn next_batch(
    first: Notification,
    queue: &mut mpsc::UnboundedReceiver<Notification>,
) -> (Vec<Notification>, Option<Notification>) {
    let mut seen = std::collections::HashSet::new();
    seen.insert(first.clone());
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        let Ok(next) = queue.try_recv() else { break };
        if !seen.insert(next.clone()) {
            return (batch, Some(next));
        }
        batch.push(next);
    }
    (batch, None)
}

async fn notify(pool: &PgPool, batch: &[Notification]) -> Result<(), sqlx::Error> {
    let channels: Vec<&str> = batch.iter().map(|n| n.channel.as_str()).collect();
    let payloads: Vec<&str> = batch.iter().map(|n| n.payload.as_str()).collect();
    sqlx::query(NOTIFY_SQL)
        .bind(channels)
        .bind(payloads)
        .execute(pool)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(channel: &str, payload: &str) -> Notification {
        Notification {
            channel: channel.into(),
            payload: payload.into(),
        }
    }

    #[test]
    fn a_batch_takes_what_is_queued_in_order_and_stops_before_a_duplicate() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for item in [
            n("a", "1"),
            n("b", "1"),
            n("a", "2"),
            n("a", "1"),
            n("c", "3"),
        ] {
            tx.send(item).unwrap();
        }
        let first = rx.try_recv().unwrap();
        let (batch, rest) = next_batch(first, &mut rx);
        assert_eq!(batch, vec![n("a", "1"), n("b", "1"), n("a", "2")]);
        assert_eq!(
            rest,
            Some(n("a", "1")),
            "the duplicate starts the next batch"
        );
        let (batch, rest) = next_batch(rest.unwrap(), &mut rx);
        assert_eq!(batch, vec![n("a", "1"), n("c", "3")]);
        assert_eq!(rest, None);
    }

    #[test]
    fn the_pace_of_a_few_chats_sends_at_once_and_a_burst_lingers() {
        let start = Instant::now();
        let ms = |n: u64| start + Duration::from_millis(n);
        let mut pace = Pace::default();
        // One chat's turn: a send (two notifications), an attempt and a
        // step a few milliseconds apart, turn after turn.
        for turn in 0..5 {
            let t = turn * 9;
            assert!(!pace.bursting(ms(t)));
            pace.sent(ms(t), 2);
            assert!(!pace.bursting(ms(t + 2)));
            pace.sent(ms(t + 2), 1);
            assert!(!pace.bursting(ms(t + 5)));
            pace.sent(ms(t + 5), 1);
        }
        // Many commits: small batches back to back make a burst ...
        let mut pace = Pace::default();
        for i in 0..3 {
            pace.sent(ms(100 + i), 3);
        }
        assert!(pace.bursting(ms(103)));
        // ... which ends once the window has passed without one.
        assert!(!pace.bursting(ms(103) + BURST_WINDOW));
        assert!(pace.sent.len() <= 1);
    }

    #[test]
    fn a_batch_holds_at_most_max_batch_publications() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        for i in 0..MAX_BATCH + 5 {
            tx.send(n("a", &i.to_string())).unwrap();
        }
        let first = rx.try_recv().unwrap();
        let (batch, rest) = next_batch(first, &mut rx);
        assert_eq!(batch.len(), MAX_BATCH);
        assert_eq!(rest, None);
        assert_eq!(rx.len(), 5, "the rest waits for the next batch");
    }
}
