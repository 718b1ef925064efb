//! Every branch of [`super::plan`], on built rows.

use chrono::Utc;

use super::*;

fn chat() -> Chat {
    Chat {
        id: Uuid::nil(),
        owner_id: Uuid::nil(),
        parent_chat_id: None,
        root_chat_id: None,
        status: chatd_core::ChatStatus::Running,
        archived: false,
        worker_id: None,
        runner_id: None,
        last_error: None,
        retry_state: None,
        snapshot_version: 1,
        history_version: 1,
        queue_version: 0,
        generation_attempt: 0,
        retry_state_version: 0,
        requires_action_deadline_at: None,
        title: DEFAULT_CHAT_TITLE.to_owned(),
        labels: Default::default(),
        pin_order: 0,
        last_model_config_id: None,
        last_reasoning_effort: None,
        dynamic_tools: vec![DynamicTool {
            name: "pick_color".into(),
            description: "Asks the user for a color.".into(),
            input_schema: json!({"type": "object"}),
            read_only: false,
        }],
        mcp_server_ids: Vec::new(),
        plan_mode: None,
        compaction_requested_at: None,
        message_count: 0,
        last_message_preview: None,
        context_tokens: None,
        context_estimated: true,
        context_limit: None,
        compactions: 0,
        compacted_through_message_id: None,
        subagents: false,
        depth: 0,
        spawn_key: None,
        workspace: false,
        workspace_bytes: None,
        workspace_files: None,
        workspace_updated_at: None,
        active_leaf_id: None,
        forked_from_chat_id: None,
        forked_from_message_id: None,
        created_at: Utc::now(),
        updated_at: Utc::now(),
    }
}

/// A message of the history; test rows live as long as the test binary.
fn message(role: ChatRole, parts: Vec<MessagePart>) -> HistoryMessage<'static> {
    HistoryMessage {
        role,
        visibility: Visibility::Both,
        parts: parts.leak(),
    }
}

fn user(text: &str) -> HistoryMessage<'static> {
    message(ChatRole::User, vec![MessagePart::text(text)])
}

fn answer(text: &str) -> HistoryMessage<'static> {
    message(ChatRole::Assistant, vec![MessagePart::text(text)])
}

fn calls(names: &[(&str, &str)]) -> HistoryMessage<'static> {
    let parts = names
        .iter()
        .map(|(id, name)| MessagePart::ToolCall {
            tool_call_id: (*id).into(),
            tool_name: (*name).into(),
            args: format!("{{\"id\":\"{id}\"}}"),
        })
        .collect();
    message(ChatRole::Assistant, parts)
}

fn result(
    id: &str,
    name: &str,
    result: serde_json::Value,
    is_error: bool,
) -> HistoryMessage<'static> {
    message(
        ChatRole::Tool,
        vec![MessagePart::ToolResult {
            tool_call_id: id.into(),
            tool_name: name.into(),
            result,
            is_error,
        }],
    )
}

fn model() -> ModelConfigDef {
    ModelConfigDef {
        id: Uuid::from_u128(7),
        provider_id: Uuid::nil(),
        model: "m1".into(),
        display_name: "M1".into(),
        context_limit: 8192,
        compression_threshold: 80,
        is_default: true,
        enabled: true,
        options: ModelOptions {
            max_output_tokens: Some(512),
            temperature: Some(0.5),
            ..ModelOptions::default()
        },
    }
}

