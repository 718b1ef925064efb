//! Fuzz (property) tests of the streaming decoders (issue 14): whatever a
//! provider sends, decoding never panics, always ends, buffers at most
//! [`MAX_EVENT_BYTES`] of an event, keeps the stream invariants of the
//! crate docs, and classifies what went wrong; a body that is not a
//! response never decodes to a finished one.
//!
//! - The SSE framing, through [`chatd_llm::sse::decode`] with a decoder that
//!   records what it is fed, against a reference parser written from the
//!   SSE rules: arbitrary bytes and SSE-like token soup, in arbitrary pieces.
//! - Both decoders (OpenAI Chat Completions, Anthropic Messages) on
//!   arbitrary bytes, and on every transcript mutated: truncated at any
//!   byte, lines dropped, duplicated and swapped, JSON values replaced by
//!   other types, huge or negative numbers, long strings and NULs, raw NUL
//!   and invalid UTF-8 bytes, injected `event:`/`id:`/`retry:`/comment
//!   lines, mixed CR/LF/CRLF line ends, and a 1 MiB line without an end.
//! - Tool-call indexes anywhere in `u64` (the decoders key calls by index in
//!   maps, never a `Vec` indexed by the provider's number).
//! - The event size limit at its boundary and against endless bodies.
//!
//! Decoding is synchronous (`block_on`), so a hang would hang the test: a
//! property that completes is the termination check; nothing is timed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use chatd_llm::sse::{MAX_EVENT_BYTES, SseDecoder};
use chatd_llm::{ErrorKind, FinishReason, ProviderError, ResponseBuilder, StreamEvent};
use futures::StreamExt as _;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

use crate::support::{
    Items, decode_anthropic_pieces, decode_pieces, decode_with, read_fixture, split_at,
};

/// A decoder of one provider's wire format.
type Decode = fn(Vec<Vec<u8>>) -> Items;

/// The messages of the errors the driver and the decoders make about what
/// the provider sent (not errors the provider reported): each is a
/// retryable `generic` error without a status code.
const OWN_MESSAGES: &[&str] = &[
    "the provider closed the stream without sending anything",
    "the stream ended before the response was complete",
    "the provider sent a malformed event stream",
    "the provider sent an invalid stream chunk",
    "the provider sent an invalid stream event",
    "the provider sent a content block event without an index",
    "the stream ended ([DONE]) without a finish reason",
    "the provider sent tool call ",
];

/// The message of the error for an event over [`MAX_EVENT_BYTES`].
const TOO_LARGE: &str = "the provider sent a server-sent event larger than 16 MiB";

// ---------------------------------------------------------------------------
// Checks.

/// The crate's stream invariants, on any input: one `Err` or `Finish`, last;
/// tool-call events in order per index; no empty deltas; no NUL anywhere;
/// `Usage` only right before `Finish`.
fn check_shape(items: &Items) {
    let (last, init) = items
        .split_last()
        .expect("a stream yields at least one item");
    assert!(
        matches!(last, Err(_) | Ok(StreamEvent::Finish { .. })),
        "the stream must end with Finish or an error, not {last:?}"
    );
    let mut started = BTreeSet::new();
    let mut ended = BTreeSet::new();
    for (position, item) in init.iter().enumerate() {
        let event = item
            .as_ref()
            .unwrap_or_else(|e| panic!("an error must be the last item: {e:?}"));
        match event {
            StreamEvent::TextDelta(t)
            | StreamEvent::ReasoningDelta(t)
            | StreamEvent::ReasoningSignature(t) => {
                assert!(!t.is_empty(), "empty delta");
                assert!(!t.contains('\0'), "NUL in {t:?}");
            }
            StreamEvent::ToolCallStart { index, id, name } => {
                assert!(started.insert(*index), "call {index} started twice");
                assert!(!id.contains('\0') && !name.contains('\0'));
            }
            StreamEvent::ToolCallDelta { index, args_delta } => {
                assert!(
                    started.contains(index) && !ended.contains(index),
                    "delta outside call {index}"
                );
                assert!(!args_delta.is_empty() && !args_delta.contains('\0'));
            }
            StreamEvent::ToolCallEnd { index } => {
                assert!(
                    started.contains(index) && ended.insert(*index),
                    "bad end of {index}"
                );
            }
            StreamEvent::Usage(_) => assert!(
                matches!(items[position + 1], Ok(StreamEvent::Finish { .. })),
                "Usage must come right before Finish"
            ),
            StreamEvent::Finish { .. } => panic!("Finish before the end"),
            other => panic!("unexpected event {other:?}"),
        }
    }
}

