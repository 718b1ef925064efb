//! SQL of the usage ledger `user_usage` (migration `0013_usage_ledger.sql`;
//! API.md "Limits, budgets and the token lifecycle": "Budgets" and
//! `GET /users/{user}/usage`).
//!
//! The ledger is written by the database itself: a trigger on
//! `chat_messages` adds the usage and cost of every row that stores a model
//! call's result (answers, compaction summaries; sub-agents are chats of
//! the same owner) in the transaction that commits it, and [`add`] adds
//! the calls whose usage no message stores (titles). Periods are calendar
//! months in UTC, decided by the database clock (`now()`).
//!
//! Budgets are checked with [`of_user`] (one statement: the user's budget
//! columns and the sum of the period's at most 16 ledger rows, a
//! primary-key range scan) and [`OwnerUsage::exceeded`].

use chatd_core::limits::{LimitDefaults, LimitOverrides, UserLimits};
use chrono::{DateTime, Months, Utc};
use sqlx::PgExecutor;
use uuid::Uuid;

/// What a user used in the current period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct PeriodUsage {
    /// The first instant of the calendar month (UTC), database time.
    pub period_start: DateTime<Utc>,
    /// Spend in micro-dollars (from model prices; calls of unpriced models
    /// count 0).
    pub spent_micros: i64,
    /// Prompt tokens: uncached input plus cache reads and writes.
    pub input_tokens: i64,
    /// Output tokens (reasoning included).
    pub output_tokens: i64,
}

impl PeriodUsage {
    /// The first instant after the period: the first instant of the next
    /// month (UTC), when the budgets reset.
    pub fn period_end(&self) -> DateTime<Utc> {
        self.period_start
            .checked_add_months(Months::new(1))
            .unwrap_or(self.period_start)
    }

    /// Input plus output tokens: what the token budget counts.
    pub fn tokens(&self) -> i64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

/// A user's limit overrides and their usage of the current period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnerUsage {
    /// The user.
    pub user_id: Uuid,
    /// The limit columns of the user's row.
    pub overrides: LimitOverrides,
    /// Whether the user is disabled (`users.disabled`): no model call is
    /// made for a disabled user's chats ([`OwnerUsage::exceeded`]).
    pub disabled: bool,
    /// The period's totals.
    pub usage: PeriodUsage,
}

/// Which budget is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// The monthly spend budget (`monthly_budget_micros`).
    Spend,
    /// The monthly token budget (`monthly_token_budget`).
    Tokens,
    /// No budget: the owner's account is disabled (`users.disabled`), so
    /// their chats make no more model calls (`limit` and `used` are 0).
    Disabled,
}

/// A budget at or over its limit ([`OwnerUsage::exceeded`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exceeded {
    /// Which budget.
    pub budget: Budget,
    /// The budget (micro-dollars or tokens).
    pub limit: i64,
    /// What the period used of it (micro-dollars or tokens).
    pub used: i64,
    /// When the period ends and the budget resets (the first instant of the
    /// next month, UTC).
    pub resets_at: DateTime<Utc>,
}

impl Exceeded {
    /// A sentence naming the budget, what was used of it and when it
    /// resets: the `detail` of the `429` and the message of the
    /// `usage_limit` error.
    pub fn message(&self) -> String {
        let resets = self.resets_at.format("%Y-%m-%dT%H:%M:%SZ");
        match self.budget {
            Budget::Spend => format!(
                "The monthly spend budget of {} micro-dollars (${:.2}) is used up ({} micro-dollars \
                 spent this month); it resets at {resets}.",
                self.limit,
                self.limit as f64 / 1e6,
                self.used
            ),
            Budget::Tokens => format!(
                "The monthly token budget of {} tokens is used up ({} input and output tokens this \
                 month); it resets at {resets}.",
                self.limit, self.used
            ),
            Budget::Disabled => {
                "The owner's account is disabled: no model calls are made for its chats.".to_owned()
            }
        }
    }
}

impl OwnerUsage {
    /// The first budget (spend, then tokens) the period's usage has reached
    /// or passed, with the user's effective limits from `defaults`; `None`
    /// when both are below their budget or have none. A budget of 0 is
    /// always reached. A disabled user is always refused
    /// ([`Budget::Disabled`]): disabling an account stops its spending, the
    /// turns it had running and queued included.
    pub fn exceeded(&self, defaults: &LimitDefaults) -> Option<Exceeded> {
        if self.disabled {
            return Some(Exceeded {
                budget: Budget::Disabled,
                limit: 0,
                used: 0,
                resets_at: self.usage.period_end(),
            });
        }
        exceeded(&defaults.resolve(&self.overrides), &self.usage)
    }
}