/// Plans `history` for `chat` with the model above, 3 steps a turn and
/// titles on.
fn plan_for(chat: &Chat, history: &[HistoryMessage<'_>]) -> Plan<()> {
    let model = model();
    plan(PlanInput {
        chat,
        history,
        model: Ok((&model, ())),
        max_steps_per_turn: 3,
        generate_titles: true,
        turn: None,
    })
}

fn call(plan: Plan<()>) -> ModelCall<()> {
    match plan {
        Plan::Call(call) => *call,
        other => panic!("expected a model call, got {other:?}"),
    }
}

#[test]
fn an_empty_or_system_only_history_finishes_the_turn() {
    assert!(matches!(plan_for(&chat(), &[]), Plan::FinishTurn));
    let system = message(ChatRole::System, vec![MessagePart::text("be brief")]);
    assert!(matches!(plan_for(&chat(), &[system]), Plan::FinishTurn));
}

#[test]
fn a_last_user_message_calls_the_model_with_the_model_visible_history() {
    let mut hidden = user("only the user sees this");
    hidden.visibility = Visibility::User;
    let call = call(plan_for(&chat(), &[hidden, user("hi")]));
    assert_eq!(call.request.model, "m1");
    assert_eq!(
        call.request.messages,
        vec![RequestMessage {
            role: ChatRole::User,
            parts: vec![MessagePart::text("hi")]
        }]
    );
    assert_eq!(
        call.request.tools,
        dynamic_tool_specs(chat().dynamic_tools.iter())
    );
    assert_eq!(call.request.max_output_tokens, Some(512));
    assert_eq!(call.request.temperature, Some(0.5));
    assert_eq!(call.model_config_id, Uuid::from_u128(7));
    assert_eq!(call.context_limit, 8192);
    assert_eq!(call.dynamic_tools, HashSet::from(["pick_color".to_owned()]));
    assert!(!call.compaction);
    assert!(call.wants_title, "first answer of a default-titled chat");
}

#[test]
fn only_a_first_answer_of_a_default_titled_chat_wants_a_title() {
    let answered = [user("hi"), answer("hello"), user("again")];
    assert!(!call(plan_for(&chat(), &answered)).wants_title);
    let mut renamed = chat();
    renamed.title = "Mine".into();
    assert!(!call(plan_for(&renamed, &[user("hi")])).wants_title);
    let model = model();
    let untitled = plan(PlanInput {
        chat: &chat(),
        history: &[user("hi")],
        model: Ok((&model, ())),
        max_steps_per_turn: 3,
        generate_titles: false,
        turn: None,
    });
    assert!(!call(untitled).wants_title);
}

#[test]
fn a_last_answer_finishes_the_turn() {
    assert!(matches!(
        plan_for(&chat(), &[user("hi"), answer("hello")]),
        Plan::FinishTurn
    ));
}

#[test]
fn outstanding_calls_of_other_tools_are_answered_with_their_arguments() {
    let history = [user("hi"), calls(&[("c1", "srv__search"), ("c2", "gone")])];
    let Plan::AnswerOutstanding(outstanding) = plan_for(&chat(), &history) else {
        panic!("expected outstanding calls");
    };
    assert_eq!(
        outstanding,
        Outstanding {
            calls: vec![
                ("c1".into(), "srv__search".into(), "{\"id\":\"c1\"}".into()),
                ("c2".into(), "gone".into(), "{\"id\":\"c2\"}".into()),
            ],
            then_requires_action: false,
        }
    );
}

#[test]
fn outstanding_calls_next_to_dynamic_ones_are_answered_then_wait_for_the_client() {
    let history = [
        user("hi"),
        calls(&[("c1", "pick_color"), ("c2", "srv__search")]),
    ];
    let Plan::AnswerOutstanding(outstanding) = plan_for(&chat(), &history) else {
        panic!("expected outstanding calls");
    };
    assert_eq!(
        outstanding.calls,
        vec![("c2".into(), "srv__search".into(), "{\"id\":\"c2\"}".into())]
    );
    assert!(outstanding.then_requires_action);
}

#[test]
fn only_dynamic_calls_outstanding_enter_requires_action() {
    let history = [user("hi"), calls(&[("c1", "pick_color")])];
    assert!(matches!(
        plan_for(&chat(), &history),
        Plan::EnterRequiresAction
    ));
}

#[test]
fn results_interrupted_by_the_user_finish_the_turn_and_real_ones_call_the_model() {
    let interrupted = json!({"error": INTERRUPTED_TOOL_RESULT});
    let history = [
        user("hi"),
        calls(&[("c1", "srv__search")]),
        result("c1", "srv__search", interrupted.clone(), true),
    ];
    assert!(matches!(plan_for(&chat(), &history), Plan::FinishTurn));
    let history = [
        user("hi"),
        calls(&[("c1", "srv__search")]),
        result("c1", "srv__search", interrupted, false),
    ];
    assert!(!call(plan_for(&chat(), &history)).compaction);
}

#[test]
fn the_step_budget_counts_answers_since_the_last_user_message() {
    let step = |id: &str| {
        [
            calls(&[(id, "srv__search")]),
            result(id, "srv__search", json!("ok"), false),
        ]
    };
    let mut history = vec![user("first"), answer("a"), answer("b"), user("hi")];
    history.extend(step("c1"));
    history.extend(step("c2"));
    assert!(matches!(plan_for(&chat(), &history), Plan::Call(_)));
    history.extend(step("c3"));
    assert!(matches!(plan_for(&chat(), &history), Plan::StepLimit));
}

#[test]
fn the_step_limit_ends_the_turn_with_a_usage_limit_error_naming_the_cap() {
    let error = step_limit_error(250);
    assert_eq!(error.kind, ChatErrorKind::UsageLimit);
    assert!(!error.retryable);
    assert!(
        error.message.contains("limit of 250 model calls"),
        "{}",
        error.message
    );
    assert!(
        error.message.contains("--max-steps-per-turn"),
        "{}",
        error.message
    );
}

#[test]
fn a_chat_without_a_model_fails_when_the_model_is_due() {
    let no_model = |history: &[HistoryMessage<'_>]| {
        plan::<()>(PlanInput {
            chat: &chat(),
            history,
            model: Err("no model"),
            max_steps_per_turn: 3,
            generate_titles: true,
            turn: None,
        })
    };
    assert!(matches!(no_model(&[user("hi")]), Plan::NoModel(m) if m == "no model"));
    assert!(matches!(
        no_model(&[user("hi"), answer("hello")]),
        Plan::FinishTurn
    ));
}

#[test]
fn a_requested_compaction_summarizes_without_tools_whatever_the_history() {
    let mut chat = chat();
    chat.compaction_requested_at = Some(Utc::now());
    let history = [user("hi"), calls(&[("c1", "pick_color")])];
    let call = call(plan_for(&chat, &history));
    assert!(call.compaction);
    assert!(!call.wants_title);
    assert!(call.request.tools.is_empty());
    // The history as it is: the compaction builds its own requests from it.
    assert_eq!(call.request.messages.len(), 2);
}

#[test]
fn plan_mode_adds_the_instruction_and_offers_only_read_only_dynamic_tools() {
    let mut chat = chat();
    chat.plan_mode = Some("plan".into());
    chat.dynamic_tools.push(DynamicTool {
        name: "lookup".into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        read_only: true,
    });
    let planned = call(plan_for(&chat, &[user("hi")]));
    assert!(planned.plan_mode);
    let names: Vec<&str> = planned
        .request
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["lookup"]);
    assert_eq!(
        planned.request.messages.last(),
        Some(&RequestMessage::text(
            ChatRole::System,
            PLAN_MODE_INSTRUCTION
        ))
    );
    // Both tools stay dynamic: a pending call of either still waits for the client.
    assert_eq!(planned.dynamic_tools.len(), 2);

    chat.plan_mode = None;
    let normal = call(plan_for(&chat, &[user("hi")]));
    assert!(!normal.plan_mode);
    assert_eq!(normal.request.tools.len(), 2);
    assert_eq!(normal.request.messages.len(), 1);
}

