//! The renderer's rules, event by event, without a server.

use super::*;
use crate::chat_cli::wire::ActionRequired;
use serde_json::json;

fn ev(value: Value) -> StreamEvent {
    serde_json::from_value(value).expect("a stream event")
}

fn part(hv: i64, attempt: i64, seq: u64, text: &str) -> StreamEvent {
    ev(json!({"type": "message_part", "chat_id": "c",
        "message_part": {"role": "assistant", "part": {"type": "text", "text": text},
        "history_version": hv, "generation_attempt": attempt, "seq": seq}}))
}

fn reasoning_part(hv: i64, attempt: i64, seq: u64, text: &str) -> StreamEvent {
    ev(json!({"type": "message_part", "chat_id": "c",
        "message_part": {"role": "assistant", "part": {"type": "reasoning", "text": text},
        "history_version": hv, "generation_attempt": attempt, "seq": seq}}))
}

fn message(id: i64, role: &str, content: Value) -> StreamEvent {
    ev(json!({"type": "message", "chat_id": "c", "message": {
        "id": id, "chat_id": "c", "role": role, "content": content,
        "revision": 1, "queued_message_id": null}}))
}

fn text_message(id: i64, role: &str, text: &str) -> StreamEvent {
    message(id, role, json!([{"type": "text", "text": text}]))
}

fn status(s: &str) -> StreamEvent {
    ev(json!({"type": "status", "chat_id": "c", "status": {"status": s, "history_version": 1}}))
}

fn queue(ids: &[i64]) -> StreamEvent {
    let queued: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "chat_id": "c", "content": [], "created_at": "t"}))
        .collect();
    ev(json!({"type": "queue_update", "chat_id": "c", "queued_messages": queued}))
}

fn reset() -> StreamEvent {
    ev(json!({"type": "preview_reset", "chat_id": "c"}))
}

/// Feeds `events`; returns (stdout, stderr) concatenated.
fn render(renderer: &mut Renderer, events: &[StreamEvent]) -> (String, String) {
    let mut outs = Vec::new();
    for event in events {
        outs.extend(renderer.apply(event));
    }
    outs.extend(renderer.finish());
    split(&outs)
}

fn split(outs: &[Output]) -> (String, String) {
    let mut stdout = String::new();
    let mut stderr = String::new();
    for out in outs {
        match out {
            Output::Stdout(s) => stdout.push_str(s),
            Output::Stderr(s) => stderr.push_str(s),
        }
    }
    (stdout, stderr)
}

fn reply() -> Renderer {
    reply_to_queued(None)
}

/// Reply mode waiting for queued message `awaiting_queued`, if any.
fn reply_to_queued(awaiting_queued: Option<i64>) -> Renderer {
    Renderer::new(Mode::Reply { awaiting_queued }, Style::default(), "c", None)
}

fn watch() -> Renderer {
    Renderer::new(Mode::Watch, Style::default(), "c", None)
}

#[test]
fn parts_then_the_committed_message_print_the_reply_once() {
    let mut r = reply();
    let mut outs = Vec::new();
    outs.extend(r.apply(&text_message(1, "user", "hi")));
    outs.extend(r.apply(&status("running")));
    outs.extend(r.apply(&part(2, 1, 1, "Hel")));
    // Each delta is printed as it arrives.
    assert_eq!(outs, [Output::Stdout("Hel".into())]);
    outs.extend(r.apply(&part(2, 1, 2, "lo")));
    outs.extend(r.apply(&text_message(2, "assistant", "Hello")));
    outs.extend(r.apply(&reset()));
    outs.extend(r.apply(&status("waiting")));
    outs.extend(r.finish());
    assert_eq!(split(&outs), ("Hello\n".into(), String::new()));
    assert_eq!(r.idle(), Some(Idle::Waiting));
    assert_eq!(r.last_message_id(), 2);
}

#[test]
fn an_answer_cut_short_is_followed_by_a_notice_on_stderr_and_a_complete_one_is_not() {
    let cut = |reason: &str| {
        ev(json!({"type": "message", "chat_id": "c", "message": {
            "id": 2, "chat_id": "c", "role": "assistant",
            "content": [{"type": "text", "text": "The answer beg"}],
            "revision": 1, "queued_message_id": null, "finish_reason": reason}}))
    };
    for (reason, notice) in [
        (
            "length",
            "[answer cut short: the output token limit or the context window was reached]\n",
        ),
        (
            "content_filter",
            "[answer cut short: the provider withheld the rest (content filter)]\n",
        ),
        ("interrupted", "[answer interrupted]\n"),
        ("stop", ""),
    ] {
        let mut r = reply();
        let (out, err) = render(&mut r, &[status("running"), cut(reason), status("waiting")]);
        assert_eq!(
            (out.as_str(), err.as_str()),
            ("The answer beg\n", notice),
            "{reason}"
        );
    }
    let mut r = watch();
    let (out, err) = render(&mut r, &[cut("length"), status("waiting")]);
    assert!(out.contains("The answer beg"), "{out}");
    assert!(err.contains("[answer cut short"), "{err}");
}

