//! [`super::select`], [`super::pack`], [`super::render`], [`super::measure`]
//! and [`super::messages`] on built rows.

use std::collections::HashSet;

use chatd_core::ModelOptions;
use chrono::Utc;
use sqlx::types::Json;
use uuid::Uuid;

use super::*;

fn row(id: i64, role: ChatRole, parts: Vec<MessagePart>) -> ChatMessage {
    ChatMessage {
        id,
        chat_id: Uuid::nil(),
        role,
        token_estimate: Some(estimate_tokens(&parts)),
        content: Json(parts),
        visibility: Visibility::Both,
        compressed: false,
        deleted: false,
        parent_id: (id > 1).then_some(id - 1),
        visible_parent_id: (id > 1).then_some(id - 1),
        sibling_ids: vec![],
        revision: id,
        created_by: None,
        model_config_id: None,
        reasoning_effort: None,
        input_tokens: None,
        output_tokens: None,
        reasoning_tokens: None,
        cache_read_tokens: None,
        cache_creation_tokens: None,
        total_tokens: None,
        context_limit: None,
        total_cost_micros: None,
        runtime_ms: None,
        finish_reason: None,
        provider_response_id: None,
        queued_message_id: None,
        client_message_id: None,
        compacted_through_id: None,
        created_at: Utc::now(),
    }
}

fn text(id: i64, role: ChatRole, text: &str) -> ChatMessage {
    row(id, role, vec![MessagePart::text(text)])
}

fn call_row(id: i64, call: &str) -> ChatMessage {
    row(
        id,
        ChatRole::Assistant,
        vec![MessagePart::ToolCall {
            tool_call_id: call.into(),
            tool_name: "search".into(),
            args: "{\"q\":\"x\"}".into(),
        }],
    )
}

fn result_row(id: i64, call: &str) -> ChatMessage {
    row(
        id,
        ChatRole::Tool,
        vec![MessagePart::ToolResult {
            tool_call_id: call.into(),
            tool_name: "search".into(),
            result: json!("found"),
            is_error: false,
        }],
    )
}

/// `turns` user/assistant pairs after a system prompt, ids from 1.
fn conversation(turns: i64) -> Vec<ChatMessage> {
    let mut rows = vec![text(1, ChatRole::System, "Be brief.")];
    for t in 0..turns {
        rows.push(text(2 + 2 * t, ChatRole::User, &format!("question {t}")));
        rows.push(text(3 + 2 * t, ChatRole::Assistant, &format!("answer {t}")));
    }
    rows
}

fn ids(rows: &[&ChatMessage]) -> Vec<i64> {
    rows.iter().map(|m| m.id).collect()
}

fn call(limit: i64, threshold: i32, tools: usize) -> ModelCall<()> {
    ModelCall {
        request: ModelRequest {
            model: "m".into(),
            messages: Vec::new(),
            tools: (0..tools)
                .map(|i| chatd_llm::ToolSpec {
                    name: format!("tool{i}"),
                    description: "d".repeat(400),
                    input_schema: json!({"type": "object"}),
                })
                .collect(),
            max_output_tokens: None,
            temperature: None,
            reasoning_effort: None,
            provider_tools: Vec::new(),
            files: Default::default(),
        },
        provider: (),
        model_config_id: Uuid::from_u128(7),
        context_limit: limit,
        compression_threshold: threshold,
        options: ModelOptions::default(),
        dynamic_tools: HashSet::new(),
        plan_mode: false,
        compaction: false,
        wants_title: false,
    }
}

#[test]
fn the_summary_covers_everything_before_the_tail_and_keeps_the_leading_system_rows() {
    let history = conversation(10); // ids 1..=21
    let s = select(&history, 4, 100_000, Mode::Auto).unwrap();
    assert_eq!(ids(&s.leading), vec![1]);
    assert!(s.previous.is_none());
    assert_eq!(ids(&s.summarized), (2..=17).collect::<Vec<_>>());
    assert_eq!(ids(&s.tail), vec![18, 19, 20, 21]);
    assert_eq!(s.through_id(), 17);
    // Nothing before a tail that takes everything: nothing to compact.
    assert!(select(&conversation(2), 4, 100_000, Mode::Auto).is_none());
}

#[test]
fn a_previous_summary_is_folded_into_the_new_one() {
    // Model order: system, summary (id 30, covering through 9), the rest.
    let mut summary = text(
        30,
        ChatRole::User,
        "[Summary of the earlier conversation]\nold",
    );
    summary.compressed = true;
    summary.visibility = Visibility::Model;
    summary.compacted_through_id = Some(9);
    let mut history = vec![text(1, ChatRole::System, "Be brief."), summary];
    for id in 10..=20 {
        let role = if id % 2 == 0 {
            ChatRole::User
        } else {
            ChatRole::Assistant
        };
        history.push(text(id, role, "x"));
    }
    let s = select(&history, 4, 100_000, Mode::Auto).unwrap();
    assert_eq!(s.previous.map(|m| m.id), Some(30));
    assert_eq!(ids(&s.summarized), (10..=16).collect::<Vec<_>>());
    assert!(
        s.tokens_before()
            > s.summarized
                .iter()
                .map(|m| m.token_estimate.unwrap())
                .sum::<i64>()
    );
}