/// `err` is classified as what it is: an error about what the provider sent
/// is a retryable `generic` one (non-retryable when the event was over the
/// size limit); anything else is an error the provider reported, so
/// `body` must contain one.
fn check_error(err: &ProviderError, body: &[u8]) {
    assert_eq!(err.provider, "test");
    if err.message == TOO_LARGE {
        assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, false));
    } else if OWN_MESSAGES.iter().any(|m| err.message.starts_with(m)) {
        assert_eq!(
            (err.kind, err.retryable, err.status_code),
            (ErrorKind::Generic, true, None),
            "{err:?}"
        );
    } else {
        assert!(
            contains(body, b"error"),
            "an error the input did not report: {err:?}"
        );
    }
}

/// Every check of a decoded stream: its shape, its error, and that the
/// events accumulate into a response exactly when it finished.
fn check_items(items: &Items, body: &[u8]) {
    check_shape(items);
    let mut builder = ResponseBuilder::new();
    for event in items.iter().flatten() {
        builder.push(event);
    }
    match items.last() {
        Some(Err(err)) => {
            check_error(err, body);
            assert!(builder.into_response().is_none());
        }
        _ => {
            let starts = items
                .iter()
                .flatten()
                .filter(|e| matches!(e, StreamEvent::ToolCallStart { .. }))
                .count();
            let response = builder.into_response().expect("a finished response");
            assert_eq!(response.tool_calls.len(), starts);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

// ---------------------------------------------------------------------------
// The SSE framing against a reference parser.

/// A decoder that records every `(name, data)` it is fed and completes the
/// response at end of input, so the items show what the framing did.
struct Recorder {
    seen: Arc<Mutex<Vec<(String, String)>>>,
}

impl SseDecoder for Recorder {
    fn provider(&self) -> &str {
        "test"
    }

    fn on_event(&mut self, name: &str, data: &str) -> Result<Vec<StreamEvent>, ProviderError> {
        self.seen
            .lock()
            .unwrap()
            .push((name.to_owned(), data.to_owned()));
        Ok(Vec::new())
    }

    fn on_end_of_input(&mut self) -> Option<Result<Vec<StreamEvent>, ProviderError>> {
        Some(Ok(vec![StreamEvent::Finish {
            reason: FinishReason::Stop,
        }]))
    }
}

/// The events the framing fed to its decoder, and the items it yielded.
fn frame(pieces: Vec<Vec<u8>>) -> (Vec<(String, String)>, Items) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let items = decode_with(pieces, Recorder { seen: seen.clone() });
    let seen = seen.lock().unwrap().clone();
    (seen, items)
}

/// The HTML standard's event-stream interpretation of a whole body, written
/// as plainly as possible: the events it dispatches, and whether it stopped
/// at a complete line that is not UTF-8. An unterminated last line and
/// event are discarded.
fn reference_events(body: &[u8]) -> (Vec<(String, String)>, bool) {
    let mut rest = body.strip_prefix("\u{feff}".as_bytes()).unwrap_or(body);
    let (mut events, mut name, mut data) = (Vec::new(), String::new(), String::new());
    while let Some(end) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        let line = &rest[..end];
        let skip = if rest[end..].starts_with(b"\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                let name = if name.is_empty() {
                    "message".into()
                } else {
                    name.clone()
                };
                events.push((name, data.clone()));
            }
            name.clear();
            data.clear();
            continue;
        }
        let Ok(line) = std::str::from_utf8(line) else {
            return (events, true);
        };
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.find(':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match field {
            "event" => name = value.to_owned(),
            "data" => {
                data.push_str(value);
                data.push('\n');
            }
            _ => {}
        }
    }
    (events, false)
}

/// Checks the framing of `body` in `pieces` against the reference.
fn check_framing(body: &[u8], cuts: &[usize]) {
    let (want, invalid_utf8) = reference_events(body);
    let (seen, items) = frame(split_at(body, cuts));
    assert_eq!(seen, want);
    match items.as_slice() {
        [Err(err)] if invalid_utf8 => {
            assert_eq!(err.message, "the provider sent a malformed event stream");
            assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
        }
        [Ok(StreamEvent::Finish { .. })] if !invalid_utf8 => {}
        other => panic!("invalid UTF-8: {invalid_utf8}, items {other:?}"),
    }
}