#[test]
fn a_committed_message_without_parts_is_printed_whole() {
    let mut r = reply();
    let (out, err) = render(
        &mut r,
        &[
            status("running"),
            text_message(2, "assistant", "all at once"),
            status("waiting"),
        ],
    );
    assert_eq!((out.as_str(), err.as_str()), ("all at once\n", ""));
}

#[test]
fn a_message_committed_before_its_last_parts_is_completed_and_late_parts_ignored() {
    let mut r = reply();
    let (out, _) = render(
        &mut r,
        &[
            part(2, 1, 1, "one "),
            text_message(2, "assistant", "one two"),
            part(2, 1, 2, "two"),
        ],
    );
    assert_eq!(out, "one two\n");
}

#[test]
fn a_gap_in_seq_stops_live_printing_and_the_message_fills_in() {
    let mut r = reply();
    let (out, _) = render(
        &mut r,
        &[
            part(2, 1, 1, "a"),
            part(2, 1, 3, "c"),
            text_message(2, "assistant", "abc"),
        ],
    );
    assert_eq!(out, "abc\n");
}

#[test]
fn a_replay_of_the_same_episode_after_preview_reset_is_not_printed_twice() {
    // A reconnect: the bootstrap sends preview_reset, then the relay's
    // buffered parts of the same episode from seq 1.
    let mut r = reply();
    let (out, err) = render(
        &mut r,
        &[
            part(2, 1, 1, "one "),
            part(2, 1, 2, "two "),
            status("running"),
            reset(),
            part(2, 1, 1, "one "),
            part(2, 1, 2, "two "),
            part(2, 1, 3, "three"),
            text_message(2, "assistant", "one two three"),
        ],
    );
    assert_eq!((out.as_str(), err.as_str()), ("one two three\n", ""));
}

#[test]
fn watch_mode_prefixes_a_multi_line_reply_once() {
    let mut r = watch();
    let (out, _) = render(
        &mut r,
        &[
            text_message(1, "user", "a haiku"),
            part(2, 1, 1, "line one\n"),
            part(2, 1, 2, "line two\nline"),
            part(2, 1, 3, " three"),
            text_message(2, "assistant", "line one\nline two\nline three"),
            text_message(3, "user", "again\nplease"),
            text_message(4, "assistant", "first\nsecond\n"),
        ],
    );
    assert_eq!(
        out,
        "user> a haiku\nassistant> line one\nline two\nline three\n\
         user> again\nplease\nassistant> first\nsecond\n"
    );
}

#[test]
fn preview_reset_then_a_new_attempt_restarts_the_reply() {
    let mut r = reply();
    let (out, err) = render(
        &mut r,
        &[
            part(2, 1, 1, "partial"),
            reset(),
            part(2, 2, 1, "full "),
            part(2, 2, 2, "answer"),
            text_message(2, "assistant", "full answer"),
        ],
    );
    assert_eq!(out, "partial\nfull answer\n");
    assert_eq!(err, "[the reply restarted]\n");
}

#[test]
fn history_reset_drops_the_preview_and_does_not_reprint_known_messages() {
    let mut r = watch();
    let history_reset = ev(json!({"type": "history_reset", "chat_id": "c"}));
    let (out, err) = render(
        &mut r,
        &[
            text_message(1, "user", "hi"),
            text_message(2, "assistant", "hello"),
            text_message(3, "user", "again"),
            part(4, 1, 1, "draft"),
            history_reset,
            text_message(1, "user", "hi"),
            text_message(5, "user", "edited"),
            part(6, 1, 1, "new "),
            part(6, 1, 2, "answer"),
            text_message(6, "assistant", "new answer"),
        ],
    );
    assert_eq!(
        out,
        "user> hi\nassistant> hello\nuser> again\nassistant> draft\n\
         user> edited\nassistant> new answer\n"
    );
    assert_eq!(err, "[history rewritten; new messages follow]\n");
}