/// The first budget of `limits` that `usage` has reached (see
/// [`OwnerUsage::exceeded`]).
pub fn exceeded(limits: &UserLimits, usage: &PeriodUsage) -> Option<Exceeded> {
    let resets_at = usage.period_end();
    if let Some(limit) = limits.monthly_budget_micros
        && usage.spent_micros >= limit
    {
        return Some(Exceeded {
            budget: Budget::Spend,
            limit,
            used: usage.spent_micros,
            resets_at,
        });
    }
    if let Some(limit) = limits.monthly_token_budget
        && usage.tokens() >= limit
    {
        return Some(Exceeded {
            budget: Budget::Tokens,
            limit,
            used: usage.tokens(),
            resets_at,
        });
    }
    None
}

/// `sqlx::query!` of a statement that reads the budget columns of the user
/// of alias `u` and the period's sums over its ledger rows (one primary-key
/// range scan): `owner_query!($extra, $from, $where, arg)` selects them,
/// then `$extra` (more columns, `""` for none), `FROM $from` (which binds
/// the user as `u`) with the joins they need, then `$where`. Every piece is
/// a string literal (sqlx's macros take no `concat!`); `owner_of!` makes
/// the [`OwnerUsage`] of a record.
macro_rules! owner_query {
    ($extra:tt, $from:tt, $where:tt, $arg:expr) => {
        sqlx::query!(
            r#"SELECT u.id, u.disabled, u.max_running_chats, u.requests_per_minute,
                      u.monthly_budget_micros, u.monthly_token_budget, u.max_storage_bytes,
                      p.period_start AS "period_start!",
                      coalesce(s.spent_micros, 0)::int8 AS "spent_micros!",
                      coalesce(s.input_tokens, 0)::int8 AS "input_tokens!",
                      coalesce(s.output_tokens, 0)::int8 AS "output_tokens!""#
                + $extra
                + " FROM "
                + $from
                + " CROSS JOIN (SELECT date_trunc('month', now(), 'UTC') AS period_start) p
                   CROSS JOIN LATERAL (
                       SELECT sum(l.spent_micros) AS spent_micros, sum(l.input_tokens) AS input_tokens,
                              sum(l.output_tokens) AS output_tokens
                       FROM user_usage l WHERE l.user_id = u.id AND l.period_start = p.period_start) s "
                + $where,
            $arg
        )
    };
}

/// The [`OwnerUsage`] of a record `$r` of an `owner_query!`.
macro_rules! owner_of {
    ($r:ident) => {
        OwnerUsage {
            user_id: $r.id,
            overrides: LimitOverrides {
                max_running_chats: $r.max_running_chats,
                requests_per_minute: $r.requests_per_minute,
                monthly_budget_micros: $r.monthly_budget_micros,
                monthly_token_budget: $r.monthly_token_budget,
                max_storage_bytes: $r.max_storage_bytes,
            },
            disabled: $r.disabled,
            usage: PeriodUsage {
                period_start: $r.period_start,
                spent_micros: $r.spent_micros,
                input_tokens: $r.input_tokens,
                output_tokens: $r.output_tokens,
            },
        }
    };
}

/// User `user_id`'s limit overrides and current period usage, in one
/// statement; `None` when the user does not exist. What the worker reads
/// before every model call and the API before every chat creation, send and
/// edit.
///
/// # Errors
/// Database errors.
pub async fn of_user(conn: impl PgExecutor<'_>, user_id: Uuid) -> sqlx::Result<Option<OwnerUsage>> {
    let row = owner_query!("", "users u", "WHERE u.id = $1", user_id)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(|r| owner_of!(r)))
}