#[test]
fn the_tail_never_starts_inside_a_tool_group() {
    // 2 user, 3 call, 4 and 5 results, 6 answer, 7 user, 8 answer.
    let mut history = vec![
        text(1, ChatRole::System, "s"),
        text(2, ChatRole::User, "go"),
    ];
    history.push(call_row(3, "a"));
    history.push(result_row(4, "a"));
    history.push(result_row(5, "a"));
    history.extend([
        text(6, ChatRole::Assistant, "done"),
        text(7, ChatRole::User, "more"),
        text(8, ChatRole::Assistant, "ok"),
    ]);
    // A tail of 4 would start at the second result: it starts at the call.
    let s = select(&history, 4, 100_000, Mode::Auto).unwrap();
    assert_eq!(ids(&s.tail), vec![3, 4, 5, 6, 7, 8]);
    assert_eq!(ids(&s.summarized), vec![2]);
    // When going back leaves nothing, the group is summarized instead.
    let no_user: Vec<ChatMessage> = [&history[..1], &history[2..6]].concat();
    let s = select(&no_user, 2, 100_000, Mode::Auto).unwrap();
    assert_eq!(ids(&s.summarized), vec![3, 4, 5]);
    assert_eq!(ids(&s.tail), vec![6]);
}

#[test]
fn the_tail_takes_at_most_its_share_of_the_window_and_an_overflow_keeps_four() {
    let mut history = vec![text(1, ChatRole::System, "s")];
    for id in 2..=13 {
        let role = if id % 2 == 0 {
            ChatRole::User
        } else {
            ChatRole::Assistant
        };
        history.push(text(id, role, &"w".repeat(400))); // 104 tokens each
    }
    // 40 % of 1000 tokens holds 3 of them.
    let s = select(&history, 12, 1000, Mode::Auto).unwrap();
    assert_eq!(ids(&s.tail), vec![11, 12, 13]);
    let s = select(&history, 12, 100_000, Mode::Overflow).unwrap();
    assert_eq!(s.tail.len(), 4);
    // A manual compaction keeps at most half of what there is.
    let s = select(&history[..5], 12, 100_000, Mode::Manual).unwrap();
    assert_eq!(ids(&s.summarized), vec![2, 3]);
}

#[test]
fn client_only_rows_are_never_summarized_or_counted() {
    let mut history = conversation(4);
    let mut visible = call_row(50, "chatd_compact_1");
    visible.visibility = Visibility::User;
    history.insert(3, visible);
    let s = select(&history, 4, 100_000, Mode::Auto).unwrap();
    assert!(
        s.summarized
            .iter()
            .all(|m| m.visibility != Visibility::User)
    );
    assert_eq!(s.summarized.len() + s.tail.len(), 8);
}

#[test]
fn transcripts_cut_long_tool_text_and_skip_reasoning() {
    let mut m = row(
        1,
        ChatRole::Assistant,
        vec![
            MessagePart::reasoning("secret thoughts"),
            MessagePart::text("Let me look."),
            MessagePart::ToolCall {
                tool_call_id: "c".into(),
                tool_name: "read".into(),
                args: "a".repeat(5000),
            },
        ],
    );
    let out = render(&m);
    assert!(out.starts_with("Assistant: Let me look.\nAssistant called the tool read with "));
    assert!(out.ends_with("… [cut]"));
    assert!(!out.contains("secret"));
    assert!(out.len() < 2_100 + 80);
    m.content = Json(vec![MessagePart::ToolResult {
        tool_call_id: "c".into(),
        tool_name: "read".into(),
        result: json!({"error": "no"}),
        is_error: true,
    }]);
    assert_eq!(render(&m), "The tool read failed: {\"error\":\"no\"}");
}

#[test]
fn packing_keeps_order_and_bounds_every_chunk() {
    let items: Vec<String> = (0..10).map(|i| format!("{i}{}", "x".repeat(399))).collect();
    let chunks = pack(items, 250); // 100 tokens an item: 2 fit in 250
    assert_eq!(chunks.len(), 5);
    assert!(chunks[0].starts_with('0') && chunks[4].contains("9x"));
    // One item over the budget is cut to it and goes alone.
    let chunks = pack(vec!["y".repeat(4000), "z".into()], 100);
    assert_eq!(chunks.len(), 2);
    assert!(chunks[0].len() <= 400 + 10 && chunks[0].ends_with("… [cut]"));
}