#[test]
fn watch_mode_prefixes_roles_and_shows_tool_calls_and_results() {
    let mut r = watch();
    let (out, err) = render(
        &mut r,
        &[
            text_message(1, "user", "weather?"),
            status("running"),
            message(
                2,
                "assistant",
                json!([{"type": "text", "text": "Let me look."},
                    {"type": "tool-call", "tool_call_id": "call_1", "tool_name": "weather",
                     "args": "{\"city\":\"Paris\"}"}]),
            ),
            message(
                3,
                "tool",
                json!([{"type": "tool-result", "tool_call_id": "call_1", "tool_name": "weather",
                    "result": {"temp": 21}, "is_error": false}]),
            ),
            part(4, 1, 1, "It is "),
            part(4, 1, 2, "21."),
            text_message(4, "assistant", "It is 21."),
            status("waiting"),
        ],
    );
    assert_eq!(
        out,
        "user> weather?\n\
         assistant> Let me look.\n\
         assistant> [tool call weather {\"city\":\"Paris\"} (call_1)]\n\
         tool> [tool result weather (call_1)] {\"temp\":21}\n\
         assistant> It is 21.\n"
    );
    assert_eq!(err, "[status: running]\n[status: waiting]\n");
}

#[test]
fn reply_mode_sends_tool_calls_to_stderr_and_keeps_stdout_to_the_text() {
    let mut r = reply();
    let (out, err) = render(
        &mut r,
        &[
            message(
                2,
                "assistant",
                json!([{"type": "tool-call", "tool_call_id": "c1", "tool_name": "ls",
                    "args": "{}"}]),
            ),
            message(
                3,
                "tool",
                json!([{"type": "tool-result", "tool_call_id": "c1", "tool_name": "ls",
                    "result": "a.txt", "is_error": true}]),
            ),
            text_message(4, "assistant", "done"),
        ],
    );
    assert_eq!(out, "done\n");
    assert_eq!(
        err,
        "[tool call ls {} (c1)]\n[tool result error ls (c1)] a.txt\n"
    );
}

#[test]
fn reasoning_goes_to_stderr_prefixed_and_is_not_repeated_on_commit() {
    let mut r = reply();
    let (out, err) = render(
        &mut r,
        &[
            reasoning_part(2, 1, 1, "hmm, "),
            reasoning_part(2, 1, 2, "easy"),
            part(2, 1, 3, "42"),
            message(
                2,
                "assistant",
                json!([{"type": "reasoning", "text": "hmm, easy"},
                    {"type": "text", "text": "42"}]),
            ),
        ],
    );
    assert_eq!(out, "42\n");
    assert_eq!(err, "thinking> hmm, easy\n");
}

#[test]
fn a_queued_reply_prints_nothing_until_its_user_message_is_promoted() {
    let mut r = reply_to_queued(Some(7));
    let promoted = ev(json!({"type": "message", "chat_id": "c", "message": {
        "id": 3, "role": "user", "content": [{"type": "text", "text": "second"}],
        "revision": 1, "queued_message_id": 7}}));
    let mut outs = Vec::new();
    for event in [
        status("running"),
        queue(&[7]),
        part(1, 1, 1, "first "),
        part(1, 1, 2, "answer"),
    ] {
        outs.extend(r.apply(&event));
    }
    assert_eq!(r.idle(), None);
    assert!(!r.reply_started());
    for event in [
        text_message(2, "assistant", "first answer"),
        promoted,
        queue(&[]),
        reset(),
        part(3, 1, 1, "second "),
        part(3, 1, 2, "answer"),
        text_message(4, "assistant", "second answer"),
        status("waiting"),
    ] {
        outs.extend(r.apply(&event));
    }
    outs.extend(r.finish());
    assert!(r.reply_started());
    assert_eq!(split(&outs), ("second answer\n".into(), String::new()));
    assert_eq!(r.idle(), Some(Idle::Waiting));
}

