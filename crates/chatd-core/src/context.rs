//! The model context of a chat and its size (API.md "Context management
//! (compaction, context accounting)"; `spec/durable-agent-loop.md`,
//! "Context accounting and compaction").
//!
//! A chat's history is never rewritten by compaction: a compaction inserts a
//! model-only *summary boundary* (a `compressed` row whose
//! `compacted_through_id` names the last message it covers), and a
//! clear-context inserts a client-only *clear boundary* (a `compressed` row
//! of visibility `user`). The model context is derived from the rows:
//!
//! - no boundary: every row the model sees, in id order;
//! - the newest boundary is a summary: the leading system instructions
//!   (system rows up to the covered id), then the summary, then every row
//!   after the covered id (the verbatim tail and what came after it);
//! - the newest boundary is a clear marker: only the rows after it.
//!
//! Sizes are in tokens. Every message stores an estimate made once, when it
//! is committed ([`estimate_tokens`]); the usage a provider reports for a
//! call replaces the estimate of everything that call saw
//! ([`context_usage`]).

use crate::message::{ChatRole, MessagePart, Visibility};

/// Bytes of serialized content per estimated token. Real tokenizers average
/// 3.5 to 5 bytes per token on English text and code; 4 errs on the side of
/// counting too many, so a threshold is reached early rather than late.
pub const BYTES_PER_TOKEN: usize = 4;

/// The name of the visible tool call a compaction leaves in the history
/// (API.md "Context management"): the marker clients show. It is not an
/// answer of the model, so it cannot be regenerated (API.md "Branches,
/// regenerate and fork").
pub const COMPACTION_TOOL: &str = "chatd_compact";

/// Tokens added per message for its role and framing.
pub const MESSAGE_OVERHEAD_TOKENS: i64 = 4;

/// Tokens counted for a file part (its placeholder or image input).
pub const FILE_PART_TOKENS: i64 = 64;

/// Bounds of the calibration ratio (reported prompt tokens over their
/// estimate) applied to messages a provider has not counted yet.
pub const CALIBRATION_BOUNDS: (f64, f64) = (0.5, 3.0);

/// The estimated size of one message with `parts`, in tokens: its content's
/// bytes over [`BYTES_PER_TOKEN`] (rounded up) plus
/// [`MESSAGE_OVERHEAD_TOKENS`]; file parts count [`FILE_PART_TOKENS`].
///
/// ```
/// use chatd_core::{MessagePart, context::estimate_tokens};
/// assert_eq!(estimate_tokens(&[MessagePart::text("12345678")]), 2 + 4);
/// assert_eq!(estimate_tokens(&[]), 4);
/// ```
pub fn estimate_tokens(parts: &[MessagePart]) -> i64 {
    let mut bytes = 0usize;
    let mut files = 0i64;
    for part in parts {
        match part {
            // Citations are not counted: Anthropic does not bill a
            // citation's url, title and cited text.
            MessagePart::Text { text, .. } | MessagePart::Reasoning { text, .. } => {
                bytes += text.len()
            }
            MessagePart::ToolCall {
                tool_name, args, ..
            } => bytes += tool_name.len() + args.len() + 16,
            MessagePart::ToolResult {
                tool_name, result, ..
            }
            | MessagePart::ProviderToolResult {
                tool_name, result, ..
            } => bytes += tool_name.len() + result.to_string().len() + 16,
            MessagePart::ProviderToolCall {
                tool_name, input, ..
            } => bytes += tool_name.len() + input.to_string().len() + 16,
            MessagePart::File { .. } => files += 1,
            // Client-only: the model never reads an approval.
            MessagePart::ContextCleared | MessagePart::ToolApproval { .. } => {}
        }
    }
    let tokens = bytes.div_ceil(BYTES_PER_TOKEN);
    i64::try_from(tokens).unwrap_or(i64::MAX / 2)
        + files * FILE_PART_TOKENS
        + MESSAGE_OVERHEAD_TOKENS
}

