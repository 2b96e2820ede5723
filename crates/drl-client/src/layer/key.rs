//! [`Key`]: the key of a [`Target`](super::Target), kept inline when short
//! (up to [`Key::INLINE`] bytes, which covers API keys, UUIDs and IP
//! addresses), so classifying a request allocates nothing.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use arrayvec::ArrayString;

/// A rate-limit key: a string, stored inline when it is at most
/// [`Key::INLINE`] bytes long and on the heap otherwise.
///
/// Built from `&str`, `String` and the like (`Key::from("tenant-7")`,
/// `"tenant-7".into()`), appended to with [`std::fmt::Write`], read as a
/// `&str` ([`Key::as_str`], `Deref`). Compares, hashes and prints as its
/// string.
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Inline(ArrayString<{ Key::INLINE }>),
    Heap(String),
}

impl Key {
    /// The longest key (in bytes) kept inline.
    pub const INLINE: usize = 56;

    /// The empty key.
    pub const fn new() -> Self {
        Self(Repr::Inline(ArrayString::new_const()))
    }

    /// A copy of `s`.
    #[inline]
    fn copy_of(s: &str) -> Self {
        match ArrayString::from(s) {
            Ok(a) => Self(Repr::Inline(a)),
            Err(_) => Self(Repr::Heap(s.to_owned())),
        }
    }

    /// The key as a string.
    #[inline]
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(a) => a.as_str(),
            Repr::Heap(s) => s,
        }
    }

    /// The key's length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Inline(a) => a.len(),
            Repr::Heap(s) => s.len(),
        }
    }

    /// True for the empty key.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the key lives on the heap (longer than [`Key::INLINE`]).
    pub fn is_heap(&self) -> bool {
        matches!(self.0, Repr::Heap(_))
    }

    /// The key as an owned `String`.
    pub fn into_string(self) -> String {
        match self.0 {
            Repr::Heap(s) => s,
            Repr::Inline(a) => a.as_str().to_owned(),
        }
    }
}

impl Default for Key {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Write for Key {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match &mut self.0 {
            Repr::Inline(a) => {
                if a.try_push_str(s).is_err() {
                    let mut heap = String::with_capacity(a.len() + s.len());
                    heap.push_str(a);
                    heap.push_str(s);
                    self.0 = Repr::Heap(heap);
                }
            }
            Repr::Heap(h) => h.push_str(s),
        }
        Ok(())
    }
}

impl Deref for Key {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}
impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialEq<str> for Key {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}
impl PartialEq<&str> for Key {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}
impl PartialEq<String> for Key {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}
impl PartialEq<Key> for str {
    fn eq(&self, other: &Key) -> bool {
        self == other.as_str()
    }
}
impl PartialEq<Key> for &str {
    fn eq(&self, other: &Key) -> bool {
        *self == other.as_str()
    }
}
impl PartialEq<Key> for String {
    fn eq(&self, other: &Key) -> bool {
        self == other.as_str()
    }
}

impl std::str::FromStr for Key {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::copy_of(s))
    }
}

impl From<&str> for Key {
    #[inline]
    fn from(s: &str) -> Self {
        Self::copy_of(s)
    }
}
impl From<&String> for Key {
    fn from(s: &String) -> Self {
        Self::copy_of(s)
    }
}
impl From<&mut str> for Key {
    fn from(s: &mut str) -> Self {
        Self::copy_of(s)
    }
}
impl From<String> for Key {
    /// Inline when short (the `String` is dropped), else the `String`
    /// itself.
    fn from(s: String) -> Self {
        if s.len() <= Key::INLINE {
            Self::copy_of(&s)
        } else {
            Self(Repr::Heap(s))
        }
    }
}
impl From<Box<str>> for Key {
    fn from(s: Box<str>) -> Self {
        Self::from(String::from(s))
    }
}
impl From<Cow<'_, str>> for Key {
    fn from(s: Cow<'_, str>) -> Self {
        match s {
            Cow::Borrowed(b) => Self::copy_of(b),
            Cow::Owned(o) => Self::from(o),
        }
    }
}
impl From<char> for Key {
    fn from(c: char) -> Self {
        Self::copy_of(c.encode_utf8(&mut [0; 4]))
    }
}
impl From<Key> for String {
    fn from(k: Key) -> Self {
        k.into_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Write;

    #[test]
    fn short_keys_are_inline_and_long_ones_on_the_heap() {
        let short = "k".repeat(Key::INLINE);
        let long = "k".repeat(Key::INLINE + 1);
        assert!(!Key::from(short.as_str()).is_heap());
        assert!(Key::from(long.as_str()).is_heap());
        assert!(!Key::from(short.clone()).is_heap());
        assert_eq!(Key::from(long.clone()), long);
        assert_eq!(Key::from(short.clone()).into_string(), short);
        assert_eq!(std::mem::size_of::<Key>(), 64);
        let k = Key::from("tenant-7");
        assert_eq!(format!("{k} {k:?}"), "tenant-7 \"tenant-7\"");
        assert!(Key::new().is_empty());
        assert_eq!(Key::from('é'), "é");
    }

    proptest::proptest! {
        /// Any string survives the trip through a key, from either
        /// constructor, and compares, orders and hashes as itself.
        #[test]
        fn a_key_is_its_string(s in "\\PC{0,80}", t in "\\PC{0,80}") {
            let (k, l) = (Key::from(s.as_str()), Key::from(t.clone()));
            proptest::prop_assert_eq!(k.as_str(), s.as_str());
            proptest::prop_assert_eq!(k.len(), s.len());
            proptest::prop_assert_eq!(k.is_heap(), s.len() > Key::INLINE);
            proptest::prop_assert_eq!(l.as_str(), t.as_str());
            proptest::prop_assert_eq!(k == l, s == t);
            proptest::prop_assert_eq!(k.cmp(&l), s.cmp(&t));
            let h = |x: &dyn Fn(&mut std::collections::hash_map::DefaultHasher)| {
                let mut st = std::collections::hash_map::DefaultHasher::new();
                x(&mut st);
                st.finish()
            };
            proptest::prop_assert_eq!(h(&|st| k.hash(st)), h(&|st| s.as_str().hash(st)));
        }

        /// Appending with `fmt::Write` equals appending to a `String`,
        /// across the inline/heap boundary.
        #[test]
        fn writing_appends(parts in proptest::collection::vec("\\PC{0,30}", 0..6)) {
            let (mut k, mut s) = (Key::new(), String::new());
            for p in &parts {
                write!(k, "{p}").unwrap();
                s.push_str(p);
                proptest::prop_assert_eq!(k.as_str(), s.as_str());
            }
            proptest::prop_assert_eq!(k.is_heap(), s.len() > Key::INLINE);
        }
    }
}
