//! `chatd usage [--user USER] [--json]`: `GET /users/{user}/usage`, a
//! user's usage of the month against their limits (API.md "Limits, budgets
//! and the token lifecycle"), printed as one line per figure with its limit
//! (spend and tokens against the monthly budgets, when there are any;
//! running chats; stored files; the request rate), the period and when the
//! budgets reset; `--json` prints the API's object.
//!
//! `USER` is `me` (the default), a user id, or a username (looked up with
//! `GET /users`, which needs an admin's token); another user's usage needs
//! an admin's token (`403` otherwise). Errors are printed on standard error
//! as by `chatd chat` (exit 1).

use std::process::ExitCode;

use chatd_api::usage::UserUsage;
use clap::Args;

use crate::chat_cli::ServerArgs;
use crate::chat_cli::cmd::show_user_resource;
use crate::chat_cli::output::{rfc3339, utc_minute};

/// Flags of `chatd usage`.
#[derive(Debug, Args)]
pub struct UsageArgs {
    #[command(flatten)]
    server: ServerArgs,
    /// Whose usage: `me`, a user id, or a username (another user's needs an
    /// admin's token).
    #[arg(long, value_name = "USER", default_value = "me")]
    user: String,
    /// Print the API's JSON object instead.
    #[arg(long)]
    json: bool,
}

/// Runs `chatd usage`.
pub async fn run(args: UsageArgs) -> ExitCode {
    show_user_resource(
        &args.server,
        &args.user,
        "usage",
        args.json,
        "the usage",
        format_usage,
    )
    .await
}