/// The current period's totals of user `user_id` (zeros for a user with
/// no calls, or no such user): for a caller whose limits are known already
/// (the API's authenticated user). One primary-key range scan.
///
/// # Errors
/// Database errors.
pub async fn period(conn: impl PgExecutor<'_>, user_id: Uuid) -> sqlx::Result<PeriodUsage> {
    sqlx::query_as!(
        PeriodUsage,
        r#"SELECT p.period_start AS "period_start!",
                  coalesce(s.spent_micros, 0)::int8 AS "spent_micros!",
                  coalesce(s.input_tokens, 0)::int8 AS "input_tokens!",
                  coalesce(s.output_tokens, 0)::int8 AS "output_tokens!"
           FROM (SELECT $1::uuid AS id) u
           CROSS JOIN (SELECT date_trunc('month', now(), 'UTC') AS period_start) p
           CROSS JOIN LATERAL (
               SELECT sum(l.spent_micros) AS spent_micros, sum(l.input_tokens) AS input_tokens,
                      sum(l.output_tokens) AS output_tokens
               FROM user_usage l WHERE l.user_id = u.id AND l.period_start = p.period_start) s"#,
        user_id,
    )
    .fetch_one(conn)
    .await
}

/// [`of_user`] of the owner of chat `chat_id`; `None` when the chat does
/// not exist.
///
/// # Errors
/// Database errors.
pub async fn of_chat_owner(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
) -> sqlx::Result<Option<OwnerUsage>> {
    let row = owner_query!(
        "",
        "chats c JOIN users u ON u.id = c.owner_id",
        "WHERE c.id = $1",
        chat_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| owner_of!(r)))
}

/// Adds one model call of chat `chat_id` whose usage no message stores (a
/// title generation) to its owner's current period: `spent_micros`
/// (micro-dollars), `input_tokens` (the whole prompt), `output_tokens`.
/// Nothing when the chat does not exist. Run it in the transaction that
/// stores the call's result, so that the two commit together.
///
/// # Errors
/// Database errors.
pub async fn add(
    conn: impl PgExecutor<'_>,
    chat_id: Uuid,
    spent_micros: i64,
    input_tokens: i64,
    output_tokens: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "SELECT chatd_add_usage($1, $2, $3, $4)",
        chat_id,
        spent_micros,
        input_tokens,
        output_tokens,
    )
    .execute(conn)
    .await
    .map(|_| ())
}

/// The report of `GET /users/{user}/usage` ([`report`]), limits aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageReport {
    /// The user's limit overrides and the period's totals.
    pub owner: OwnerUsage,
    /// The user's chats held by a runner now: runnable (`running`,
    /// `interrupting`, `requires_action`, not archived) with a worker.
    pub running_chats: i64,
    /// Bytes of the user's files (`chat_files.size`).
    pub storage_bytes: i64,
}

/// The usage report of user `user_id` in one statement; `None` when the
/// user does not exist.
///
/// # Errors
/// Database errors.
pub async fn report(conn: impl PgExecutor<'_>, user_id: Uuid) -> sqlx::Result<Option<UsageReport>> {
    let row = owner_query!(
        r#",
         (SELECT count(*) FROM chats c
          WHERE c.owner_id = u.id AND c.worker_id IS NOT NULL AND NOT c.archived
            AND c.status IN ('running', 'interrupting', 'requires_action')) AS "running_chats!",
         (coalesce((SELECT sum(f.size) FROM chat_files f WHERE f.owner_id = u.id), 0)
          + coalesce((SELECT sum(c.workspace_bytes) FROM chats c
                      WHERE c.owner_id = u.id AND c.workspace_bytes IS NOT NULL), 0))::int8
             AS "storage_bytes!""#,
        "users u",
        "WHERE u.id = $1",
        user_id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(|r| UsageReport {
        running_chats: r.running_chats,
        storage_bytes: r.storage_bytes,
        owner: owner_of!(r),
    }))
}

#[cfg(test)]
#[allow(unused)] // as in doc tests: the shared set-up binds more than each example uses
mod examples {
    //! The worked examples of this module's functions, each on a fresh
    //! database (doc tests until `queries` became `pub(crate)`).

    #[test]
    fn message_a_sentence_naming_the_budget_what_was_used_of_it_and_when_it() {
        use crate::queries::usage::{Budget, Exceeded};
        let resets_at = "2027-01-01T00:00:00Z".parse().unwrap();
        let e = Exceeded {
            budget: Budget::Tokens,
            limit: 1000,
            used: 1200,
            resets_at,
        };
        assert_eq!(
            e.message(),
            "The monthly token budget of 1000 tokens is used up (1200 input and output tokens \
             this month); it resets at 2027-01-01T00:00:00Z."
        );
    }

