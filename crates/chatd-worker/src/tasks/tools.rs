//! The tool router of the generation task (`spec/chatd-architecture.md`,
//! "Generation goroutine": MCP tools, dynamic tools, parallel tool calls
//! committed in one `CommitStep`, at-least-once execution).
//!
//! Every path that executes tool calls goes through [`ToolRouter::run`]: the
//! calls of a fresh model response and the calls an earlier step left
//! without results. Each call is routed once, in this order:
//!
//! 1. cut off at the output token limit: answered with an `is_error` result,
//!    never run;
//! 2. a dynamic (client-side) tool: left to the client, the step waits for it
//!    (a dynamic tool hides an MCP tool of the same name);
//! 3. an MCP tool of the chat's servers whose server requires approval for
//!    it, not approved yet: left pending like a client-side call
//!    ([`super::approval`]);
//! 4. any other MCP tool of the chat's servers: run, all of a step's calls
//!    in parallel, with an idempotency key of the attempt and call;
//! 5. a workspace tool of a chat with a workspace ([`super::workspace`]):
//!    left pending when `--workspace-approval` names it and nobody approved
//!    the call yet, else run with the step's other workspace calls, in call
//!    order, beside the MCP calls; the step commits what they changed;
//! 6. a built-in agent tool of a chat with `subagents` ([`super::agents`]):
//!    `spawn_agent` answered at once with the child created in the step's
//!    commit, `wait_agent` deferred to the next step (run there as an
//!    outstanding call), `message_agent` and `close_agent` run in parallel
//!    with the MCP calls;
//! 7. anything else: answered with an `Unknown tool` error result.
//!
//! In plan mode ([`ToolRouter::in_plan_mode`]) only read-only tools are
//! offered (MCP `readOnlyHint`, dynamic tools the client marked
//! `read_only`), and a call of any other tool is answered with an error
//! result, never run.
//!
//! The agent and workspace tools are chatd's built-in tools; each family is
//! a route of its own in `ToolRouter::route`.

use std::collections::HashSet;

use chatd_core::{ChatRole, Episode, MessagePart, PartDelta};
use chatd_llm::ToolSpec;
use chatd_store::Chat;
use chatd_store::NewMessage;
use chatd_tools::{IdempotencyKey, McpServerConfig, McpTool, McpToolset, ToolOutcome};
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use uuid::Uuid;

use super::agents::{self, AgentCall, Spawn};
use super::approval::Approvals;
use super::stream::OpenEpisode;
use super::workspace::{self, WorkspaceCall};
use super::{TaskContext, TaskResult};

/// The tools of one step: the chat's dynamic tools and the MCP tools its
/// servers listed for this step.
pub(super) struct ToolRouter {
    dynamic: HashSet<String>,
    mcp: McpToolset,
    /// Plan mode: the read-only dynamic tools; every other tool is refused.
    plan_mode: Option<HashSet<String>>,
    /// Which MCP calls wait for a person's decision (none by default).
    approvals: Approvals,
    /// The chat row when it has `subagents`: the agent tools are offered.
    agents: Option<Chat>,
    /// The chat has a workspace: the workspace tools are offered.
    workspace: bool,
}

/// One tool call to route, as the model wrote it.
pub(super) struct ToolCall<'a> {
    /// The provider's call id.
    pub(super) id: &'a str,
    /// The (qualified) tool name.
    pub(super) name: &'a str,
    /// The JSON arguments.
    pub(super) args: &'a str,
    /// The response was cut off in this call: its arguments are incomplete.
    pub(super) cut_off: bool,
    /// When the call was committed (an outstanding call of an earlier
    /// step); `None` for a call of the response being handled. The durable
    /// start of a `wait_agent`.
    pub(super) made_at: Option<DateTime<Utc>>,
}