/// The usage report: the period, then one line per figure against its
/// limit, and a warning line per budget used up.
fn format_usage(u: &UserUsage) -> String {
    let (start, end) = (rfc3339(&u.period_start), rfc3339(&u.period_end));
    let reset = utc_minute(&end);
    let tokens = u.input_tokens + u.output_tokens;
    let mut lines = vec![format!(
        "period         {} to {} (UTC; the budgets reset at {reset})",
        date(&start),
        date(&end),
    )];
    let spend = money(u.spent_micros);
    lines.push(match u.limits.monthly_budget_micros {
        Some(budget) => format!(
            "spend          {spend} of {} ({})",
            money(budget),
            percent(u.spent_micros, budget)
        ),
        None => format!("spend          {spend} (no budget)"),
    });
    let detail = format!(
        "{} in, {} out",
        count(u.input_tokens),
        count(u.output_tokens)
    );
    lines.push(match u.limits.monthly_token_budget {
        Some(budget) => format!(
            "tokens         {} of {} ({}; {detail})",
            count(tokens),
            count(budget),
            percent(tokens, budget)
        ),
        None => format!("tokens         {} (no budget; {detail})", count(tokens)),
    });
    lines.push(format!(
        "running chats  {} of {}",
        count(u.running_chats),
        count(i64::from(u.limits.max_running_chats))
    ));
    lines.push(format!(
        "storage        {} of {}",
        bytes(u.storage_bytes),
        bytes(u.limits.max_storage_bytes)
    ));
    lines.push(format!(
        "request rate   at most {} requests per minute",
        count(i64::from(u.limits.requests_per_minute))
    ));
    let mut used_up = Vec::new();
    if u.limits
        .monthly_budget_micros
        .is_some_and(|b| u.spent_micros >= b)
    {
        used_up.push("spend");
    }
    if u.limits.monthly_token_budget.is_some_and(|b| tokens >= b) {
        used_up.push("token");
    }
    for budget in used_up {
        lines.push(format!(
            "the monthly {budget} budget is used up: new turns are refused until {reset} \
             (an admin can raise it)"
        ));
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// The date of an RFC 3339 time (`2027-01-01`).
fn date(time: &str) -> &str {
    time.get(..10).unwrap_or(time)
}

/// Micro-dollars as dollars: two decimals, more when a fraction of a cent
/// would otherwise be lost (`$0.0012`).
fn money(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let micros = micros.unsigned_abs();
    let whole = count_u(micros / 1_000_000);
    let fraction = format!("{:06}", micros % 1_000_000);
    let fraction = fraction.trim_end_matches('0');
    let fraction = format!("{fraction:0<2}");
    format!("{sign}${whole}.{fraction}")
}

/// A share as a whole percentage (`0%` of a zero limit when nothing is used).
fn percent(used: i64, limit: i64) -> String {
    if limit <= 0 {
        return if used > 0 {
            "over".to_owned()
        } else {
            "0%".to_owned()
        };
    }
    format!("{}%", used.saturating_mul(100) / limit)
}

/// A count with thousands separators (`12,345`).
fn count(n: i64) -> String {
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{}", count_u(n.unsigned_abs()))
}

fn count_u(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes in binary units (`512 B`, `1.5 KiB`, `1 GiB`).
fn bytes(n: i64) -> String {
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    let units = ["KiB", "MiB", "GiB", "TiB"];
    while value >= 1024.0 && unit < units.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    let text = if value < 10.0 && value.fract() != 0.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.0}")
    };
    format!("{} {}", text.trim_end_matches(".0"), units[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(
        spent: i64,
        input: i64,
        output: i64,
        money_budget: Option<i64>,
        tokens: Option<i64>,
    ) -> UserUsage {
        UserUsage {
            period_start: "2026-12-01T00:00:00Z".parse().unwrap(),
            period_end: "2027-01-01T00:00:00Z".parse().unwrap(),
            spent_micros: spent,
            input_tokens: input,
            output_tokens: output,
            running_chats: 2,
            storage_bytes: 1536,
            limits: chatd_core::limits::UserLimits {
                max_running_chats: 8,
                requests_per_minute: 600,
                monthly_budget_micros: money_budget,
                monthly_token_budget: tokens,
                max_storage_bytes: 1 << 30,
            },
        }
    }

    #[test]
    fn the_usage_report_shows_each_figure_against_its_limit() {
        let text = format_usage(&usage(
            1_230_000,
            10_000,
            2_345,
            Some(5_000_000),
            Some(100_000),
        ));
        assert_eq!(
            text,
            "period         2026-12-01 to 2027-01-01 (UTC; the budgets reset at 2027-01-01 00:00 UTC)\n\
             spend          $1.23 of $5.00 (24%)\n\
             tokens         12,345 of 100,000 (12%; 10,000 in, 2,345 out)\n\
             running chats  2 of 8\n\
             storage        1.5 KiB of 1 GiB\n\
             request rate   at most 600 requests per minute\n"
        );
    }

    #[test]
    fn without_budgets_the_report_shows_just_the_figures_and_a_used_up_budget_is_named() {
        let text = format_usage(&usage(1_234, 10, 5, None, None));
        assert!(
            text.contains("spend          $0.001234 (no budget)\n"),
            "{text}"
        );
        assert!(
            text.contains("tokens         15 (no budget; 10 in, 5 out)\n"),
            "{text}"
        );
        assert!(!text.contains("used up"), "{text}");

        let text = format_usage(&usage(0, 10, 5, Some(1_000_000), Some(15)));
        assert!(
            text.contains("tokens         15 of 15 (100%; 10 in, 5 out)\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "the monthly token budget is used up: new turns are refused until \
                 2027-01-01 00:00 UTC (an admin can raise it)\n"
            ),
            "{text}"
        );
        assert!(!text.contains("spend budget is used up"), "{text}");
    }

    #[test]
    fn amounts_counts_and_sizes_are_formatted_for_people() {
        assert_eq!(money(0), "$0.00");
        assert_eq!(money(5_000_000), "$5.00");
        assert_eq!(money(1_234_567_890), "$1,234.56789");
        assert_eq!(money(10_000), "$0.01");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(999), "999");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1024 * 1024), "1 MiB");
        assert_eq!(bytes(1536 * 1024), "1.5 MiB");
        assert_eq!(percent(3, 0), "over");
        assert_eq!(
            utc_minute("2026-12-06T14:03:59.123456Z"),
            "2026-12-06 14:03 UTC"
        );
        assert_eq!(utc_minute("yesterday"), "yesterday");
    }
}