/// What the context rules read of one stored, non-deleted message: no
/// content, so that sizes are computed without reading message bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextEntry {
    /// Message id (ids grow with commit order).
    pub id: i64,
    /// Role.
    pub role: ChatRole,
    /// Who sees the message.
    pub visibility: Visibility,
    /// A boundary row (summary or clear marker).
    pub compressed: bool,
    /// On a boundary: the last message id it covers (`None` on rows written
    /// before this column existed: everything before the row).
    pub compacted_through_id: Option<i64>,
    /// The stored size estimate, in tokens.
    pub token_estimate: i64,
    /// On an assistant answer: the prompt and output tokens the provider
    /// reported for the call that produced it.
    pub usage: Option<(i64, i64)>,
}

impl ContextEntry {
    /// The last id a boundary covers.
    pub fn covered_through(&self) -> i64 {
        self.compacted_through_id.unwrap_or(self.id - 1)
    }

    /// A clear-context marker (a boundary clients see and the model does not).
    pub fn is_clear_marker(&self) -> bool {
        self.compressed && self.visibility == Visibility::User
    }
}

/// The model context of `entries` (non-deleted rows of one chat, in id
/// order; the rows before the newest boundary's coverage other than leading
/// system rows may be left out): indices into `entries`, in the order the
/// model reads them. See the module doc for the rules.
pub fn model_context(entries: &[ContextEntry]) -> Vec<usize> {
    let sees = |e: &ContextEntry| e.visibility != Visibility::User && !e.compressed;
    let Some(b) = entries.iter().rposition(|e| e.compressed) else {
        return (0..entries.len()).filter(|&i| sees(&entries[i])).collect();
    };
    let boundary = &entries[b];
    let covered = boundary.covered_through();
    let after = (0..entries.len()).filter(|&i| entries[i].id > covered && sees(&entries[i]));
    if boundary.is_clear_marker() {
        return after.filter(|&i| entries[i].id > boundary.id).collect();
    }
    let first_other = entries
        .iter()
        .find(|e| e.role != ChatRole::System)
        .map_or(i64::MAX, |e| e.id);
    let mut order: Vec<usize> = (0..entries.len())
        .filter(|&i| {
            let e = &entries[i];
            e.id <= covered && e.id < first_other && e.role == ChatRole::System && sees(e)
        })
        .collect();
    order.push(b);
    order.extend(after);
    order
}

/// The size of a model context, in tokens (API.md `Chat.context.tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextUsage {
    /// What the next model call would send.
    pub tokens: i64,
    /// Some of it is an estimate (no reported usage covers it all).
    pub estimated: bool,
    /// A provider's reported usage is part of it (its prompt covered the
    /// tools offered too).
    pub anchored: bool,
}

/// The size of the context `ctx` (entries in model order, as
/// [`model_context`] returns them): the prompt and output tokens the
/// provider reported for the newest answer made after the newest boundary,
/// plus the estimates of what came after that answer, scaled by that call's
/// calibration (its reported prompt over the estimate of what it saw,
/// within [`CALIBRATION_BOUNDS`]); without such an answer, the sum of the
/// estimates.
///
/// ```
/// use chatd_core::{ChatRole, Visibility, context::{ContextEntry, context_usage}};
/// let entry = |id, role, usage| ContextEntry {
///     id, role, visibility: Visibility::Both, compressed: false,
///     compacted_through_id: None, token_estimate: 10, usage,
/// };
/// let user = entry(1, ChatRole::User, None);
/// let answer = entry(2, ChatRole::Assistant, Some((20, 5)));
/// let next = entry(3, ChatRole::User, None);
/// // Reported 20 prompt tokens for an estimate of 10: later estimates count double.
/// let usage = context_usage(&[&user, &answer, &next]);
/// assert_eq!((usage.tokens, usage.estimated), (20 + 5 + 20, true));
/// ```
pub fn context_usage(ctx: &[&ContextEntry]) -> ContextUsage {
    let boundary = ctx
        .iter()
        .filter(|e| e.compressed)
        .map(|e| e.id)
        .max()
        .unwrap_or(0);
    let anchor = ctx
        .iter()
        .rposition(|e| e.role == ChatRole::Assistant && e.usage.is_some() && e.id > boundary);
    let Some(a) = anchor else {
        return ContextUsage {
            tokens: ctx.iter().map(|e| e.token_estimate).sum(),
            estimated: true,
            anchored: false,
        };
    };
    let (prompt, output) = ctx[a].usage.unwrap_or_default();
    let seen: i64 = ctx[..a].iter().map(|e| e.token_estimate).sum();
    let ratio = if seen > 0 && prompt > 0 {
        (prompt as f64 / seen as f64).clamp(CALIBRATION_BOUNDS.0, CALIBRATION_BOUNDS.1)
    } else {
        1.0
    };
    let later: i64 = ctx[a + 1..].iter().map(|e| e.token_estimate).sum();
    ContextUsage {
        tokens: prompt + output + (later as f64 * ratio).ceil() as i64,
        estimated: a + 1 < ctx.len(),
        anchored: true,
    }
}

