//! `chatd chat search QUERY [--limit N]`: `GET /search?q=&limit=&after=`
//! (API.md "Sign-in, search, sharing and export"): full-text search over
//! the caller's messages and those of the chats shared with them.

use std::collections::HashMap;
use std::io::IsTerminal as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use super::Session;
use crate::chat_cli::output::stdout;

/// Search the messages of your chats and of the chats shared with you,
/// best match first. Each hit prints the chat's title, the chat id and
/// the message id, then the matching passage with the matched words in
/// bold (on a terminal; `*word*` elsewhere or with NO_COLOR).
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// What to look for (1 to 500 characters); several words are joined
    /// by spaces.
    #[arg(required = true, value_name = "QUERY")]
    query: Vec<String>,
    /// How many hits (1..=50).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=50))]
    limit: u32,
    /// Continue after a previous page (the cursor the previous page
    /// printed).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
    /// Print the API's JSON instead.
    #[arg(long)]
    json: bool,
}

/// `GET /search`'s answer.
#[derive(Debug, Deserialize)]
struct SearchPage {
    results: Vec<Hit>,
    #[serde(default)]
    next: Option<Value>,
}

/// One hit of [`SearchPage`].
#[derive(Debug, Deserialize)]
struct Hit {
    chat_id: String,
    message_id: i64,
    #[serde(default)]
    snippet: String,
    /// The chat's title, when the server sends it (else fetched).
    #[serde(default)]
    chat_title: Option<String>,
}

impl SearchArgs {
    /// Prints the hits: `TITLE  (chat CHAT, message ID)` and the snippet
    /// indented below it; `no messages match` on standard error when none
    /// do; the command for the next page on standard error when there is
    /// one.
    ///
    /// # Errors
    /// A blank query (nothing is sent); as
    /// [`crate::chat_cli::client::Client::call`]; standard output cannot
    /// be written.
    pub async fn run(self, session: &Session) -> anyhow::Result<ExitCode> {
        let query = self.query.join(" ");
        anyhow::ensure!(!query.trim().is_empty(), "the query is empty");
        let mut url = url::Url::parse("http://x/search").context("building the search URL")?;
        url.query_pairs_mut()
            .append_pair("q", &query)
            .append_pair("limit", &self.limit.to_string());
        if let Some(after) = &self.after {
            url.query_pairs_mut().append_pair("after", after);
        }
        let path = format!("/search?{}", url.query().unwrap_or_default());
        let page: Value = session.client.call(Method::GET, &path, None).await?;
        if self.json {
            stdout(format!("{page}\n"))?;
            return Ok(ExitCode::SUCCESS);
        }
        let page: SearchPage =
            serde_json::from_value(page).context("decoding the search results")?;
        if page.results.is_empty() {
            eprintln!("no messages match {query:?}");
            return Ok(ExitCode::SUCCESS);
        }
        let bold = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
        let mut titles: HashMap<String, String> = HashMap::new();
        let mut text = String::new();
        for hit in &page.results {
            let title = match (&hit.chat_title, titles.get(&hit.chat_id)) {
                (Some(title), _) => title.clone(),
                (None, Some(title)) => title.clone(),
                (None, None) => {
                    let title = match session.client.chat(&hit.chat_id).await {
                        Ok(chat) => chat.title,
                        Err(_) => "(chat not readable)".to_owned(),
                    };
                    titles.insert(hit.chat_id.clone(), title.clone());
                    title
                }
            };
            text.push_str(&format!(
                "{title}  (chat {}, message {})\n    {}\n",
                hit.chat_id,
                hit.message_id,
                snippet_text(&hit.snippet, bold)
            ));
        }
        stdout(text)?;
        if let Some(next) = page.next.filter(|n| !n.is_null()) {
            let cursor = next
                .as_str()
                .map_or_else(|| next.to_string(), str::to_owned);
            eprintln!(
                "more: chatd chat search {query:?} --limit {} --after {cursor}",
                self.limit
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A search snippet for the terminal: the `<mark>`…`</mark>` highlights
/// as bold (ANSI `ESC[1m`…`ESC[22m`) when `bold`, else as `*`…`*`; HTML
/// entities decoded ([`unescape_html`]); runs of whitespace (line breaks
/// included) as one space.
pub fn snippet_text(snippet: &str, bold: bool) -> String {
    let (open, close) = if bold {
        ("\x1b[1m", "\x1b[22m")
    } else {
        ("*", "*")
    };
    let mut out = String::new();
    let mut rest = snippet;
    while !rest.is_empty() {
        let next = [("<mark>", open), ("</mark>", close)]
            .into_iter()
            .filter_map(|(tag, with)| rest.find(tag).map(|at| (at, tag, with)))
            .min_by_key(|(at, _, _)| *at);
        match next {
            Some((at, tag, with)) => {
                out.push_str(&unescape_html(&rest[..at]));
                out.push_str(with);
                rest = &rest[at + tag.len()..];
            }
            None => {
                out.push_str(&unescape_html(rest));
                rest = "";
            }
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Decodes HTML character references: `&amp;`, `&lt;`, `&gt;`, `&quot;`,
/// `&apos;`, `&nbsp;` and numeric ones (`&#39;`, `&#x27;`); anything else
/// (an unknown name, a bare `&`) is left as it is.
pub fn unescape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        // The name: up to 10 characters between the `&` and a `;`.
        let decoded = rest[1..]
            .char_indices()
            .take(11)
            .find(|&(_, c)| c == ';')
            .map(|(end, _)| &rest[1..1 + end])
            .and_then(|name| Some((decode_entity(name)?, name.len() + 2)));
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The character of the entity `name` (between `&` and `;`).
fn decode_entity(name: &str) -> Option<char> {
    match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        "nbsp" => Some('\u{a0}'),
        _ => {
            let code =
                if let Some(hex) = name.strip_prefix("#x").or_else(|| name.strip_prefix("#X")) {
                    u32::from_str_radix(hex, 16).ok()?
                } else {
                    name.strip_prefix('#')?.parse().ok()?
                };
            char::from_u32(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_become_bold_or_stars_and_entities_are_decoded() {
        let snippet = "use <mark>Vec</mark>&lt;u8&gt; &amp; <mark>Vec&#39;s</mark>\n  len";
        assert_eq!(snippet_text(snippet, false), "use *Vec*<u8> & *Vec's* len");
        assert_eq!(
            snippet_text(snippet, true),
            "use \x1b[1mVec\x1b[22m<u8> & \x1b[1mVec's\x1b[22m len"
        );
        // An escaped tag in the message's own text stays text.
        assert_eq!(
            snippet_text("&lt;mark&gt;x&lt;/mark&gt;", false),
            "<mark>x</mark>"
        );
    }

    #[test]
    fn unknown_or_broken_references_stay_as_they_are() {
        assert_eq!(
            unescape_html("a & b &bogus; &#x41;&#66;&quot;"),
            "a & b &bogus; AB\""
        );
        assert_eq!(unescape_html("&#xZZ; &"), "&#xZZ; &");
        assert_eq!(unescape_html("&apos;&#X27;"), "''");
    }
}
