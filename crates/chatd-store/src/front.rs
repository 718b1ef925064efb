//! The public front of the store's SQL (issue 32, ARCHITECTURE.md "chatd-store").
//!
//! Every statement lives in the crate-private `queries` module, one file per
//! table. Other crates change chat state only through [`crate::ChatMachine`]
//! and [`crate::Store`]'s transitions; what they may call directly is this
//! list: reads that need no lock, single-statement writes of tables outside
//! the chat state machine (users, tokens, files, the usage ledger,
//! idempotency keys, replica bookkeeping), and the few reads the worker runs
//! inside a transition's transaction. A handler never opens a transaction
//! and composes queries itself: such work is an operation of the store
//! (for example [`users::patch`], [`files::store_upload`],
//! [`users::bootstrap_admin`]).
//!
//! Each module here is named after its table and re-exports the items of
//! the matching `queries` module; their docs (row shapes, errors, the API.md
//! section) are on the items.

/// `chats`: reads, the metadata and sub-agent queries, and the worker's
/// acquisition queries (spec "Acquisition").
pub mod chats {
    pub use crate::queries::chats::{
        ChatFilter, ChatVersions, ChildProgress, LockMode, MetadataChanges, NotDeletable,
        acquisition_candidates, child_by_spawn_key, child_count, child_progress, delete_family,
        family_holds_slot, is_owned_by, list, list_shared, lock_owner_room, next_lease_expiry,
        owned_by_worker, requires_action_remaining_secs, select, select_many, set_title_if_default,
        subtree_members, update_metadata, versions,
    };
}

/// `chat_messages`: the history reads of the API and the generation loop.
pub mod messages {
    pub use crate::queries::messages::{
        Cursor, TreeNode, active_history, changed_since, count_visible_between, from_id, scan,
        select, tail_contents, tree, visible,
    };
}

/// Full-text search over messages (API.md "Sign-in, search, sharing and
/// export": `GET /api/v2/search`).
pub mod search {
    pub use crate::queries::search::{
        GREATER_THAN, LESS_THAN, MARK_START, MARK_STOP, SearchCursor, SearchHit, search,
    };
}

/// `chat_responses` and `ai_sdk_chats`: the compatible protocols' ids
/// (API.md "Compatible protocols"). Responses are recorded in the bundle
/// that starts their turn ([`crate::ChatTx::record_response`]).
pub mod responses {
    pub use crate::queries::responses::{
        NewResponse, ResponseRow, TurnOptions, after, ai_sdk_chat, latest, reserved_id_usable,
        select, turn_options,
    };
}

/// `chat_workspace_files`: the committed workspaces (API.md "Workspaces and
/// provider-hosted tools"). A step's changes are written only with the step
/// ([`crate::ChatTx::write_workspace`]); a fork copies them.
pub mod workspaces {
    pub use crate::queries::workspaces::{
        EntryKind, WorkspaceChange, WorkspaceEntry, all_contents, bytes_of_owner, contents, file,
        manifest,
    };
}

/// `chat_queued_messages`: reads of the queue.
pub mod queue {
    pub use crate::queries::queue::{index_of, list, select};
}

/// `files` and `file_chunks` (API.md "Files").
pub mod files {
    pub use crate::queries::files::{
        CHUNK_BYTES, DEFAULT_MAX_FILE_LINKS, DeleteOutcome, FileRow, Storage, chunk,
        delete_expired_unlinked, delete_unlinked, file_ids, is_owned_by, linked_contents,
        list_owned, select, storage,
    };
    pub use crate::uploads::{UploadError, UploadOutcome, store_upload};
}

/// The usage ledger (API.md "Limits, budgets and the token lifecycle").
pub mod usage {
    pub use crate::queries::usage::{
        Exceeded, PeriodUsage, add, exceeded, of_chat_owner, of_user, period, report,
    };
}

/// `send_receipts`: the stored answer of an idempotent send.
pub mod send_receipts {
    pub use crate::queries::send_receipts::select;
}

/// `users` (API.md "Authentication and authorization").
pub mod users {
    pub use crate::accounts::{
        IssueOutcome, PasswordOutcome, PatchOutcome, bootstrap_admin, issue_token, patch,
        set_password, set_password_by_name,
    };
    pub use crate::queries::users::{
        UserPatch, UserRow, create_or_promote, insert, list, password_hash, select,
        with_password_by_name,
    };
}