#[test]
fn an_openai_responses_options_shape_its_turns_calls() {
    let model = model();
    let weather = DynamicTool {
        name: "get_weather".into(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        read_only: false,
    };
    let turn = chatd_store::responses::TurnOptions {
        response_id: "resp_1".into(),
        instructions: Some("Answer in French.".into()),
        tools: Some(vec![weather.clone()]),
        max_output_tokens: Some(64),
    };
    let chat = chat();
    let history = [user("hi")];
    let planned = call(plan(PlanInput {
        chat: &chat,
        history: &history,
        model: Ok((&model, ())),
        max_steps_per_turn: 3,
        generate_titles: false,
        turn: Some(&turn),
    }));
    // The instructions join the system text; the response's tools replace
    // the chat's; the lower of the two output caps wins.
    assert_eq!(
        planned.request.messages.last(),
        Some(&RequestMessage::text(ChatRole::System, "Answer in French."))
    );
    assert_eq!(
        planned.request.tools,
        dynamic_tool_specs(std::iter::once(&weather))
    );
    assert_eq!(
        planned.dynamic_tools,
        HashSet::from(["get_weather".to_owned()])
    );
    assert_eq!(planned.request.max_output_tokens, Some(64));
    // A call of the response's tool waits for the client.
    let calls = message(
        ChatRole::Assistant,
        vec![MessagePart::ToolCall {
            tool_call_id: "c1".into(),
            tool_name: "get_weather".into(),
            args: "{}".into(),
        }],
    );
    let history = [user("hi"), calls];
    let next = plan(PlanInput {
        chat: &chat,
        history: &history,
        model: Ok((&model, ())),
        max_steps_per_turn: 3,
        generate_titles: false,
        turn: Some(&turn),
    });
    assert!(matches!(next, Plan::EnterRequiresAction), "{next:?}");
}