/// Bytes made of SSE's own tokens (field names, colons, every line end, a
/// BOM, multi-byte characters, NUL, now and then an invalid byte) and short
/// words, so that random input is mostly well-formed enough to get past the
/// first line.
fn sse_soup() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        10 => prop_oneof![
            Just(&b"data:"[..]),
            Just(&b"data: "[..]),
            Just(&b"event: "[..]),
            Just(&b"event"[..]),
            Just(&b"id: 7"[..]),
            Just(&b"retry: 10"[..]),
            Just(&b":"[..]),
            Just(&b" "[..]),
            Just(&b"\n"[..]),
            Just(&b"\r"[..]),
            Just(&b"\r\n"[..]),
            Just(&b"\n\n"[..]),
            Just("\u{feff}".as_bytes()),
            Just("é€😀".as_bytes()),
            Just(&b"\0"[..]),
        ]
        .prop_map(<[u8]>::to_vec),
        4 => "[a-z{}\":,\\[\\] ]{0,6}".prop_map(String::into_bytes),
        1 => prop_oneof![Just(vec![0xff]), Just(vec![0xc3]), Just(vec![0xe2, 0x82])],
    ];
    vec(token, 0..200).prop_map(|tokens| tokens.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_in_arbitrary_pieces_frame_as_the_reference_parser_does(
        body in vec(any::<u8>(), 0..4096),
        cuts in vec(any::<usize>(), 0..32),
    ) {
        check_framing(&body, &cuts);
    }

    #[test]
    fn sse_token_soup_in_arbitrary_pieces_frames_as_the_reference_parser_does(
        body in sse_soup(),
        cuts in vec(any::<usize>(), 0..32),
    ) {
        check_framing(&body, &cuts);
    }

    #[test]
    fn arbitrary_bytes_never_decode_to_a_response_and_fail_as_malformed(
        body in vec(any::<u8>(), 0..4096),
        cuts in vec(any::<usize>(), 0..32),
    ) {
        for decode in [decode_pieces as Decode, decode_anthropic_pieces] {
            let items = decode(split_at(&body, &cuts));
            check_items(&items, &body);
            let err = items.last().unwrap().as_ref().expect_err("garbage decoded to a response");
            prop_assert!(OWN_MESSAGES.iter().any(|m| err.message.starts_with(m)), "{:?}", err);
        }
    }
}

// ---------------------------------------------------------------------------
// Mutated transcripts.

