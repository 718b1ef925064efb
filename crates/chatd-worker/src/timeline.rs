//! Where a turn's time goes (issue 15): the worker reports each hop of a
//! turn, with the chat and the instant it happened, to an optional
//! [`TimelineSink`] of [`crate::WorkerConfig::timeline`]. Without a sink a
//! hop costs one branch. The benchmark `bench_worker` installs one and
//! prints the breakdown; nothing else does.
//!
//! The hops of one turn, in the order a turn meets them (a turn with tool
//! calls repeats the generation hops per step; an answer that streams
//! reports [`Hop::FirstPart`] once per model call):
//!
//! | hop | when |
//! |---|---|
//! | [`Hop::Hint`] | the acquisition loop received a `chat:ownership` hint for the chat |
//! | [`Hop::Acquired`] | its `Acquire` committed |
//! | [`Hop::Subscribed`] | the runner is subscribed to `chat:update:{chat}` |
//! | [`Hop::Bootstrapped`] | the runner's first snapshot was processed |
//! | [`Hop::HistoryLoaded`] | the generation task read the chat, history and model |
//! | [`Hop::AttemptRecorded`] | its `RecordGenerationAttempt` committed |
//! | [`Hop::FirstPart`] | the provider's first streamed part arrived |
//! | [`Hop::ResponseDone`] | the provider's response ended |
//! | [`Hop::StepCommitted`] | the step's `CommitStep` (and `FinishTurn`, …) committed |
//! | [`Hop::Abandoned`] | the runner's `Abandon` committed |

use std::sync::Arc;
use std::time::Instant;

use uuid::Uuid;

/// One hop of a turn; see the module docs for when each is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hop {
    /// A `chat:ownership` hint for the chat reached the acquisition loop.
    Hint,
    /// `Acquire` committed.
    Acquired,
    /// The runner subscribed to the chat's update channel.
    Subscribed,
    /// The runner processed its first snapshot.
    Bootstrapped,
    /// The generation task read what it needs for the model call.
    HistoryLoaded,
    /// `RecordGenerationAttempt` committed.
    AttemptRecorded,
    /// The first streamed part of the provider's response arrived.
    FirstPart,
    /// The provider's response ended.
    ResponseDone,
    /// The step's bundle (`CommitStep` and what follows it) committed.
    StepCommitted,
    /// `Abandon` committed.
    Abandoned,
}

impl Hop {
    /// Every hop, in turn order.
    pub const ALL: [Hop; 10] = [
        Hop::Hint,
        Hop::Acquired,
        Hop::Subscribed,
        Hop::Bootstrapped,
        Hop::HistoryLoaded,
        Hop::AttemptRecorded,
        Hop::FirstPart,
        Hop::ResponseDone,
        Hop::StepCommitted,
        Hop::Abandoned,
    ];

    /// A short name (`"attempt recorded"`).
    pub fn name(self) -> &'static str {
        match self {
            Hop::Hint => "ownership hint",
            Hop::Acquired => "acquired",
            Hop::Subscribed => "runner subscribed",
            Hop::Bootstrapped => "runner bootstrapped",
            Hop::HistoryLoaded => "history loaded",
            Hop::AttemptRecorded => "attempt recorded",
            Hop::FirstPart => "first part",
            Hop::ResponseDone => "response done",
            Hop::StepCommitted => "step committed",
            Hop::Abandoned => "abandoned",
        }
    }
}

/// Receives hops. Called on the worker's tasks: keep it short and never
/// block (record into a mutex-guarded vector, say).
pub trait TimelineSink: Send + Sync + 'static {
    /// Hop `hop` of chat `chat_id` happened at `at`.
    fn hop(&self, chat_id: Uuid, hop: Hop, at: Instant);
}

/// An optional [`TimelineSink`], as [`crate::WorkerConfig::timeline`] holds
/// it. `Timeline::default()` reports nowhere.
///
/// # Example
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Instant;
/// use chatd_worker::timeline::{Hop, Timeline, TimelineSink};
///
/// #[derive(Default)]
/// struct Recorder(Mutex<Vec<(uuid::Uuid, Hop)>>);
/// impl TimelineSink for Recorder {
///     fn hop(&self, chat_id: uuid::Uuid, hop: Hop, _at: Instant) {
///         self.0.lock().unwrap().push((chat_id, hop));
///     }
/// }
/// let recorder = Arc::new(Recorder::default());
/// let timeline = Timeline::new(recorder.clone());
/// let chat = uuid::Uuid::new_v4();
/// timeline.hop(chat, Hop::Acquired);
/// Timeline::default().hop(chat, Hop::Abandoned); // goes nowhere
/// assert_eq!(*recorder.0.lock().unwrap(), vec![(chat, Hop::Acquired)]);
/// ```
#[derive(Clone, Default)]
pub struct Timeline(Option<Arc<dyn TimelineSink>>);

impl Timeline {
    /// A timeline reporting to `sink`.
    pub fn new(sink: Arc<dyn TimelineSink>) -> Self {
        Self(Some(sink))
    }

    /// Whether a sink is installed (the acquisition loop decodes hints only
    /// then).
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// Reports `hop` of `chat_id` now, when a sink is installed.
    pub fn hop(&self, chat_id: Uuid, hop: Hop) {
        if let Some(sink) = &self.0 {
            sink.hop(chat_id, hop, Instant::now());
        }
    }
}

impl std::fmt::Debug for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_on() {
            "Timeline(on)"
        } else {
            "Timeline(off)"
        })
    }
}