/// What a compaction summary boundary's text starts with (the summary
/// follows it).
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier conversation]\n";

/// Estimated tokens of the shortest summary text worth keeping (about 128
/// bytes: two sentences).
pub const MIN_SUMMARY_TEXT_TOKENS: i64 = 32;

/// Share of the window the verbatim tail of a compaction may take
/// (percent).
pub const COMPACTION_TAIL_PERCENT: i64 = 40;

/// Visible messages an overflow compaction keeps.
pub const OVERFLOW_TAIL: usize = 4;

/// The estimated size, in tokens, of the smallest summary boundary worth
/// committing: its [`SUMMARY_PREFIX`] and message framing plus
/// [`MIN_SUMMARY_TEXT_TOKENS`]. A compaction replacing no more than this
/// cannot make the model context smaller (API.md "Context management": a
/// summary must be smaller than what it replaces).
///
/// ```
/// use chatd_core::context::{min_summary_tokens, MIN_SUMMARY_TEXT_TOKENS};
/// // 38 bytes of prefix (10 tokens) and 4 of framing.
/// assert_eq!(min_summary_tokens(), 10 + 4 + MIN_SUMMARY_TEXT_TOKENS);
/// ```
pub fn min_summary_tokens() -> i64 {
    estimate_tokens(&[MessagePart::text(SUMMARY_PREFIX)]) + MIN_SUMMARY_TEXT_TOKENS
}

/// Why a compaction runs; it decides the verbatim tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionMode {
    /// `POST /compact`: the tail is at most half of what there is.
    Manual,
    /// The prompt reached the threshold or no longer fits.
    Auto,
    /// The provider refused the prompt as too long: a short tail
    /// ([`OVERFLOW_TAIL`]).
    Overflow,
}

/// What one compaction replaces: indices into the model context it was
/// selected from ([`select_compaction`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompactionSelection {
    /// The leading system rows, kept.
    pub leading: Vec<usize>,
    /// The current summary, folded into the new one.
    pub previous: Option<usize>,
    /// The rows summarized, in model order.
    pub summarized: Vec<usize>,
    /// The rows kept verbatim, in model order.
    pub tail: Vec<usize>,
}

impl CompactionSelection {
    /// Estimated tokens of what the summary replaces (the previous summary
    /// and the summarized rows) in `ctx`, the context it was selected from:
    /// what the model reads of them now.
    pub fn tokens_before(&self, ctx: &[&ContextEntry]) -> i64 {
        self.previous
            .iter()
            .chain(&self.summarized)
            .map(|&i| ctx[i].token_estimate)
            .sum()
    }

    /// Whether a summary could be smaller than what it replaces in `ctx`:
    /// [`Self::tokens_before`] exceeds [`min_summary_tokens`]. Nothing else
    /// of a compaction reaches the model (its visible record is
    /// client-only), so this compares like with like.
    pub fn can_shrink(&self, ctx: &[&ContextEntry]) -> bool {
        self.tokens_before(ctx) > min_summary_tokens()
    }
}

