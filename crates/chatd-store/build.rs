//! Rebuilds the crate when a migration is added or changed: `sqlx::migrate!`
//! embeds `migrations/` at compile time, and cargo does not watch that
//! directory by itself (sqlx's documented recipe).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
