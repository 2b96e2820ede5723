//! Cluster keys: the shared secret read from a file or the environment
//! ([`ClusterKey`]), the frame key derived from it ([`FrameKey`]: an
//! XChaCha20-Poly1305 key and a short public [`KeyId`]), and the set of keys
//! a transport sends with and accepts ([`KeyRing`]) during a key rotation.
//!
//! Derivation (HKDF-SHA256, RFC 5869, one output block each):
//!
//! ```text
//! prk      = HMAC-SHA256(salt = "drl cluster frame v2", key file bytes, trimmed)
//! aead key = HMAC-SHA256(prk, "drl cluster frame aead key" || 0x01)        (32 bytes)
//! key id   = HMAC-SHA256(prk, "drl cluster frame key id"   || 0x01)[0..4]  (4 bytes)
//! ```
//!
//! The key id travels in clear in every frame header so that a receiver
//! holding several keys knows which one to try; it reveals nothing usable
//! about the key (it is a one-way function of it, and a separate output of
//! the KDF from the AEAD key).

use chacha20poly1305::{KeyInit, XChaCha20Poly1305};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Minimum key length, bytes.
pub const MIN_KEY_LEN: usize = 16;

/// Most keys a [`KeyRing`] holds (the send key and the keys accepted on
/// receive only, during a rotation).
pub const MAX_KEYS: usize = 8;

/// HKDF salt: fixes the purpose (cluster frames, format version 2).
const SALT: &[u8] = b"drl cluster frame v2";
const INFO_AEAD: &[u8] = b"drl cluster frame aead key";
const INFO_ID: &[u8] = b"drl cluster frame key id";

/// The shared cluster key (at least 16 bytes). Its bytes are never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ClusterKey(Vec<u8>);

impl std::fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClusterKey({} bytes, id {})", self.0.len(), self.id())
    }
}

impl ClusterKey {
    /// A key from raw bytes (surrounding ASCII whitespace is trimmed).
    pub fn new(bytes: &[u8]) -> Result<Self, KeyError> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort(trimmed.len()));
        }
        Ok(Self(trimmed.to_vec()))
    }

    /// Reads the key from a file (its whole content, trimmed).
    pub fn from_file(path: &std::path::Path) -> Result<Self, KeyError> {
        let bytes = std::fs::read(path).map_err(|e| KeyError::Read {
            path: path.display().to_string(),
            why: e.to_string(),
        })?;
        Self::new(&bytes).map_err(|e| match e {
            KeyError::TooShort(n) => KeyError::FileTooShort {
                path: path.display().to_string(),
                len: n,
            },
            other => other,
        })
    }

    /// Reads the key from the environment variable `var`.
    pub fn from_env(var: &str) -> Result<Self, KeyError> {
        let v = std::env::var_os(var).ok_or_else(|| KeyError::MissingEnv(var.to_string()))?;
        Self::new(v.as_encoded_bytes())
    }

    /// The public id of this key (what frames sealed with it carry).
    pub fn id(&self) -> KeyId {
        let prk = hkdf_extract(&self.0);
        let okm = hkdf_expand(&prk, INFO_ID);
        KeyId([okm[0], okm[1], okm[2], okm[3]])
    }

    /// The frame key derived from this key.
    pub fn frame_key(&self) -> FrameKey {
        let prk = hkdf_extract(&self.0);
        let aead_key = hkdf_expand(&prk, INFO_AEAD);
        FrameKey {
            id: self.id(),
            aead: XChaCha20Poly1305::new(&aead_key.into()),
        }
    }
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length: `new_from_slice` cannot fail.
    let mut m = match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC takes keys of any length"),
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

fn hkdf_extract(ikm: &[u8]) -> [u8; 32] {
    hmac(SALT, &[ikm])
}

fn hkdf_expand(prk: &[u8; 32], info: &[u8]) -> [u8; 32] {
    hmac(prk, &[info, &[1u8]])
}

/// The short public id of a key (4 bytes, shown as 8 hex digits).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub [u8; 4]);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A key ready to seal and open frames: the AEAD and its public id.
#[derive(Clone)]
pub struct FrameKey {
    id: KeyId,
    pub(crate) aead: XChaCha20Poly1305,
}

impl std::fmt::Debug for FrameKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameKey({})", self.id)
    }
}

impl FrameKey {
    /// The key's public id.
    pub fn id(&self) -> KeyId {
        self.id
    }
}

/// The keys of a transport: one to send with (also accepted), and up to
/// [`MAX_KEYS`]` - 1` more accepted on receive only (the keys being rotated
/// in or out). Cheap to clone.
///
/// Rotation, on every node: (1) add the new key as a receive-only key;
/// (2) once every node accepts it, make it the send key and keep the old
/// one receive-only; (3) once every node sends with the new key, drop the
/// old one. See docs/gossip.md, "Security of cluster traffic".
#[derive(Clone)]
pub struct KeyRing {
    /// `keys[0]` is the send key.
    keys: std::sync::Arc<[FrameKey]>,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyRing(send {}, accept [", self.send_id())?;
        for (i, k) in self.keys.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}", k.id)?;
        }
        f.write_str("])")
    }
}

