//! One model call streamed into the message part buffer
//! (`spec/chatd-architecture.md`, "Generation goroutine": parts are added
//! "in real time", one episode per generation attempt, closed when the
//! attempt is finished; "Message part buffer").
//!
//! Adding parts is best effort: a full or closed episode drops them. A
//! prompt far over the model's context window is refused before the call.

use crate::timeline::{Hop, Timeline};
use std::collections::HashMap;
use std::sync::Arc;

use chatd_core::{ChatRole, Episode, PartDelta};
use chatd_llm::{ModelRequest, Provider, ProviderError, ResponseBuilder, StreamEvent};
use futures::StreamExt;

use super::plan::ModelCall;
use crate::part_buffer::PartBuffer;

/// The episode of one generation attempt, open from [`OpenEpisode::create`]
/// until it is dropped: every exit of the attempt closes it, so subscribers
/// end after its last part.
pub(super) struct OpenEpisode<'a> {
    parts: &'a PartBuffer,
    /// The buffer's key of the episode.
    pub(super) episode: Episode,
}

impl<'a> OpenEpisode<'a> {
    /// Opens `episode`; one created before (by an earlier task of the same
    /// attempt) stays as it is, and the parts of this attempt are dropped.
    pub(super) fn create(parts: &'a PartBuffer, episode: Episode) -> Self {
        if let Err(err) = parts.create_episode(episode) {
            tracing::debug!(chat_id = %episode.chat_id, error = %err, "episode exists; parts of this attempt are dropped");
        }
        Self { parts, episode }
    }

    /// Adds one part (best effort: errors drop it).
    pub(super) fn add(&self, role: ChatRole, part: PartDelta) {
        let _ = self.parts.add_part(self.episode, role, part);
    }
}

impl Drop for OpenEpisode<'_> {
    fn drop(&mut self) {
        self.parts.close_episode(self.episode);
    }
}

/// Streams one model call into the part buffer and accumulates it.
///
/// # Errors
/// The provider's error, or a retryable `generic` one when the stream ended
/// without finishing.
pub(super) async fn stream_response(
    call: &ModelCall<Arc<dyn Provider>>,
    episode: &OpenEpisode<'_>,
    timeline: &Timeline,
) -> Result<ResponseBuilder, ProviderError> {
    let add = |part: PartDelta| episode.add(ChatRole::Assistant, part);
    if let Some(at_least) = prompt_clearly_exceeds(&call.request, call.context_limit) {
        // A server asked for more than its window may answer with nothing at
        // all (llama.cpp closes the stream), which looks retryable; fail at
        // once instead of retrying for minutes.
        return Err(ProviderError::new(
            chatd_llm::ErrorKind::ContextLength,
            format!(
                "the conversation needs at least {at_least} tokens, more than the model's \
                 context of {} tokens",
                call.context_limit
            ),
            call.provider.name(),
        )
        .with_retryable(false));
    }
    let mut stream = call.provider.stream(&call.request).await?;
    let mut response = ResponseBuilder::new();
    let mut calls: HashMap<usize, (String, String)> = HashMap::new();
    let mut first = true;
    while let Some(event) = stream.next().await {
        let event = event?;
        if std::mem::take(&mut first) {
            timeline.hop(episode.episode.chat_id, Hop::FirstPart);
        }
        response.push(&event);
        match event {
            StreamEvent::TextDelta(text) => add(PartDelta::Text { text }),
            StreamEvent::ReasoningDelta(text) => add(PartDelta::Reasoning { text }),
            StreamEvent::ToolCallStart { index, id, name } => {
                add(PartDelta::ToolCall {
                    tool_call_id: id.clone(),
                    tool_name: name.clone(),
                    args_delta: String::new(),
                });
                calls.insert(index, (id, name));
            }
            StreamEvent::ToolCallDelta { index, args_delta } => {
                if let Some((id, name)) = calls.get(&index) {
                    add(PartDelta::ToolCall {
                        tool_call_id: id.clone(),
                        tool_name: name.clone(),
                        args_delta,
                    });
                }
            }
            StreamEvent::Citation(citation) => add(PartDelta::Citation(citation)),
            StreamEvent::ProviderToolCall { id, name, input } => add(PartDelta::ProviderToolCall {
                tool_call_id: id,
                tool_name: name,
                input,
            }),
            StreamEvent::ProviderToolResult {
                tool_call_id,
                tool_name,
                result,
                is_error,
            } => add(PartDelta::ProviderToolResult {
                tool_call_id,
                tool_name,
                result,
                is_error,
            }),
            StreamEvent::Finish { .. } => break,
            _ => {}
        }
    }
    if !response.is_finished() {
        return Err(ProviderError::new(
            chatd_llm::ErrorKind::Generic,
            "the stream ended without a finish event",
            call.provider.name(),
        ));
    }
    Ok(response)
}

/// Bytes of serialized message content per token in
/// [`prompt_clearly_exceeds`]'s lower bound. Real tokenizers average 3 to 5
/// bytes per token on text and code; 8 keeps the bound below the true count
/// for anything but pathological input.
const MAX_BYTES_PER_TOKEN: usize = 8;

/// `Some(tokens)`, a lower bound on the prompt's tokens, when that bound
/// alone exceeds `context_limit` (tokens; `<= 0`: unknown, never exceeds).
/// A prompt that passes may still be too long: the provider decides then.
fn prompt_clearly_exceeds(request: &ModelRequest, context_limit: i64) -> Option<usize> {
    let limit = usize::try_from(context_limit).ok().filter(|l| *l > 0)?;
    // Counted as it is written: the provider serializes the prompt again,
    // so this one is not kept.
    let mut bytes = ByteCount(0);
    for message in &request.messages {
        let _ = serde_json::to_writer(&mut bytes, &message.parts);
    }
    let at_least = bytes.0 / MAX_BYTES_PER_TOKEN;
    (at_least > limit).then_some(at_least)
}

/// An [`std::io::Write`] that only counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chatd_core::MessagePart;
    use chatd_llm::RequestMessage;

    use super::*;

    #[test]
    fn only_a_prompt_far_over_the_context_is_refused_before_the_call() {
        let request = |text: &str| ModelRequest {
            model: "m".into(),
            messages: vec![RequestMessage {
                role: ChatRole::User,
                parts: vec![MessagePart::text(text)],
            }],
            tools: Vec::new(),
            max_output_tokens: None,
            temperature: None,
            reasoning_effort: None,
            provider_tools: Vec::new(),
            files: Default::default(),
        };
        // 250 KB of text against an 8192-token window: refused.
        let huge = "word ".repeat(50_000);
        let at_least = super::prompt_clearly_exceeds(&request(&huge), 8192).unwrap();
        assert!((31_000..=31_300).contains(&at_least), "{at_least}");
        // 40 KB (about 10k real tokens) is left to the provider to judge.
        assert_eq!(
            super::prompt_clearly_exceeds(&request(&"word ".repeat(8_000)), 8192),
            None
        );
        // An unknown context never refuses.
        assert_eq!(super::prompt_clearly_exceeds(&request(&huge), 0), None);
    }
}
