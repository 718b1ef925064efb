//! The cipher of secrets at rest (see the parent module): keys, sealing
//! and opening values, and the errors.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use chacha20poly1305::aead::{Aead as _, Generate as _, KeyInit as _, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

/// The prefix of a sealed value; the version says how the rest is built.
pub const PREFIX: &str = "enc:v1:";

/// Length of a key, in bytes.
pub const KEY_BYTES: usize = 32;

/// Length of a nonce (XChaCha20-Poly1305), in bytes.
const NONCE_BYTES: usize = 24;

/// Whether `stored` is a sealed value (starts with [`PREFIX`]).
///
/// # Example
///
/// ```
/// use chatd_store::secrets::{SecretKey, Secrets, is_sealed};
/// let secrets = Secrets::new(Some(SecretKey::from_bytes([7; 32])));
/// assert!(is_sealed(&secrets.seal("sk-1", "chat_providers.api_key:x")));
/// assert!(!is_sealed("sk-1"));
/// ```
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(PREFIX)
}

/// Why a key or a value could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The key text is not 32 bytes as hex or base64.
    #[error("the secret key must be 32 bytes written as 64 hex digits or as base64: {0}")]
    BadKey(String),
    /// A sealed value was read but no key is configured.
    #[error("{0} is encrypted but no secret key was given (--secret-key-file or CHATD_SECRET_KEY)")]
    NoKey(String),
    /// A sealed value does not open with the configured key.
    #[error(
        "{0} cannot be decrypted with the given secret key (--secret-key-file or CHATD_SECRET_KEY): it was encrypted with another key, or altered"
    )]
    WrongKey(String),
}

/// A 32-byte XChaCha20-Poly1305 key. Its `Debug` prints no key material.
#[derive(Clone)]
pub struct SecretKey {
    cipher: Arc<XChaCha20Poly1305>,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

impl SecretKey {
    /// The key made of `bytes`.
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        let cipher = XChaCha20Poly1305::new(&bytes.into());
        SecretKey {
            cipher: Arc::new(cipher),
        }
    }

    /// Parses a key written as 64 hex digits (either case) or as base64
    /// (standard alphabet, padded or not) of 32 bytes; whitespace around it
    /// (a file's final newline) is ignored. `openssl rand -hex 32` and
    /// `head -c 32 /dev/urandom | base64` make one.
    ///
    /// # Errors
    /// [`SecretError::BadKey`] saying what is wrong (never quoting the text).
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::secrets::SecretKey;
    /// assert!(SecretKey::parse(&"ab".repeat(32)).is_ok());
    /// assert!(SecretKey::parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n").is_ok());
    /// assert!(SecretKey::parse("too short").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(SecretError::BadKey("it is empty".into()));
        }
        let bytes = if text.len() == 2 * KEY_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..KEY_BYTES)
                .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
                .collect::<Result<Vec<u8>, _>>()
                .map_err(|_| SecretError::BadKey("invalid hex".into()))?
        } else {
            STANDARD
                .decode(text)
                .or_else(|_| STANDARD_NO_PAD.decode(text))
                .map_err(|_| SecretError::BadKey("neither 64 hex digits nor base64".into()))?
        };
        let bytes: [u8; KEY_BYTES] = bytes.try_into().map_err(|b: Vec<u8>| {
            SecretError::BadKey(format!("it decodes to {} bytes, not {KEY_BYTES}", b.len()))
        })?;
        Ok(SecretKey::from_bytes(bytes))
    }
}

/// The store's secret handling: a [`SecretKey`] or none (values are stored
/// in plain text). Cheap to clone; `Debug` says only whether a key is set.
#[derive(Clone, Default)]
pub struct Secrets {
    key: Option<SecretKey>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("encrypted", &self.key.is_some())
            .finish()
    }
}

impl Secrets {
    /// With `key`, values are sealed; without, stored as they are.
    pub fn new(key: Option<SecretKey>) -> Self {
        Secrets { key }
    }

    /// No key: values are stored in plain text.
    pub fn none() -> Self {
        Secrets::default()
    }

    /// Whether a key is configured.
    pub fn is_enabled(&self) -> bool {
        self.key.is_some()
    }

    /// `plaintext` as stored at `place` (`<table>.<column>:<row id>`, the
    /// associated data): sealed ([`PREFIX`] and base64) with a key, as it is
    /// without.
    ///
    /// # Example
    ///
    /// ```
    /// use chatd_store::secrets::{SecretKey, Secrets};
    /// let secrets = Secrets::new(Some(SecretKey::from_bytes([7; 32])));
    /// let stored = secrets.seal("sk-1", "chat_providers.api_key:a");
    /// assert!(stored.starts_with("enc:v1:") && !stored.contains("sk-1"));
    /// assert_eq!(secrets.open(&stored, "chat_providers.api_key:a").unwrap(), "sk-1");
    /// // Bound to its place: another row's value does not open here.
    /// assert!(secrets.open(&stored, "chat_providers.api_key:b").is_err());
    /// // Without a key, values are stored as they are.
    /// assert_eq!(Secrets::none().seal("sk-1", "chat_providers.api_key:a"), "sk-1");
    /// ```
    pub fn seal(&self, plaintext: &str, place: &str) -> String {
        let Some(key) = &self.key else {
            return plaintext.to_owned();
        };
        let nonce = XNonce::generate();
        let sealed = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: place.as_bytes(),
                },
            )
            // Only inputs of gigabytes fail; values are validated to 4 KiB
            // (API keys) and 256 entries of 4 KiB (maps).
            .expect("XChaCha20-Poly1305 seals any value of a sane size");
        let mut bytes = Vec::with_capacity(NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        format!("{PREFIX}{}", STANDARD.encode(bytes))
    }

    /// The plaintext of `stored` at `place`: a plain value as it is, a sealed
    /// one opened with the key.
    ///
    /// # Errors
    /// [`SecretError::NoKey`] for a sealed value without a key,
    /// [`SecretError::WrongKey`] when it does not open (another key, another
    /// place, or altered).
    pub fn open(&self, stored: &str, place: &str) -> Result<String, SecretError> {
        let Some(encoded) = stored.strip_prefix(PREFIX) else {
            return Ok(stored.to_owned());
        };
        let Some(key) = &self.key else {
            return Err(SecretError::NoKey(place.to_owned()));
        };
        let wrong = || SecretError::WrongKey(place.to_owned());
        let bytes = STANDARD.decode(encoded).map_err(|_| wrong())?;
        if bytes.len() < NONCE_BYTES {
            return Err(wrong());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce = XNonce::try_from(nonce).map_err(|_| wrong())?;
        let plain = key
            .cipher
            .decrypt(
                &nonce,
                Payload {
                    msg: sealed,
                    aad: place.as_bytes(),
                },
            )
            .map_err(|_| wrong())?;
        String::from_utf8(plain).map_err(|_| wrong())
    }
}

