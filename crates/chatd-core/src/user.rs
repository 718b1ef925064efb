//! A user's [`Role`] (API.md "Authentication and authorization"; stored in
//! `users.role`, whose `CHECK` constraint admits exactly these spellings).

use serde::{Deserialize, Serialize};

/// A user's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// May administer providers, models, MCP servers, users and replicas, and
    /// see every chat.
    Admin,
    /// Sees and mutates only their own chats.
    Member,
}

impl Role {
    /// Database and wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    /// Parses the database and wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        [Role::Admin, Role::Member]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

crate::spelling::parse_impls!(Role, "role");