/// Chooses what a compaction replaces in `ctx` (the model context, in model
/// order as [`model_context`] gives it: leading system rows, the current
/// summary if any, then the rest). `keep` is the model config's
/// `compact_recent_messages`, `limit` the window in tokens. Everything after
/// the leading system rows (and the previous summary, folded in) is
/// summarized except a verbatim tail of `keep` rows ([`CompactionMode`]
/// bounds it: at most half of the rows for a manual compaction,
/// [`OVERFLOW_TAIL`] for an overflow), at most
/// [`COMPACTION_TAIL_PERCENT`] of the window (one row at least), that never
/// starts at a tool result (an assistant tool call is never separated from
/// its results). `None` when nothing would be summarized.
pub fn select_compaction(
    ctx: &[&ContextEntry],
    keep: usize,
    limit: i64,
    mode: CompactionMode,
) -> Option<CompactionSelection> {
    let mut i = 0;
    while i < ctx.len() && ctx[i].role == ChatRole::System && !ctx[i].compressed {
        i += 1;
    }
    let leading: Vec<usize> = (0..i).collect();
    let previous =
        (i < ctx.len() && ctx[i].compressed && ctx[i].visibility == Visibility::Model).then_some(i);
    let rest: Vec<usize> = (i..ctx.len())
        .filter(|&j| !ctx[j].compressed && ctx[j].visibility != Visibility::User)
        .collect();
    if rest.is_empty() {
        return None;
    }
    let keep = match mode {
        CompactionMode::Manual => keep.min(rest.len() / 2),
        CompactionMode::Auto => keep.min(rest.len()),
        CompactionMode::Overflow => keep.min(OVERFLOW_TAIL).min(rest.len()),
    };
    let mut start = rest.len() - keep;
    // The tail takes at most its share of the window (one message at least,
    // unless a manual compaction keeps none).
    let budget = limit.max(0) * COMPACTION_TAIL_PERCENT / 100;
    let size = |from: usize| -> i64 { rest[from..].iter().map(|&j| ctx[j].token_estimate).sum() };
    while start + 1 < rest.len() && size(start) > budget {
        start += 1;
    }
    // Never between an assistant tool call and its results: the tail starts
    // at a message that is not a tool result, preferably earlier (a longer
    // tail) unless that leaves nothing to summarize.
    let is_result = |s: usize| ctx[rest[s]].role == ChatRole::Tool;
    if start < rest.len() && is_result(start) {
        let back = (1..start).rev().find(|&s| !is_result(s));
        let forward = (start..rest.len())
            .find(|&s| !is_result(s))
            .unwrap_or(rest.len());
        start = back.unwrap_or(forward);
    }
    if start == 0 {
        return None;
    }
    Some(CompactionSelection {
        leading,
        previous,
        summarized: rest[..start].to_vec(),
        tail: rest[start..].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: i64, role: ChatRole) -> ContextEntry {
        ContextEntry {
            id,
            role,
            visibility: Visibility::Both,
            compressed: false,
            compacted_through_id: None,
            token_estimate: 10,
            usage: None,
        }
    }

    fn summary(id: i64, through: i64) -> ContextEntry {
        ContextEntry {
            compressed: true,
            visibility: Visibility::Model,
            compacted_through_id: Some(through),
            ..entry(id, ChatRole::User)
        }
    }

    fn ids(entries: &[ContextEntry]) -> Vec<i64> {
        model_context(entries)
            .into_iter()
            .map(|i| entries[i].id)
            .collect()
    }

    #[test]
    fn without_a_boundary_the_model_sees_every_row_but_client_only_ones() {
        let mut hidden = entry(3, ChatRole::Assistant);
        hidden.visibility = Visibility::User;
        let rows = [entry(1, ChatRole::System), entry(2, ChatRole::User), hidden];
        assert_eq!(ids(&rows), vec![1, 2]);
    }

    #[test]
    fn a_summary_keeps_leading_system_rows_then_itself_then_the_tail() {
        // 1 system, 2..=5 summarized, 6..=7 the tail, 8 the summary, 9 and 10
        // the visible compaction call and result, 11 a later message.
        let mut rows = vec![entry(1, ChatRole::System)];
        for id in 2..=7 {
            rows.push(entry(id, ChatRole::User));
        }
        rows.push(summary(8, 5));
        for id in [9, 10] {
            let mut visible = entry(id, ChatRole::Assistant);
            visible.visibility = Visibility::User;
            rows.push(visible);
        }
        rows.push(entry(11, ChatRole::User));
        assert_eq!(ids(&rows), vec![1, 8, 6, 7, 11]);
        // A later system row in the summarized part is not leading.
        rows.insert(2, entry(3, ChatRole::System));
        rows.remove(3);
        assert_eq!(ids(&rows), vec![1, 8, 6, 7, 11]);
    }

    #[test]
    fn only_the_newest_summary_counts_and_an_old_style_one_covers_everything_before_it() {
        let mut old = summary(3, 0);
        old.compacted_through_id = None;
        let rows = [
            entry(1, ChatRole::User),
            entry(2, ChatRole::Assistant),
            old,
            entry(4, ChatRole::User),
        ];
        assert_eq!(ids(&rows), vec![3, 4]);
        let rows = [
            summary(2, 1),
            entry(3, ChatRole::User),
            summary(5, 3),
            entry(4, ChatRole::User),
            entry(6, ChatRole::User),
        ];
        assert_eq!(ids(&rows), vec![5, 4, 6]);
    }

    #[test]
    fn after_a_clear_marker_the_model_sees_nothing_before_it() {
        let marker = ContextEntry {
            compressed: true,
            visibility: Visibility::User,
            compacted_through_id: Some(3),
            ..entry(3, ChatRole::System)
        };
        let rows = [
            entry(1, ChatRole::System),
            entry(2, ChatRole::User),
            marker,
            entry(4, ChatRole::User),
        ];
        assert_eq!(ids(&rows), vec![4]);
    }

    #[test]
    fn usage_before_the_newest_summary_is_not_an_anchor() {
        let mut answer = entry(2, ChatRole::Assistant);
        answer.usage = Some((5000, 100));
        let rows = [entry(1, ChatRole::User), answer, summary(3, 0)];
        let ctx: Vec<&ContextEntry> = model_context(&rows).into_iter().map(|i| &rows[i]).collect();
        let usage = context_usage(&ctx);
        assert_eq!(
            (usage.tokens, usage.estimated, usage.anchored),
            (30, true, false)
        );
    }

    #[test]
    fn calibration_is_bounded_and_a_fresh_answer_is_exact() {
        let mut answer = entry(2, ChatRole::Assistant);
        answer.usage = Some((1000, 7));
        let (user, next) = (entry(1, ChatRole::User), entry(3, ChatRole::User));
        // Ratio 100 is clamped to 3.
        assert_eq!(context_usage(&[&user, &answer, &next]).tokens, 1007 + 30);
        let exact = context_usage(&[&user, &answer]);
        assert_eq!((exact.tokens, exact.estimated), (1007, false));
    }

    #[test]
    fn a_compaction_shrinks_only_what_is_larger_than_the_smallest_summary() {
        // A system row and four short rows: a manual compaction summarizes
        // two of 10 tokens, less than any summary.
        let mut rows = vec![entry(1, ChatRole::System)];
        for id in 2..=5 {
            rows.push(entry(id, ChatRole::User));
        }
        let ctx: Vec<&ContextEntry> = rows.iter().collect();
        let s = select_compaction(&ctx, 12, 100_000, CompactionMode::Manual).unwrap();
        assert_eq!(
            (s.leading.clone(), s.summarized.clone(), s.tail.clone()),
            (vec![0], vec![1, 2], vec![3, 4])
        );
        assert_eq!(s.tokens_before(&ctx), 20);
        assert!(!s.can_shrink(&ctx));
        // The same rows at 40 tokens each: 80 tokens replaced.
        for r in &mut rows[1..] {
            r.token_estimate = 40;
        }
        let ctx: Vec<&ContextEntry> = rows.iter().collect();
        let s = select_compaction(&ctx, 12, 100_000, CompactionMode::Manual).unwrap();
        assert!(s.can_shrink(&ctx), "{} tokens", s.tokens_before(&ctx));
        // Everything in the tail: nothing to compact.
        assert!(select_compaction(&ctx, 12, 100_000, CompactionMode::Auto).is_none());
    }

    #[test]
    fn estimates_count_bytes_of_every_kind_of_part() {
        let call = MessagePart::ToolCall {
            tool_call_id: "c".into(),
            tool_name: "search".into(),
            args: "x".repeat(100),
        };
        assert_eq!(
            estimate_tokens(&[call]),
            (6 + 100 + 16usize).div_ceil(4) as i64 + 4
        );
        let file = MessagePart::File {
            file_id: uuid::Uuid::nil(),
            media_type: "image/png".into(),
            name: None,
        };
        assert_eq!(estimate_tokens(&[file]), FILE_PART_TOKENS + 4);
    }
}