/// The associated data (and the name in errors) of column `column` of row
/// `id` of `table`.
pub(crate) fn place(table: &str, column: &str, id: uuid::Uuid) -> String {
    format!("{table}.{column}:{id}")
}

/// A decryption failure as the column-decode error of the query that read
/// it.
pub(crate) fn decode_error(column: &str, err: SecretError) -> sqlx::Error {
    sqlx::Error::ColumnDecode {
        index: column.to_owned(),
        source: Box::new(err),
    }
}

/// Why `prepare` (the parent module) refused to start.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The key is not the database's, or sealed values exist without a key.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// A database error.
    #[error("database error while preparing secrets: {0}")]
    Database(#[from] sqlx::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Secrets {
        Secrets::new(Some(SecretKey::from_bytes([byte; 32])))
    }

    #[test]
    fn sealed_values_round_trip_and_differ_each_time() {
        let s = key(3);
        let a = s.seal("sk-secret", "t.c:1");
        let b = s.seal("sk-secret", "t.c:1");
        assert_ne!(a, b, "a fresh nonce per value");
        assert!(!a.contains("sk-secret"));
        assert_eq!(s.open(&a, "t.c:1").unwrap(), "sk-secret");
        assert_eq!(s.open(&b, "t.c:1").unwrap(), "sk-secret");
    }

    #[test]
    fn a_sealed_value_does_not_open_with_another_key_place_or_without_a_key() {
        let sealed = key(3).seal("sk-secret", "t.c:1");
        assert_eq!(
            key(4).open(&sealed, "t.c:1"),
            Err(SecretError::WrongKey("t.c:1".into()))
        );
        assert!(key(3).open(&sealed, "t.c:2").is_err());
        assert_eq!(
            Secrets::none().open(&sealed, "t.c:1"),
            Err(SecretError::NoKey("t.c:1".into()))
        );
        let mut altered = sealed.clone();
        altered.pop();
        altered.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert!(key(3).open(&altered, "t.c:1").is_err());
        assert!(key(3).open("enc:v1:!!", "t.c:1").is_err());
        assert!(key(3).open("enc:v1:", "t.c:1").is_err());
    }

    #[test]
    fn plain_values_are_read_as_they_are() {
        assert_eq!(key(3).open("sk-plain", "t.c:1").unwrap(), "sk-plain");
        assert_eq!(
            Secrets::none().open("sk-plain", "t.c:1").unwrap(),
            "sk-plain"
        );
        assert_eq!(Secrets::none().seal("sk-plain", "t.c:1"), "sk-plain");
    }

    #[test]
    fn keys_parse_from_hex_and_base64_only_when_32_bytes() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        assert!(SecretKey::parse(hex).is_ok());
        assert!(SecretKey::parse(&format!("  {hex}\n")).is_ok());
        let b64 = STANDARD.encode([9u8; 32]);
        assert!(SecretKey::parse(&b64).is_ok());
        assert!(SecretKey::parse(b64.trim_end_matches('=')).is_ok());
        // The same key either way.
        let from_hex = Secrets::new(Some(SecretKey::parse(&"09".repeat(32)).unwrap()));
        let from_b64 = Secrets::new(Some(SecretKey::parse(&b64).unwrap()));
        assert_eq!(
            from_b64
                .open(&from_hex.seal("x", "t.c:1"), "t.c:1")
                .unwrap(),
            "x"
        );
        for bad in ["", "abc", &STANDARD.encode([1u8; 16]), &"zz".repeat(32)] {
            let err = SecretKey::parse(bad).unwrap_err();
            assert!(matches!(err, SecretError::BadKey(_)), "{bad:?}: {err}");
        }
        // Errors never quote the key text.
        let err = SecretKey::parse(&STANDARD.encode([5u8; 31])).unwrap_err();
        assert!(!err.to_string().contains(&STANDARD.encode([5u8; 31])));
    }

    #[test]
    fn debug_prints_no_key_material() {
        let bytes = [0xAB; 32];
        let secrets = Secrets::new(Some(SecretKey::from_bytes(bytes)));
        let text = format!("{secrets:?} {:?}", SecretKey::from_bytes(bytes));
        assert!(!text.to_lowercase().contains("abab"), "{text}");
        assert!(!text.contains("171"), "{text}");
        assert_eq!(format!("{secrets:?}"), "Secrets { encrypted: true }");
    }
}