impl KeyRing {
    /// Sends with `send`; accepts `send` and every key of `previous`.
    /// Refuses more than [`MAX_KEYS`] keys in all, and a key given twice
    /// (or two keys with the same id, which a fresh random key makes
    /// vanishingly unlikely: generate another key).
    pub fn new(
        send: ClusterKey,
        previous: impl IntoIterator<Item = ClusterKey>,
    ) -> Result<Self, KeyError> {
        let mut raw = vec![send];
        raw.extend(previous);
        if raw.len() > MAX_KEYS {
            return Err(KeyError::TooMany(raw.len()));
        }
        let mut keys: Vec<FrameKey> = Vec::with_capacity(raw.len());
        for (i, k) in raw.iter().enumerate() {
            if raw[..i].contains(k) {
                return Err(KeyError::Duplicate(i));
            }
            let fk = k.frame_key();
            if keys.iter().any(|o| o.id == fk.id) {
                return Err(KeyError::IdCollision(fk.id.to_string()));
            }
            keys.push(fk);
        }
        Ok(Self { keys: keys.into() })
    }

    /// Sends with and accepts `key` only.
    pub fn single(key: ClusterKey) -> Self {
        Self {
            keys: vec![key.frame_key()].into(),
        }
    }

    /// The key frames are sent with.
    pub fn send_key(&self) -> &FrameKey {
        &self.keys[0]
    }

    /// The id of the send key.
    pub fn send_id(&self) -> KeyId {
        self.keys[0].id
    }

    /// The ids of every accepted key, the send key first.
    pub fn ids(&self) -> Vec<KeyId> {
        self.keys.iter().map(|k| k.id).collect()
    }

    /// The accepted key with id `id`.
    pub fn find(&self, id: KeyId) -> Option<&FrameKey> {
        self.keys.iter().find(|k| k.id == id)
    }
}

impl From<ClusterKey> for KeyRing {
    fn from(key: ClusterKey) -> Self {
        Self::single(key)
    }
}

/// The cluster key could not be loaded, or a key set is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Fewer than [`MIN_KEY_LEN`] bytes.
    #[error(
        "cluster key too short: {0} bytes, need at least 16 (e.g. `head -c 32 /dev/urandom | base64`)"
    )]
    TooShort(usize),
    /// A key file holds fewer than [`MIN_KEY_LEN`] bytes.
    #[error(
        "cluster key file {path} too short: {len} bytes, need at least 16 (e.g. `head -c 32 /dev/urandom | base64 > {path}`)"
    )]
    FileTooShort {
        /// The file.
        path: String,
        /// Its length, trimmed.
        len: usize,
    },
    /// The key file could not be read.
    #[error("cannot read cluster key file {path}: {why}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        why: String,
    },
    /// The environment variable is not set.
    #[error("cluster key environment variable {0} is not set")]
    MissingEnv(String),
    /// The same key appears twice in a key set (the index of the second
    /// one: 0 is the send key, 1 the first previous key, ...).
    #[error(
        "cluster key #{0} of the key set (0 = the send key, then the previous keys in order) repeats an earlier one: every key must be distinct"
    )]
    Duplicate(usize),
    /// Two keys derive the same key id.
    #[error("two cluster keys share the key id {0}: generate a new key")]
    IdCollision(String),
    /// More than [`MAX_KEYS`] keys.
    #[error("{0} cluster keys given, at most 8 (the send key and 7 previous keys)")]
    TooMany(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> ClusterKey {
        ClusterKey::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn keys_are_checked() {
        assert!(matches!(
            ClusterKey::new(b"  short \n"),
            Err(KeyError::TooShort(5))
        ));
        assert!(ClusterKey::new(b"sixteen bytes!!!\n").is_ok());
        assert!(matches!(
            ClusterKey::from_env("DRL_NODE_TEST_SURELY_UNSET"),
            Err(KeyError::MissingEnv(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k");
        std::fs::write(&p, "a file key of 32 bytes.........\n").unwrap();
        let key = ClusterKey::from_file(&p).unwrap();
        let shown = format!("{key:?}");
        assert!(shown.contains("31 bytes"), "{shown}");
        assert!(!shown.contains("file key"), "the key is never printed");
        std::fs::write(&p, "short\n").unwrap();
        let e = ClusterKey::from_file(&p).unwrap_err();
        assert!(
            e.to_string().contains(&p.display().to_string()) && e.to_string().contains("5 bytes"),
            "{e}"
        );
    }

    #[test]
    fn derivation_is_stable_and_separates_keys() {
        let a = k("cluster key number one, 32 bytes");
        let b = k("cluster key number two, 32 bytes");
        assert_eq!(a.id(), a.clone().id());
        assert_ne!(a.id(), b.id());
        // Trimmed whitespace does not change the key.
        assert_eq!(
            ClusterKey::new(b"  cluster key number one, 32 bytes\n")
                .unwrap()
                .id(),
            a.id()
        );
        assert_eq!(a.id().to_string().len(), 8);
    }

    #[test]
    fn key_rings_refuse_duplicates_and_too_many() {
        let a = k("cluster key number one, 32 bytes");
        let b = k("cluster key number two, 32 bytes");
        let r = KeyRing::new(a.clone(), [b.clone()]).unwrap();
        assert_eq!(r.send_id(), a.id());
        assert_eq!(r.ids(), vec![a.id(), b.id()]);
        assert!(r.find(b.id()).is_some());
        assert!(r.find(KeyId([0; 4])).is_none() || a.id().0 == [0; 4] || b.id().0 == [0; 4]);
        assert_eq!(
            KeyRing::new(a.clone(), [b.clone(), a.clone()]).unwrap_err(),
            KeyError::Duplicate(2)
        );
        let many: Vec<ClusterKey> = (0..8)
            .map(|i| k(&format!("previous key {i:04} .....")))
            .collect();
        assert_eq!(
            KeyRing::new(a.clone(), many.clone()).unwrap_err(),
            KeyError::TooMany(9)
        );
        assert!(KeyRing::new(a, many[..7].to_vec()).is_ok());
        let shown = format!("{r:?}");
        assert!(shown.contains(&b.id().to_string()), "{shown}");
    }
}