    #[test]
    fn exceeded_the_first_budget_spend_then_tokens_the_period_s_usage_has() {
        use crate::queries::usage::{Budget, OwnerUsage, PeriodUsage};
        use chatd_core::limits::{LimitDefaults, LimitOverrides};
        let usage = PeriodUsage {
            period_start: "2026-12-01T00:00:00Z".parse().unwrap(),
            spent_micros: 500,
            input_tokens: 80,
            output_tokens: 20,
        };
        let owner = |budget, tokens| OwnerUsage {
            user_id: uuid::Uuid::nil(),
            overrides: LimitOverrides {
                monthly_budget_micros: budget,
                monthly_token_budget: tokens,
                ..Default::default()
            },
            disabled: false,
            usage,
        };
        let defaults = LimitDefaults::default();
        assert_eq!(owner(None, None).exceeded(&defaults), None);
        assert_eq!(owner(Some(501), Some(101)).exceeded(&defaults), None);
        assert_eq!(
            owner(Some(500), None).exceeded(&defaults).unwrap().budget,
            Budget::Spend
        );
        let tokens = owner(None, Some(100)).exceeded(&defaults).unwrap();
        assert_eq!((tokens.budget, tokens.used), (Budget::Tokens, 100));
        assert_eq!(tokens.resets_at.to_rfc3339(), "2027-01-01T00:00:00+00:00");
        let disabled = OwnerUsage {
            disabled: true,
            ..owner(None, None)
        };
        assert_eq!(
            disabled.exceeded(&defaults).unwrap().budget,
            Budget::Disabled
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn of_user_user_user_id_s_limit_overrides_and_current_period_usage_in_one()
    -> anyhow::Result<()> {
        use crate::queries::usage;
        use chatd_core::limits::LimitDefaults;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let created = fx.create_chat("hi").await?;
        usage::add(pool, created.chat.id, 1_500, 100, 20).await?;
        let owner_usage = usage::of_user(pool, owner).await?.expect("the user exists");
        assert_eq!(
            (
                owner_usage.usage.spent_micros,
                owner_usage.usage.input_tokens,
                owner_usage.usage.output_tokens
            ),
            (1_500, 100, 20)
        );
        assert_eq!(
            owner_usage.exceeded(&LimitDefaults::default()),
            None,
            "no budget by default"
        );
        sqlx::query("UPDATE users SET monthly_token_budget = 120 WHERE id = $1")
            .bind(owner)
            .execute(pool)
            .await?;
        let owner_usage = usage::of_user(pool, owner).await?.unwrap();
        assert!(owner_usage.exceeded(&LimitDefaults::default()).is_some());
        assert!(usage::of_user(pool, uuid::Uuid::new_v4()).await?.is_none());
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn period_the_current_period_s_totals_of_user_user_id_zeros_for_a_user_with()
    -> anyhow::Result<()> {
        use crate::queries::usage;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let created = fx.create_chat("hi").await?;
        usage::add(pool, created.chat.id, 5, 4, 3).await?;
        let period = usage::period(pool, owner).await?;
        assert_eq!((period.spent_micros, period.tokens()), (5, 7));
        assert_eq!(usage::period(pool, uuid::Uuid::new_v4()).await?.tokens(), 0);
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn of_chat_owner_of_user_of_the_owner_of_chat_chat_id() -> anyhow::Result<()> {
        use crate::queries::usage;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let created = fx.create_chat("hi").await?;
        let of_chat = usage::of_chat_owner(pool, created.chat.id).await?.unwrap();
        assert_eq!(of_chat.user_id, owner);
        assert_eq!(of_chat.usage.spent_micros, 0);
        assert!(
            usage::of_chat_owner(pool, uuid::Uuid::new_v4())
                .await?
                .is_none()
        );
        Ok(())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn report_the_usage_report_of_user_user_id_in_one_statement() -> anyhow::Result<()> {
        use crate::queries::usage;
        let fx = crate::test_fixture::StoreFixture::new().await?;
        let (pool, owner) = (fx.pool(), fx.owner);
        let created = fx.create_chat("hi").await?;
        usage::add(pool, created.chat.id, 7, 3, 2).await?;
        let report = usage::report(pool, owner).await?.unwrap();
        assert_eq!(report.owner.usage.spent_micros, 7);
        assert_eq!(
            (report.running_chats, report.storage_bytes),
            (0, 0),
            "no worker holds it"
        );
        Ok(())
    }
}