/// `api_tokens` (API.md "Limits, budgets and the token lifecycle").
pub mod tokens {
    pub use crate::queries::tokens::{
        TokenRow, authenticate, cap_member_lifetimes, delete, insert, list, user_by_secret_hash,
    };
}

/// `user_sessions`: browser sessions (API.md "Sign-in, search, sharing and
/// export").
pub mod sessions {
    pub use crate::queries::sessions::{
        SessionAuth, TOUCH_GRANULARITY_SECONDS, authenticate, delete, delete_expired,
        delete_for_user, insert, is_valid,
    };
}

/// `chat_shares`: read-only shares of chats (API.md "Sign-in, search,
/// sharing and export").
pub mod shares {
    pub use crate::queries::shares::{ShareRow, can_read, delete, insert, list};
}

/// `replicas`: the replicas of the cluster and their advertised URLs.
pub mod replicas {
    pub use crate::queries::replicas::{ReplicaRow, advertise_url, delete, list, prune, upsert};
}

/// `cluster_settings`: values every replica must share.
pub mod cluster_settings {
    pub use crate::queries::cluster_settings::{insert_if_absent, select};
}

/// `runner_heartbeats`: the runners' liveness (spec "Heartbeats").
pub mod heartbeats {
    pub use crate::queries::heartbeats::{
        delete_stale, intact, is_fresh, recover_lost, upsert_many,
    };
}

/// `idempotency_keys` (API.md "Idempotency").
pub mod idempotency_keys {
    pub use crate::claims::{ClaimStart, OpenClaim, begin_claim};
    pub use crate::queries::idempotency_keys::{StoredResponse, claim_pool, delete_expired};
}

/// The migration bookkeeping `chatd` reads at start-up and `/readyz`.
pub mod migrations {
    pub use crate::queries::migrations::{all_applied, applied_count};
}

/// Databases of the server (the embedded PostgreSQL's set-up).
pub mod database {
    pub use crate::queries::database::{DUPLICATE_DATABASE, commits_blocked, create, exists};
}

/// `providers`: the read of a generation (writes are [`crate::admin`]'s).
pub mod providers {
    pub use crate::queries::providers::{ProviderDef, ProviderRow, redact_url, select};
}

/// `model_configs`: a chat's model config and the checks of a new chat's
/// choice (writes are [`crate::admin`]'s).
pub mod model_configs {
    pub use crate::queries::model_configs::{
        ModelConfigDef, ModelConfigRow, default_id, for_chat, is_enabled,
    };
}

/// `mcp_servers`: the enabled servers of a generation and the check of a
/// new chat's choice (writes are
/// [`crate::admin`]'s).
pub mod mcp_servers {
    pub use crate::queries::mcp_servers::{
        McpServerDef, McpServerRow, enabled_in_order, existing_ids,
    };
}

/// The crate-private statements that chatd-store's own integration tests
/// (`tests/it`) call to set up or inspect states no public operation
/// reaches alone. Not part of the front: no other crate may use it (the
/// test `no_other_crate_uses_the_store_internals` in `tests/it/boundary.rs`
/// fails when one does), and it changes with the SQL.
#[doc(hidden)]
pub mod internals {
    pub use crate::queries::{begin, set_read_only_snapshot};

    /// `chats`.
    pub mod chats {
        pub use crate::front::chats::*;
        pub use crate::queries::chats::{held_chat_count, lock_and_bump, select_facts};
    }
    /// `chat_messages`.
    pub mod messages {
        pub use crate::front::messages::*;
        pub use crate::queries::messages::{context_entries, insert, refresh_context};
    }
    /// `chat_queued_messages`.
    pub mod queue {
        pub use crate::front::queue::*;
        pub use crate::queries::queue::{QueueEnd, enqueue};
    }
    /// `providers`.
    pub mod providers {
        pub use crate::front::providers::*;
        pub use crate::queries::providers::{list, select_for_update, upsert};
    }
    /// `mcp_servers`.
    pub mod mcp_servers {
        pub use crate::front::mcp_servers::*;
        pub use crate::queries::mcp_servers::{insert, list, update, upsert_by_slug};
    }
    pub use crate::front::{heartbeats, usage, users};
}
