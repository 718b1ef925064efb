//! `chatd chat branches CHAT`: a chat's message tree, every branch, `GET
//! /chats/{chat}/messages/tree` (API.md "Branches, regenerate and fork").

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde_json::Value;
use uuid::Uuid;

use super::Session;
use crate::chat_cli::output::stdout;
use crate::chat_cli::wire::{MessageTree, TreeNode};

/// How many characters of a message's text a line shows.
const PREVIEW_CHARS: usize = 60;

/// Print a chat's messages on every branch, one line each: `*` marks the
/// active branch, then the id, the role, `[n/m]` when the message is the
/// n-th of m alternatives (edits, regenerations), and the start of its
/// text.
///
/// A run of messages that follow one another stays at one indent; the
/// alternatives at a branch point are indented one step further, each
/// followed by its own branch. `switch CHAT MESSAGE` makes the branch
/// through MESSAGE the active one.
#[derive(Debug, Args)]
pub struct BranchesArgs {
    /// The chat id.
    chat: Uuid,
    /// Print the API's JSON (`{nodes: [...]}`) instead.
    #[arg(long)]
    json: bool,
}

impl BranchesArgs {
    /// Prints the tree (or the API's JSON with `--json`).
    ///
    /// # Errors
    /// As [`crate::chat_cli::client::Client::call`]; standard output
    /// cannot be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let path = format!("/chats/{}/messages/tree", self.chat);
        let tree: Value = session.client.call(Method::GET, &path, None).await?;
        if self.json {
            stdout(format!("{tree}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let tree: MessageTree = serde_json::from_value(tree).context("decoding the tree")?;
        stdout(format_tree(&tree.nodes))?;
        Ok(ExitCode::SUCCESS)
    }
}

/// The tree as `branches` prints it: `* ` (active) or two spaces, two
/// spaces per branch point above the message, `ID ROLE [n/m]: PREVIEW`.
/// Children are in id order. Iterative, so a long chat cannot exhaust the
/// stack.
///
/// The server gives each message its nearest ancestor that the tree shows;
/// should a parent be missing all the same (a message only the model
/// reads, from a server that names it), the message hangs under the newest
/// message before that parent: on the active branch when it is active
/// itself (the active branch is one chain, so that is its real ancestor),
/// else of any branch; with none, it is a first message.
pub fn format_tree(nodes: &[TreeNode]) -> String {
    let known: HashSet<i64> = nodes.iter().map(|n| n.id).collect();
    let mut all: Vec<i64> = known.iter().copied().collect();
    all.sort_unstable();
    let mut active: Vec<i64> = nodes.iter().filter(|n| n.active).map(|n| n.id).collect();
    active.sort_unstable();
    // The newest id of `ids` below `hidden`.
    let before = |ids: &[i64], hidden: i64| {
        let at = ids.partition_point(|id| *id < hidden);
        at.checked_sub(1).map(|i| ids[i])
    };
    // Parent (None: the chat's start) → children, ascending by id.
    let mut children: HashMap<Option<i64>, Vec<&TreeNode>> = HashMap::new();
    for node in nodes {
        let parent = match node.parent_id {
            Some(p) if !known.contains(&p) => before(if node.active { &active } else { &all }, p),
            parent => parent,
        };
        children.entry(parent).or_default().push(node);
    }
    for list in children.values_mut() {
        list.sort_by_key(|n| n.id);
    }
    let mut out = String::new();
    let mut stack: Vec<Line<'_>> = Vec::new();
    push_children(&mut stack, children.get(&None), 0);
    while let Some((node, depth, position)) = stack.pop() {
        let marker = if node.active { '*' } else { ' ' };
        let indent = "  ".repeat(depth);
        let position = position
            .map(|(n, m)| format!(" [{n}/{m}]"))
            .unwrap_or_default();
        out.push_str(&format!(
            "{marker} {indent}{} {}{position}: {}\n",
            node.id,
            node.role.as_str(),
            preview(node.preview.as_deref().unwrap_or_default())
        ));
        push_children(&mut stack, children.get(&Some(node.id)), depth);
    }
    out
}

/// A line to print: the message, its depth, and its position among its
/// siblings (`(n, m)`, when there are m > 1).
type Line<'a> = (&'a TreeNode, usize, Option<(usize, usize)>);

/// Pushes `kids` so that they pop in id order: one child at `depth` (a
/// linear run), several one step deeper with their positions.
fn push_children<'a>(stack: &mut Vec<Line<'a>>, kids: Option<&Vec<&'a TreeNode>>, depth: usize) {
    let Some(kids) = kids else {
        return;
    };
    match kids.as_slice() {
        [only] => stack.push((only, depth, None)),
        many => {
            let m = many.len();
            for (i, kid) in many.iter().enumerate().rev() {
                stack.push((kid, depth + 1, Some((i + 1, m))));
            }
        }
    }
}