#[test]
fn a_reply_ends_at_the_next_user_message_and_does_not_print_its_answer() {
    // `send` to a busy chat, then someone queues behind us: our reply
    // is printed, theirs is not, and we are done while the chat runs on.
    let mut r = reply_to_queued(Some(7));
    let promoted = |id: i64, queued: i64, text: &str| {
        ev(json!({"type": "message", "chat_id": "c", "message": {
            "id": id, "role": "user", "content": [{"type": "text", "text": text}],
            "revision": 1, "queued_message_id": queued}}))
    };
    let mut outs = Vec::new();
    for event in [
        status("running"),
        queue(&[7, 8]),
        text_message(2, "assistant", "first answer"),
        promoted(3, 7, "ours"),
        queue(&[8]),
        part(3, 1, 1, "our "),
        part(3, 1, 2, "answer"),
        text_message(4, "assistant", "our answer"),
    ] {
        outs.extend(r.apply(&event));
    }
    assert_eq!(r.idle(), None, "still running our turn");
    for event in [
        promoted(5, 8, "theirs"),
        queue(&[]),
        part(4, 1, 1, "their "),
        text_message(6, "assistant", "their answer"),
    ] {
        outs.extend(r.apply(&event));
    }
    outs.extend(r.finish());
    assert_eq!(split(&outs), ("our answer\n".into(), String::new()));
    assert_eq!(r.idle(), Some(Idle::Answered));
    assert!(r.reply_started());

    // A message sent directly: the follow starts after it.
    let mut r = reply().with_own_message(10);
    let mut outs = Vec::new();
    for event in [
        status("running"),
        text_message(11, "assistant", "mine"),
        promoted(12, 9, "queued by another client"),
        text_message(13, "assistant", "not mine"),
    ] {
        outs.extend(r.apply(&event));
    }
    outs.extend(r.finish());
    assert_eq!(split(&outs), ("mine\n".into(), String::new()));
    assert_eq!(r.idle(), Some(Idle::Answered));
}

#[test]
fn a_regenerated_answer_is_printed_alone_when_the_new_branch_is_sent_whole() {
    // Messages 1..=4 were the history; 2 (the old answer) left the active
    // branch, and the stream resends the branch after a `history_reset`.
    let mut r = reply().with_own_message(4).with_history_through(4);
    let mut outs = Vec::new();
    for event in [
        status("running"),
        ev(json!({"type": "history_reset", "chat_id": "c"})),
        text_message(1, "user", "question"),
        text_message(3, "user", "another question"),
        text_message(4, "assistant", "the old answer to it"),
        part(7, 1, 1, "the new "),
        part(7, 1, 2, "answer"),
        text_message(5, "assistant", "the new answer"),
        status("waiting"),
    ] {
        outs.extend(r.apply(&event));
    }
    outs.extend(r.finish());
    assert_eq!(split(&outs), ("the new answer\n".into(), String::new()));
    assert_eq!(r.last_message_id(), 5);
    assert_eq!(r.idle(), Some(Idle::Waiting));
}

#[test]
fn idle_needs_an_empty_queue_and_reports_errors_and_actions() {
    let mut r = reply();
    r.apply(&status("waiting"));
    r.apply(&queue(&[1]));
    assert_eq!(r.idle(), None, "a queued message is still to come");
    r.apply(&queue(&[]));
    assert_eq!(r.idle(), Some(Idle::Waiting));

    r.apply(&status("error"));
    assert_eq!(r.idle(), Some(Idle::Error { reported: false }));
    let outs = r.apply(&ev(json!({"type": "error", "chat_id": "c",
        "error": {"message": "boom", "kind": "generic", "retryable": false}})));
    assert_eq!(outs, [Output::Stderr("error: boom (generic)\n".into())]);
    assert_eq!(r.idle(), Some(Idle::Error { reported: true }));

    r.apply(&status("requires_action"));
    let outs = r.apply(&ev(json!({"type": "action_required", "chat_id": "c",
        "action_required": {"tool_calls": [{"tool_call_id": "c1", "tool_name": "ask",
        "args": "{\"q\":1}"}], "deadline_at": null}})));
    assert_eq!(
        split(&outs).1,
        "action required: 1 tool call(s) wait for results\n  ask {\"q\":1} (c1)\n\
         answer with: chatd chat tool-results c --result c1=... \
         (replace ... with the output, JSON or text; \
         --error instead of --result for a failed call)\n"
    );
    assert_eq!(r.idle(), Some(Idle::RequiresAction { reported: true }));
}