/// A transcript's file, bytes, decoder and finish markers.
type Transcript = (&'static str, Vec<u8>, Decode, &'static [&'static [u8]]);

/// Every available transcript with its decoder and the bytes that must be
/// in a body that decodes to a finished response (a finish reason, or the
/// end of the message).
fn transcripts() -> Vec<Transcript> {
    const OPENAI_FINISH: &[&[u8]] = &[b"finish_reason"];
    const ANTHROPIC_FINISH: &[&[u8]] = &[b"message_stop", b"stop_reason"];
    let openai = crate::transcripts::all().into_iter().filter_map(|e| {
        read_fixture(e.file).map(|body| (e.file, body, decode_pieces as Decode, OPENAI_FINISH))
    });
    let anthropic = crate::anthropic::all().into_iter().filter_map(|e| {
        crate::anthropic::body(&e).map(|body| {
            let decode = decode_anthropic_pieces as Decode;
            (e.expected.file, body, decode, ANTHROPIC_FINISH)
        })
    });
    openai.chain(anthropic).collect()
}

/// One line of a body: its bytes and its line end (empty for an
/// unterminated last line).
type Line = (Vec<u8>, Vec<u8>);

fn lines(body: &[u8]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(end) = rest.iter().position(|&b| b == b'\r' || b == b'\n') {
        let len = if rest[end..].starts_with(b"\r\n") {
            2
        } else {
            1
        };
        out.push((rest[..end].to_vec(), rest[end..end + len].to_vec()));
        rest = &rest[end + len..];
    }
    if !rest.is_empty() {
        out.push((rest.to_vec(), Vec::new()));
    }
    out
}

/// One change to a transcript. Line numbers and positions are taken modulo
/// what there is.
#[derive(Debug, Clone)]
enum Mutation {
    DropLine(usize),
    DuplicateLine(usize),
    SwapLines(usize, usize),
    /// Replaces the `slot`-th JSON value (depth first) of a `data:` line.
    ReplaceValue {
        line: usize,
        slot: usize,
        with: Value,
    },
    InsertLine(usize, Vec<u8>),
    /// Raw bytes (NUL, invalid UTF-8) inside a line.
    InsertBytes {
        line: usize,
        at: usize,
        bytes: Vec<u8>,
    },
    LineEnd(usize, &'static [u8]),
    Truncate(usize),
}

fn hostile_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!(-1)),
        Just(json!(4_294_967_295_u64)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(json!(1e308)),
        Just(json!(-0.5)),
        Just(json!("")),
        Just(json!("\0a\0")),
        Just(json!("x".repeat(64 * 1024))),
        Just(json!([])),
        Just(json!({})),
        Just(json!([0, "a", null, {"index": -1}])),
        Just(json!({"type": "error", "error": {"type": "overloaded_error"}})),
        any::<String>().prop_map(Value::String),
        any::<i64>().prop_map(Value::from),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let line = prop_oneof![
        Just(b"event: error".to_vec()),
        Just(b"event: message_stop".to_vec()),
        Just(b"event: ping".to_vec()),
        Just(b"event:".to_vec()),
        Just(b"id: 42".to_vec()),
        Just(b"id: \0".to_vec()),
        Just(b"retry: 1000".to_vec()),
        Just(b"retry: -1".to_vec()),
        Just(b": keep-alive".to_vec()),
        Just(b":".to_vec()),
        Just(b"data".to_vec()),
        Just(b"data: [DONE]".to_vec()),
        Just(b"data: {}".to_vec()),
        Just(Vec::new()),
    ];
    let bytes = prop_oneof![
        Just(vec![0]),
        Just(vec![0xff]),
        Just(vec![0xc3]),
        Just(vec![0xed, 0xa0, 0x80]),
        Just(vec![b'\r']),
    ];
    let end = prop_oneof![Just(&b"\n"[..]), Just(&b"\r"[..]), Just(&b"\r\n"[..])];
    prop_oneof![
        1 => any::<usize>().prop_map(Mutation::DropLine),
        1 => any::<usize>().prop_map(Mutation::DuplicateLine),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        3 => (any::<usize>(), any::<usize>(), hostile_value())
            .prop_map(|(line, slot, with)| Mutation::ReplaceValue { line, slot, with }),
        1 => (any::<usize>(), line).prop_map(|(at, line)| Mutation::InsertLine(at, line)),
        1 => (any::<usize>(), any::<usize>(), bytes)
            .prop_map(|(line, at, bytes)| Mutation::InsertBytes { line, at, bytes }),
        1 => (any::<usize>(), end).prop_map(|(line, end)| Mutation::LineEnd(line, end)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// The number of JSON values inside `value` (not counting itself).
fn slots(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(|v| 1 + slots(v)).sum(),
        Value::Object(map) => map.values().map(|v| 1 + slots(v)).sum(),
        _ => 0,
    }
}

/// Replaces the `n`-th value inside `value`, depth first.
fn replace_nth(value: &mut Value, n: &mut usize, with: &Value) -> bool {
    let children: Vec<&mut Value> = match value {
        Value::Array(items) => items.iter_mut().collect(),
        Value::Object(map) => map.values_mut().collect(),
        _ => return false,
    };
    for child in children {
        if *n == 0 {
            *child = with.clone();
            return true;
        }
        *n -= 1;
        if replace_nth(child, n, with) {
            return true;
        }
    }
    false
}

fn apply(body: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut lines = lines(body);
    for mutation in mutations {
        let n = lines.len().max(1);
        match mutation {
            Mutation::DropLine(i) if !lines.is_empty() => {
                lines.remove(i % n);
            }
            Mutation::DuplicateLine(i) if !lines.is_empty() => {
                let line = lines[i % n].clone();
                lines.insert(i % n, line);
            }
            Mutation::SwapLines(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
            Mutation::ReplaceValue { line, slot, with } if !lines.is_empty() => {
                let (bytes, _) = &mut lines[line % n];
                let Some(payload) = bytes.strip_prefix(b"data:") else {
                    continue;
                };
                let Ok(mut value) = serde_json::from_slice::<Value>(payload) else {
                    continue;
                };
                let count = slots(&value);
                if count > 0 && replace_nth(&mut value, &mut (slot % count), with) {
                    *bytes = format!("data: {value}").into_bytes();
                }
            }
            Mutation::InsertLine(at, line) => {
                lines.insert(at % (lines.len() + 1), (line.clone(), b"\n".to_vec()));
            }
            Mutation::InsertBytes { line, at, bytes } if !lines.is_empty() => {
                let (content, _) = &mut lines[line % n];
                let at = at % (content.len() + 1);
                content.splice(at..at, bytes.iter().copied());
            }
            Mutation::LineEnd(i, end) if !lines.is_empty() => {
                lines[i % n].1 = end.to_vec();
            }
            Mutation::Truncate(at) => {
                let mut whole = join(&lines);
                whole.truncate(at % (whole.len() + 1));
                lines = self::lines(&whole);
            }
            _ => {}
        }
    }
    join(&lines)
}

fn join(lines: &[Line]) -> Vec<u8> {
    lines
        .iter()
        .flat_map(|(content, end)| content.iter().chain(end))
        .copied()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mutated_transcripts_decode_to_a_valid_stream_or_a_classified_error(
        which in any::<Index>(),
        mutations in vec(mutation(), 1..8),
        huge_unterminated_line in proptest::bool::weighted(0.1),
        cuts in vec(any::<usize>(), 0..16),
    ) {
        let all = transcripts();
        prop_assume!(!all.is_empty());
        let (file, body, decode, finish_markers) = &all[which.index(all.len())];
        let mut body = apply(body, &mutations);
        if huge_unterminated_line {
            // 1 MiB without a line end: buffered (under the limit), then
            // discarded at end of input with the unterminated event.
            body.extend_from_slice(b"data: {\"choices\":\"");
            body.resize(body.len() + 1024 * 1024, b'x');
        }
        let items = decode(split_at(&body, &cuts));
        check_items(&items, &body);
        if let Some(Ok(StreamEvent::Finish { .. })) = items.last() {
            prop_assert!(
                finish_markers.iter().any(|m| contains(&body, m)),
                "{}: finished without a finish marker", file
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Tool-call indexes.

/// An OpenAI chunk with one tool-call delta.
fn openai_call_chunk(index: &Value, id: &str, name: &str, args: &str) -> String {
    let call = json!({"index": index, "id": id, "function": {"name": name, "arguments": args}});
    format!(
        "data: {}\n\n",
        json!({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    )
}

const OPENAI_FINISH: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";

/// An Anthropic tool-use block at `index`, with `args` in one delta.
fn anthropic_call_block(index: &Value, id: &str, name: &str, args: &str) -> String {
    let start = json!({"type": "content_block_start", "index": index,
        "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}});
    let delta = json!({"type": "content_block_delta", "index": index,
        "delta": {"type": "input_json_delta", "partial_json": args}});
    let stop = json!({"type": "content_block_stop", "index": index});
    format!(
        "event: content_block_start\ndata: {start}\n\nevent: content_block_delta\ndata: {delta}\n\nevent: content_block_stop\ndata: {stop}\n\n"
    )
}

const ANTHROPIC_FINISH: &str = "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

fn tool_call_events(index: usize) -> Vec<Result<StreamEvent, ProviderError>> {
    vec![
        Ok(StreamEvent::ToolCallStart {
            index,
            id: "call_1".into(),
            name: "add".into(),
        }),
        Ok(StreamEvent::ToolCallDelta {
            index,
            args_delta: "{}".into(),
        }),
        Ok(StreamEvent::ToolCallEnd { index }),
        Ok(StreamEvent::Finish {
            reason: FinishReason::ToolCalls,
        }),
    ]
}

#[test]
fn a_tool_call_index_of_u32_or_u64_max_is_kept_as_is_without_allocating_for_it() {
    // A decoder or builder that kept calls in a Vec indexed by the
    // provider's number would try to allocate 4 G (or 2^64) entries here.
    for index in [u64::from(u32::MAX), u64::MAX] {
        let i = usize::try_from(index).unwrap();
        let body = openai_call_chunk(&json!(index), "call_1", "add", "{}") + OPENAI_FINISH;
        let items = decode_pieces(vec![body.into_bytes()]);
        assert_eq!(items, tool_call_events(i), "openai {index}");
        let body = anthropic_call_block(&json!(index), "call_1", "add", "{}") + ANTHROPIC_FINISH;
        let items = decode_anthropic_pieces(vec![body.into_bytes()]);
        assert_eq!(items, tool_call_events(i), "anthropic {index}");
        let mut builder = ResponseBuilder::new();
        items.iter().flatten().for_each(|e| builder.push(e));
        let response = builder.into_response().unwrap();
        assert_eq!(response.tool_calls.len(), 1);
    }
}

#[test]
fn a_negative_fractional_or_textual_tool_call_index_is_a_retryable_invalid_payload_error() {
    for index in [json!(-1), json!(1.5), json!(1e300), json!("0"), json!([0])] {
        let body = openai_call_chunk(&index, "call_1", "add", "{}") + OPENAI_FINISH;
        let items = decode_pieces(vec![body.clone().into_bytes()]);
        let [Err(err)] = items.as_slice() else {
            panic!("openai {index}: {items:?}")
        };
        assert!(
            err.message
                .starts_with("the provider sent an invalid stream chunk")
        );
        assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));

        let body = anthropic_call_block(&index, "call_1", "add", "{}") + ANTHROPIC_FINISH;
        let items = decode_anthropic_pieces(vec![body.into_bytes()]);
        let [Err(err)] = items.as_slice() else {
            panic!("anthropic {index}: {items:?}")
        };
        assert_eq!(
            err.message,
            "the provider sent a content block event without an index"
        );
        assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn tool_calls_at_any_u64_indexes_decode_to_their_own_calls_in_index_order(
        indexes in proptest::collection::btree_set(any::<u64>(), 1..8),
    ) {
        let indexes: Vec<u64> = indexes.into_iter().collect();
        let args = |i: u64| format!("{{\"i\":{i}}}");
        let (mut openai, mut anthropic) = (String::new(), String::new());
        // Highest index first: arrival order is not index order.
        for &index in indexes.iter().rev() {
            let (id, name) = (format!("call_{index}"), format!("tool_{index}"));
            openai += &openai_call_chunk(&json!(index), &id, &name, &args(index));
            anthropic += &anthropic_call_block(&json!(index), &id, &name, &args(index));
        }
        openai += OPENAI_FINISH;
        anthropic += ANTHROPIC_FINISH;
        for (body, decode) in [
            (openai, decode_pieces as Decode),
            (anthropic, decode_anthropic_pieces),
        ] {
            let items = decode(vec![body.clone().into_bytes()]);
            check_items(&items, body.as_bytes());
            let mut builder = ResponseBuilder::new();
            items.iter().flatten().for_each(|e| builder.push(e));
            let response = builder.into_response().expect("a finished response");
            let got: Vec<(String, String)> =
                response.tool_calls.iter().map(|c| (c.id.clone(), c.args.clone())).collect();
            let want: Vec<(String, String)> =
                indexes.iter().map(|&i| (format!("call_{i}"), args(i))).collect();
            prop_assert_eq!(got, want);
        }
    }
}

// ---------------------------------------------------------------------------
// The event size limit, and bodies that never end.

/// An endless body: `head`, then `chunk` forever. The counter says how many
/// bytes the decoder pulled.
fn endless(
    head: &[u8],
    chunk: Vec<u8>,
) -> (
    impl futures::Stream<Item = Result<Vec<u8>, ProviderError>> + Send + 'static,
    Arc<AtomicUsize>,
) {
    let pulled = Arc::new(AtomicUsize::new(0));
    let counter = pulled.clone();
    let stream = futures::stream::iter([head.to_vec()])
        .chain(futures::stream::repeat(chunk))
        .map(move |piece| {
            counter.fetch_add(piece.len(), Ordering::Relaxed);
            Ok(piece)
        });
    (stream, pulled)
}

fn decode_endless(head: &[u8], chunk: Vec<u8>, anthropic: bool) -> (Items, usize) {
    let (stream, pulled) = endless(head, chunk);
    let events = if anthropic {
        chatd_llm::sse::decode(
            stream,
            chatd_llm::anthropic::stream::Decoder::new("test".into()),
        )
    } else {
        chatd_llm::sse::decode(
            stream,
            chatd_llm::openai::stream::Decoder::new("test".into()),
        )
    };
    let items = futures::executor::block_on(events.collect::<Vec<_>>());
    (items, pulled.load(Ordering::Relaxed))
}

fn assert_too_large(items: &Items, what: &str) {
    let Some(Err(err)) = items.last() else {
        panic!("{what}: {items:?}")
    };
    assert_eq!(err.message, TOO_LARGE, "{what}");
    assert_eq!(
        (err.kind, err.retryable, err.status_code),
        (ErrorKind::Generic, false, None),
        "{what}"
    );
}

#[test]
fn an_endless_line_ends_the_stream_with_a_non_retryable_error_at_the_event_size_limit() {
    // Before the limit the framing buffered the line for ever (and rescanned
    // all of it for every piece): this test never returned.
    for anthropic in [false, true] {
        let (items, pulled) = decode_endless(b"data: {\"a\":\"", vec![b'a'; 64 * 1024], anthropic);
        assert_eq!(items.len(), 1, "{items:?}");
        assert_too_large(&items, "endless line");
        assert!(
            pulled <= MAX_EVENT_BYTES + 2 * 64 * 1024,
            "read {pulled} bytes"
        );
    }
}

#[test]
fn an_endless_event_of_short_data_lines_ends_the_stream_at_the_event_size_limit() {
    // Every line ends but the blank line that would end the event never
    // comes: the event's data grew without bound before the limit.
    let chunk = b"data: x\n".repeat(8 * 1024);
    for anthropic in [false, true] {
        let (items, pulled) = decode_endless(b"", chunk.clone(), anthropic);
        assert_too_large(&items, "endless event");
        // Line ends are not counted: 7 counted bytes per 8 read.
        let limit = MAX_EVENT_BYTES / 7 * 8 + 2 * chunk.len();
        assert!(pulled <= limit, "read {pulled} bytes");
    }
}

#[test]
fn an_event_at_the_size_limit_is_decoded_and_one_byte_more_is_refused() {
    // The limit counts the event's line bytes, line ends not counted:
    // `data: ` and the payload, cut into 64 KiB pieces.
    for (payload, refused) in [(MAX_EVENT_BYTES - 6, false), (MAX_EVENT_BYTES - 5, true)] {
        let mut body = b"data: ".to_vec();
        body.resize(6 + payload, b'a');
        body.extend_from_slice(b"\r\n\r\ndata: next\n\n");
        let cuts: Vec<usize> = (1..body.len() / 65536).map(|i| i * 65536).collect();
        let (seen, items) = frame(split_at(&body, &cuts));
        if refused {
            assert!(seen.is_empty());
            assert_too_large(&items, "one byte over");
        } else {
            assert_eq!(seen.len(), 2);
            assert_eq!(seen[0].1.len(), payload);
            assert_eq!(seen[1], ("message".to_owned(), "next".to_owned()));
            assert!(matches!(items.as_slice(), [Ok(StreamEvent::Finish { .. })]));
        }
    }
}

#[test]
fn a_line_that_is_not_utf8_ends_an_endless_stream_at_once_as_malformed() {
    // Before, everything after an invalid byte was buffered until the body
    // ended (and revalidated for every piece): on an endless body this
    // never returned.
    for anthropic in [false, true] {
        let (items, pulled) =
            decode_endless(b"data: \xff\n\n", b"data: {}\n\n".to_vec(), anthropic);
        let [Err(err)] = items.as_slice() else {
            panic!("{items:?}")
        };
        assert_eq!(err.message, "the provider sent a malformed event stream");
        assert_eq!((err.kind, err.retryable), (ErrorKind::Generic, true));
        assert!(pulled < 1024, "read {pulled} bytes");
    }
}

#[test]
fn a_mebibyte_of_blank_lines_in_one_piece_is_a_stream_without_events() {
    // Before, every line taken from a piece copied the rest of the piece:
    // 1 MiB of blank lines took about 10^12 byte copies.
    let items = decode_pieces(vec![vec![b'\n'; 1024 * 1024]]);
    let [Err(err)] = items.as_slice() else {
        panic!("{items:?}")
    };
    assert_eq!(
        err.message,
        "the provider closed the stream without sending anything"
    );
}