/// The start of a message's text on one line: whitespace runs as one
/// space, at most [`PREVIEW_CHARS`] characters (`…` when cut).
fn preview(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= PREVIEW_CHARS {
        return flat;
    }
    let mut cut: String = flat.chars().take(PREVIEW_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nodes(value: Value) -> Vec<TreeNode> {
        serde_json::from_value::<MessageTree>(json!({ "nodes": value }))
            .unwrap()
            .nodes
    }

    #[test]
    fn a_linear_chat_stays_at_one_indent() {
        let tree = nodes(json!([
            {"id": 1, "parent_id": null, "role": "user", "preview": "hi", "active": true,
             "created_at": "t"},
            {"id": 2, "parent_id": 1, "role": "assistant", "preview": "hello\nthere",
             "active": true, "created_at": "t"},
            {"id": 3, "parent_id": 2, "role": "assistant", "preview": null,
             "active": true, "created_at": "t"},
        ]));
        assert_eq!(
            format_tree(&tree),
            "* 1 user: hi\n\
             * 2 assistant: hello there\n\
             * 3 assistant: \n"
        );
    }

    #[test]
    fn branch_points_indent_their_alternatives_and_number_them() {
        // 3 was edited into 6 (active); 4 was regenerated as 5.
        let tree = nodes(json!([
            {"id": 1, "parent_id": null, "role": "user", "preview": "q1", "active": true},
            {"id": 2, "parent_id": 1, "role": "assistant", "preview": "a1", "active": true},
            {"id": 3, "parent_id": 2, "role": "user", "preview": "q2", "active": false},
            {"id": 4, "parent_id": 3, "role": "assistant", "preview": "a2", "active": false},
            {"id": 5, "parent_id": 3, "role": "assistant", "preview": "a2 again",
             "active": false},
            {"id": 6, "parent_id": 2, "role": "user", "preview": "q2 edited", "active": true},
            {"id": 7, "parent_id": 6, "role": "assistant", "preview": "a3", "active": true},
        ]));
        assert_eq!(
            format_tree(&tree),
            "* 1 user: q1\n\
             * 2 assistant: a1\n\
             \x20   3 user [1/2]: q2\n\
             \x20     4 assistant [1/2]: a2\n\
             \x20     5 assistant [2/2]: a2 again\n\
             *   6 user [2/2]: q2 edited\n\
             *   7 assistant: a3\n"
        );
    }

    #[test]
    fn edited_first_messages_are_alternatives() {
        // 1 was edited into 3.
        let tree = nodes(json!([
            {"id": 1, "parent_id": null, "role": "user", "preview": "a", "active": false},
            {"id": 2, "parent_id": 1, "role": "assistant", "preview": "b", "active": false},
            {"id": 3, "parent_id": null, "role": "user", "preview": "c", "active": true},
        ]));
        assert_eq!(
            format_tree(&tree),
            "    1 user [1/2]: a\n\
             \x20   2 assistant: b\n\
             *   3 user [2/2]: c\n"
        );
    }

    #[test]
    fn a_message_after_a_hidden_one_hangs_under_the_newest_shown_before_it() {
        // 5 and 9 are summaries the model reads (not in the tree); 4 is on
        // an inactive branch created after the active 3.
        let tree = nodes(json!([
            {"id": 1, "parent_id": null, "role": "user", "preview": "q", "active": true},
            {"id": 2, "parent_id": 1, "role": "assistant", "preview": "a", "active": false},
            {"id": 3, "parent_id": 1, "role": "assistant", "preview": "b", "active": true},
            {"id": 4, "parent_id": 2, "role": "user", "preview": "c", "active": false},
            {"id": 6, "parent_id": 5, "role": "user", "preview": "d", "active": true},
            {"id": 10, "parent_id": 9, "role": "user", "preview": "e", "active": false},
        ]));
        assert_eq!(
            format_tree(&tree),
            "* 1 user: q\n\
             \x20   2 assistant [1/2]: a\n\
             \x20   4 user: c\n\
             *   3 assistant [2/2]: b\n\
             *   6 user: d\n\
             \x20   10 user: e\n"
        );
    }

    #[test]
    fn long_previews_are_cut_and_empty_trees_print_nothing() {
        let long = "x".repeat(100);
        assert_eq!(preview(&long).chars().count(), PREVIEW_CHARS);
        assert!(preview(&long).ends_with('…'));
        assert_eq!(preview("  a \t b  "), "a b");
        assert_eq!(format_tree(&[]), "");
    }

    #[test]
    fn a_long_chat_does_not_recurse() {
        let chain: Vec<Value> = (1..=100_000)
            .map(|id| {
                json!({"id": id, "parent_id": if id == 1 { Value::Null } else { json!(id - 1) },
                       "role": "user", "preview": "", "active": true})
            })
            .collect();
        let text = format_tree(&nodes(Value::Array(chain)));
        assert_eq!(text.lines().count(), 100_000);
        assert_eq!(text.lines().last(), Some("* 100000 user: "));
    }
}