#[test]
fn the_threshold_and_the_room_for_the_answer_decide() {
    let history = conversation(10);
    let c = call(1000, 70, 0);
    let m = measure(&c, &history);
    assert_eq!(m.reserve, 250);
    assert_eq!(m.threshold, Some(700));
    let sum: i64 = history.iter().map(|r| r.token_estimate.unwrap()).sum();
    assert_eq!(m.tokens, sum);
    assert!(!m.wants_compaction());
    // Tools count while no reported usage covers them.
    let m = measure(&call(1000, 70, 7), &history);
    assert!(m.tokens > sum + 600 && m.wants_compaction());
    // Threshold off: still "does not fit" when the answer has no room.
    let m = measure(&call(sum, 0, 0), &history);
    assert!(!m.wants_compaction() && m.does_not_fit());
    // A reported usage replaces the estimates.
    let mut history = history;
    history[20].input_tokens = Some(650);
    history[20].output_tokens = Some(20);
    let m = measure(&call(1000, 70, 7), &history);
    assert_eq!((m.tokens, m.wants_compaction()), (670, false));
}

#[test]
fn a_compaction_commits_the_boundary_then_the_visible_call_and_result() {
    let history = conversation(10);
    let s = select(&history, 4, 100_000, Mode::Auto).unwrap();
    let summary = Summary {
        text: "They talked.".into(),
        usage: Usage {
            input_tokens: 300,
            output_tokens: 20,
            total_tokens: 320,
            ..Usage::default()
        },
        calls: 1,
    };
    let rows = messages(&call(8192, 70, 0), &s, &summary, 12);
    assert_eq!(rows.len(), 3);
    let boundary = &rows[0];
    assert!(boundary.compressed);
    assert_eq!(boundary.visibility, Visibility::Model);
    assert_eq!(boundary.compacted_through_id, Some(17));
    assert_eq!(
        boundary.content,
        vec![MessagePart::text(
            "[Summary of the earlier conversation]\nThey talked."
        )]
    );
    let (
        MessagePart::ToolCall {
            tool_call_id,
            tool_name,
            args,
        },
        Visibility::User,
    ) = (&rows[1].content[0], rows[1].visibility)
    else {
        panic!("{:?}", rows[1]);
    };
    assert_eq!((tool_name.as_str(), args.as_str()), (TOOL_NAME, "{}"));
    let MessagePart::ToolResult {
        tool_call_id: answered,
        result,
        is_error,
        ..
    } = &rows[2].content[0]
    else {
        panic!("{:?}", rows[2]);
    };
    assert_eq!((answered, *is_error), (tool_call_id, false));
    assert_eq!(result["summarized_messages"], 16);
    assert_eq!(result["summary"], "They talked.");
    assert!(result["tokens_after"].as_i64() < result["tokens_before"].as_i64());
    // Like with like: what the model reads of the replaced part, then of
    // the boundary that replaces it (the call and result are client-only).
    assert_eq!(result["tokens_before"], s.tokens_before());
    assert_eq!(result["tokens_after"], estimate_tokens(&boundary.content));
    assert_eq!(rows[2].visibility, Visibility::User);
    assert_eq!(rows[2].usage.map(|u| u.input_tokens), Some(300));
}

#[test]
fn a_selection_no_summary_could_shrink_is_not_compacted() {
    // Two short turns: a manual compaction would summarize "question 0"
    // and "answer 0", 14 tokens, less than the smallest summary.
    let history = conversation(2);
    let s = select(&history, 12, 100_000, Mode::Manual).unwrap();
    assert_eq!(ids(&s.summarized), vec![2, 3]);
    assert!(s.tokens_before() <= context::min_summary_tokens());
    assert!(!s.can_shrink());
    // Ten turns: 16 messages summarized.
    let history = conversation(10);
    assert!(
        select(&history, 4, 100_000, Mode::Auto)
            .unwrap()
            .can_shrink()
    );
}

#[test]
fn a_summary_must_be_text_and_smaller_than_what_it_replaces() {
    let history = conversation(10);
    let s = select(&history, 4, 100_000, Mode::Auto).unwrap();
    let ok = validate(" short ".into(), &s, Usage::default(), 1, "p").unwrap();
    assert_eq!(ok.text, "short");
    let empty = validate("  \n".into(), &s, Usage::default(), 1, "p").unwrap_err();
    assert!(empty.retryable && empty.message.starts_with("the compaction summary"));
    let big = validate("z".repeat(10_000), &s, Usage::default(), 1, "p").unwrap_err();
    assert!(big.message.contains("not smaller"), "{}", big.message);
}
