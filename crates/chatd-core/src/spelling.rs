//! Parsing the database and wire spellings of the small enums stored in
//! text columns.

/// A string that is not a known spelling of a [`crate::ProviderKind`],
/// [`crate::McpTransport`], [`crate::ReasoningEffort`] or [`crate::Role`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownSpelling {
    /// What was being parsed (`provider kind`, ...).
    pub what: &'static str,
    /// The string.
    pub value: String,
}

/// `FromStr` and `TryFrom<String>` (the latter for `sqlx`'s
/// `#[sqlx(try_from = "String")]` on text columns) through `parse`.
macro_rules! parse_impls {
    ($ty:ty, $what:literal) => {
        impl ::std::str::FromStr for $ty {
            type Err = $crate::spelling::UnknownSpelling;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                <$ty>::parse(s).ok_or_else(|| $crate::spelling::UnknownSpelling {
                    what: $what,
                    value: s.to_owned(),
                })
            }
        }

        impl TryFrom<String> for $ty {
            type Error = $crate::spelling::UnknownSpelling;

            fn try_from(value: String) -> Result<Self, Self::Error> {
                value.parse()
            }
        }
    };
}
pub(crate) use parse_impls;