#[test]
fn pending_approvals_are_marked_and_answered_with_approve_or_deny() {
    let action: ActionRequired = serde_json::from_value(json!({"tool_calls": [
        {"tool_call_id": "c1", "tool_name": "ask", "args": "{}", "kind": "client_tool"},
        {"tool_call_id": "c2", "tool_name": "fs__rm", "args": "{\"path\":\"/x\"}", "kind": "approval"},
    ], "deadline_at": "2026-01-01T00:05:00Z"}))
    .unwrap();
    assert_eq!(
        describe_action_required(&action, "CHAT", None),
        "action required: 1 tool call(s) wait for results and 1 for approval \
         (deadline 2026-01-01T00:05:00Z)\n  ask {} (c1)\n  \
         [needs approval] fs__rm {\"path\":\"/x\"} (c2)\n\
         answer with: chatd chat tool-results CHAT --result c1=... \
         (replace ... with the output, JSON or text; \
         --error instead of --result for a failed call)\n\
         approve with: chatd chat approve CHAT c2 \
         (or deny: chatd chat deny CHAT c2 [--reason TEXT]; \
         every pending call is answered in one request)"
    );
    let mut r = watch();
    let (out, _) = render(
        &mut r,
        &[message(
            4,
            "tool",
            json!([{"type": "tool-approval", "tool_call_id": "c2",
                "tool_name": "fs__rm", "approved": true, "reason": "fine"}]),
        )],
    );
    assert_eq!(out, "tool> [approved fs__rm (c2): fine]\n");
}

#[test]
fn the_tool_results_hint_has_one_result_per_call_and_quotes_odd_ids() {
    let hint = tool_results_hint(
        "CHAT",
        None,
        ["call_1", "toolu_01:x", "it's odd"].into_iter(),
    );
    assert_eq!(
        hint,
        "answer with: chatd chat tool-results CHAT --result call_1=... \
         --result toolu_01:x=... --result 'it'\\''s odd'=... \
         (replace ... with the output, JSON or text; \
         --error instead of --result for a failed call)"
    );
    assert!(
        tool_results_hint("CHAT", None, std::iter::empty())
            .starts_with("answer with: chatd chat tool-results CHAT --result TOOL_CALL_ID=... ")
    );
}

#[test]
fn the_tool_results_hint_names_the_server_when_given_a_url() {
    assert!(
        tool_results_hint(
            "CHAT",
            Some("https://chat.example:8443"),
            ["c1"].into_iter()
        )
        .starts_with(
            "answer with: chatd chat tool-results CHAT \
                 --url https://chat.example:8443 --result c1=... "
        )
    );
    assert!(
        tool_results_hint("CHAT", Some("http://h/a b?x=1&y"), std::iter::empty()).starts_with(
            "answer with: chatd chat tool-results CHAT \
             --url 'http://h/a b?x=1&y' --result TOOL_CALL_ID=... "
        )
    );
    let r = Renderer::new(Mode::Watch, Style::default(), "c", Some("http://h:1"));
    let hint = r.generic_tool_results_hint();
    assert!(
        hint.starts_with(
            "answer with: chatd chat tool-results c --url http://h:1 --result TOOL_CALL_ID=... "
        ),
        "{hint}"
    );
}

#[test]
fn an_interrupted_preview_has_its_line_closed_when_the_chat_goes_idle() {
    let mut r = reply();
    let (out, _) = render(
        &mut r,
        &[
            status("running"),
            part(2, 1, 1, "cut sh"),
            status("waiting"),
        ],
    );
    assert_eq!(out, "cut sh\n");
}

#[test]
fn unknown_event_and_part_types_are_ignored() {
    let mut r = watch();
    let unknown = ev(json!({"type": "something_new", "chat_id": "c", "x": 1}));
    assert_eq!(unknown, StreamEvent::Unknown);
    let (out, _) = render(
        &mut r,
        &[
            unknown,
            message(
                1,
                "user",
                json!([{"type": "text", "text": "a"}, {"type": "hologram"}]),
            ),
        ],
    );
    assert_eq!(out, "user> a\n");
}

#[test]
fn a_provider_web_search_is_shown_as_its_query_results_and_numbered_sources() {
    let parts: Vec<MessagePart> = serde_json::from_value(json!([
        {"type": "provider-tool-call", "tool_call_id": "s1", "tool_name": "web_search",
         "input": {"query": "claude shannon"}},
        {"type": "provider-tool-result", "tool_call_id": "s1", "tool_name": "web_search",
         "result": [{"type": "web_search_result", "url": "https://e.org/a", "title": "A",
                     "encrypted_content": "x"}], "is_error": false},
        {"type": "text", "text": "Born 1916.", "citations": [{"url": "https://e.org/a", "title": "A"}]},
        {"type": "provider-tool-result", "tool_call_id": "s2", "tool_name": "web_search",
         "result": {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"},
         "is_error": true},
    ]))
    .unwrap();
    assert_eq!(
        provider_tool_lines(&parts),
        [
            "[web search: claude shannon]",
            "  A <https://e.org/a>",
            "[web search failed: max_uses_exceeded]",
            "[1] A <https://e.org/a>",
        ]
    );
}