/// What a step's tool calls came to.
#[derive(Default)]
pub(super) struct ToolStep {
    /// Tool messages to commit with the step, in call order (none for
    /// client-side calls).
    pub(super) results: Vec<NewMessage>,
    /// Client-side (dynamic) calls or calls waiting for approval are
    /// pending: enter requires-action.
    pub(super) waits_for_client: bool,
    /// Children to create in the step's commit (`spawn_agent`).
    pub(super) spawns: Vec<Spawn>,
    /// What the step's workspace calls changed, committed with the step.
    pub(super) workspace: Vec<chatd_store::workspaces::WorkspaceChange>,
    /// Calls left without a result for the next step to run
    /// (`wait_agent`): the step must not enter requires-action or finish.
    pub(super) deferred: bool,
}

/// Where a call goes.
enum Route<'a> {
    /// Answered at once with this result, never run.
    Answer(ToolOutcome),
    /// Run by the client, or waiting for a person's approval.
    Client,
    /// Run on its MCP server.
    Mcp(&'a McpTool),
    /// A built-in agent tool of this chat.
    Agent(&'a Chat, AgentCall),
    /// A workspace tool (or the error result of arguments that do not
    /// parse, given in call order with the others).
    Workspace(Result<WorkspaceCall, String>),
}

/// The text of the result of a call cut off at the output token limit.
const CUT_OFF_CALL: &str = "The tool call was cut off at the output token limit: its arguments are incomplete and it was not run.";

impl ToolRouter {
    /// Lists the MCP tools of `servers` (none listed when empty), outside
    /// any lock; a server that cannot be listed is left out of this step
    /// only.
    ///
    /// # Errors
    /// [`super::Exit::Cancelled`] when the task is cancelled meanwhile.
    pub(super) async fn list(
        task: &TaskContext,
        dynamic: HashSet<String>,
        servers: &[McpServerConfig],
    ) -> TaskResult<Self> {
        let mcp = if servers.is_empty() {
            McpToolset::default()
        } else {
            task.cancellable(task.ctx.mcp.list_tools(servers)).await?
        };
        Ok(Self {
            dynamic,
            mcp,
            plan_mode: None,
            approvals: Approvals::default(),
            agents: None,
            workspace: false,
        })
    }

    /// The router of a step whose MCP calls wait for approval as
    /// `approvals` says.
    pub(super) fn with_approvals(mut self, approvals: Approvals) -> Self {
        self.approvals = approvals;
        self
    }

    /// Offers and runs the agent tools when `chat` has `subagents`.
    pub(super) fn with_agents(mut self, chat: &Chat) -> Self {
        if chat.subagents {
            self.agents = Some(chat.clone());
        }
        self
    }

    /// Offers and runs the workspace tools (the chat was created with
    /// `workspace`, or its model config sets `options.workspace`).
    pub(super) fn with_workspace(mut self, enabled: bool) -> Self {
        self.workspace = enabled;
        self
    }

    /// The workspace tools offered to the model: none without a workspace;
    /// in plan mode only the read-only ones; one hidden by a dynamic tool
    /// of the same name is left out.
    pub(super) fn workspace_specs(&self) -> Vec<ToolSpec> {
        if !self.workspace {
            return Vec::new();
        }
        workspace::specs(self.plan_mode.is_some(), self.max_timeout_s())
            .into_iter()
            .filter(|spec| !self.dynamic.contains(&spec.name))
            .collect()
    }

    /// The agent tools offered to the model: none without `subagents` or
    /// in plan mode (none is read-only); one hidden by a dynamic tool of
    /// the same name is left out.
    pub(super) fn agent_specs(&self) -> Vec<ToolSpec> {
        if self.agents.is_none() || self.plan_mode.is_some() {
            return Vec::new();
        }
        agents::specs()
            .into_iter()
            .filter(|spec| !self.dynamic.contains(&spec.name))
            .collect()
    }

    /// The router of a plan-mode step: only the dynamic tools named in
    /// `read_only_dynamic` and the read-only MCP tools are offered and
    /// run.
    pub(super) fn in_plan_mode(mut self, read_only_dynamic: HashSet<String>) -> Self {
        self.plan_mode = Some(read_only_dynamic);
        self
    }

    /// Whether the tool called `name` may run in this step.
    fn allowed(&self, name: &str) -> bool {
        let Some(read_only_dynamic) = &self.plan_mode else {
            return true;
        };
        if self.dynamic.contains(name) {
            read_only_dynamic.contains(name)
        } else if let Some(tool) = self.mcp.get(name) {
            tool.read_only
        } else {
            self.workspace && workspace::READ_ONLY_TOOLS.contains(&name)
        }
    }

    /// The MCP tools offered to the model, in listing order; one hidden by
    /// a dynamic tool of the same name is left out (and logged).
    pub(super) fn mcp_specs(&self, chat_id: Uuid) -> Vec<ToolSpec> {
        let mut specs = Vec::new();
        for tool in &self.mcp.tools {
            if self.dynamic.contains(&tool.qualified_name) {
                tracing::warn!(%chat_id, tool = %tool.qualified_name, "MCP tool hidden by a dynamic tool of the same name");
                continue;
            }
            if !self.allowed(&tool.qualified_name) {
                continue;
            }
            specs.push(ToolSpec {
                name: tool.qualified_name.clone(),
                description: tool.description.clone(),
                input_schema: tool.input_schema.clone(),
            });
        }
        specs
    }

    fn route(&self, call: &ToolCall<'_>) -> Route<'_> {
        if call.cut_off {
            Route::Answer(ToolOutcome::error(CUT_OFF_CALL))
        } else if !self.allowed(call.name) {
            Route::Answer(ToolOutcome::error(format!(
                "{} is not available in plan mode: only read-only tools are. Propose a plan instead.",
                call.name
            )))
        } else if self.dynamic.contains(call.name) {
            Route::Client
        } else if let Some(tool) = self.mcp.get(call.name) {
            if self.approvals.waits(call.id, tool) {
                Route::Client
            } else {
                Route::Mcp(tool)
            }
        } else if self.workspace && workspace::is_workspace_tool(call.name) {
            if self.approvals.waits_workspace(call.id, call.name) {
                Route::Client
            } else {
                Route::Workspace(workspace::parse(call.name, call.args, self.max_timeout_s()))
            }
        } else if let Some(chat) = &self.agents
            && agents::is_agent_tool(call.name)
        {
            match agents::parse(call.name, call.args) {
                Ok(agent_call) => Route::Agent(chat, agent_call),
                Err(message) => Route::Answer(ToolOutcome::error(message)),
            }
        } else {
            Route::Answer(ToolOutcome::error(format!("Unknown tool: {}", call.name)))
        }
    }

    /// The longest `timeout_s` a `shell` call may ask for (seconds).
    fn max_timeout_s(&self) -> u64 {
        600
    }

    /// Routes `calls` of generation attempt `attempt` and runs the MCP ones
    /// in parallel (the workspace ones in call order, beside them). With
    /// `preview`, every result also streams into that episode as a `tool`
    /// part: the answered ones at once, the others as each completes.
    ///
    /// # Errors
    /// `Stale` or `Cancelled` from the workspace calls (their reads are
    /// fenced).
    pub(super) async fn run(
        &self,
        task: &TaskContext,
        attempt: Episode,
        calls: &[ToolCall<'_>],
        preview: Option<&OpenEpisode<'_>>,
    ) -> TaskResult<ToolStep> {
        let stream_result = |call: &ToolCall<'_>, outcome: &ToolOutcome| {
            if let Some(episode) = preview {
                episode.add(
                    ChatRole::Tool,
                    PartDelta::ToolResult {
                        tool_call_id: call.id.to_owned(),
                        tool_name: call.name.to_owned(),
                        result: outcome.result.clone(),
                        is_error: outcome.is_error,
                    },
                );
            }
        };
        let mut step = ToolStep::default();
        let mut outcomes: Vec<Option<ToolOutcome>> = Vec::new();
        let mut runs: Vec<BoxFuture<'_, (usize, ToolOutcome)>> = Vec::new();
        let mut workspace_calls: Vec<(usize, Result<WorkspaceCall, String>)> = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let key = IdempotencyKey {
                chat_id: task.chat_id,
                history_version: attempt.history_version,
                generation_attempt: attempt.generation_attempt,
                tool_call_id: call.id.to_owned(),
            };
            match self.route(call) {
                Route::Answer(outcome) => outcomes.push(Some(outcome)),
                Route::Agent(chat, AgentCall::Spawn { prompt, title }) => {
                    match Spawn::new(chat, &key, prompt, title) {
                        Ok(mut spawn) => {
                            // The result names the child created in the
                            // step's commit (a retried commit that finds
                            // the child of an earlier one points it there).
                            let child = Uuid::new_v4();
                            spawn.input.id = Some(child);
                            step.spawns.push(spawn);
                            outcomes.push(Some(ToolOutcome {
                                result: Spawn::result(child),
                                is_error: false,
                            }));
                        }
                        Err(outcome) => outcomes.push(Some(outcome)),
                    }
                }
                Route::Agent(chat, AgentCall::Wait { chat_id, timeout }) => {
                    outcomes.push(None);
                    match call.made_at {
                        // The call is committed first, without a result;
                        // the next step waits (and a takeover waits again).
                        None => step.deferred = true,
                        Some(since) => runs.push(Box::pin(async move {
                            let outcome =
                                agents::wait(task, chat.id, chat_id, timeout, since).await;
                            stream_result(call, &outcome);
                            (i, outcome)
                        })),
                    }
                }
                Route::Agent(chat, AgentCall::Message { chat_id, text }) => {
                    outcomes.push(None);
                    runs.push(Box::pin(async move {
                        let outcome = agents::message(task, chat, chat_id, text, &key).await;
                        stream_result(call, &outcome);
                        (i, outcome)
                    }));
                }
                Route::Agent(chat, AgentCall::Close { chat_id }) => {
                    outcomes.push(None);
                    runs.push(Box::pin(async move {
                        let outcome = agents::close(task, chat.id, chat_id).await;
                        stream_result(call, &outcome);
                        (i, outcome)
                    }));
                }
                Route::Client => {
                    step.waits_for_client = true;
                    outcomes.push(None);
                }
                Route::Workspace(call) => {
                    outcomes.push(None);
                    workspace_calls.push((i, call));
                }
                Route::Mcp(tool) => {
                    outcomes.push(None);
                    runs.push(Box::pin(async move {
                        let outcome = task
                            .ctx
                            .mcp
                            .call(&tool.server, &tool.name, call.args, &key)
                            .await;
                        stream_result(call, &outcome);
                        (i, outcome)
                    }));
                }
            }
        }
        for (call, outcome) in calls.iter().zip(&outcomes) {
            if let Some(outcome) = outcome {
                stream_result(call, outcome);
            }
        }
        let workspace_run = async {
            if workspace_calls.is_empty() {
                return Ok(None);
            }
            let (indices, parsed): (Vec<usize>, Vec<_>) = workspace_calls.into_iter().unzip();
            let run = workspace::run(task, parsed).await?;
            for (i, outcome) in indices.iter().zip(&run.outcomes) {
                stream_result(&calls[*i], outcome);
            }
            TaskResult::Ok(Some((indices, run)))
        };
        let (ran, workspace_run) =
            futures::future::join(futures::future::join_all(runs), workspace_run).await;
        for (i, outcome) in ran {
            outcomes[i] = Some(outcome);
        }
        if let Some((indices, run)) = workspace_run? {
            for (i, outcome) in indices.into_iter().zip(run.outcomes) {
                outcomes[i] = Some(outcome);
            }
            step.workspace = run.changes;
        }
        for (call, outcome) in calls.iter().zip(outcomes) {
            if let Some(outcome) = outcome {
                step.results
                    .push(NewMessage::tool(vec![MessagePart::ToolResult {
                        tool_call_id: call.id.to_owned(),
                        tool_name: call.name.to_owned(),
                        result: outcome.result,
                        is_error: outcome.is_error,
                    }]));
            }
        }
        Ok(step)
    }
}
