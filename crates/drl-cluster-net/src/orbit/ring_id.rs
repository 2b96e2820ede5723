//! The id of a limit's ring on the wire.

use drl_store::LimitSpec;

/// The fingerprint that names a limit's ring on the wire: FNV-1a (64 bit)
/// over the limit's name, cap and window, so that nodes with different
/// definitions of a limit never exchange tables for it.
pub fn limit_id(spec: &LimitSpec) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for &x in b {
            h ^= u64::from(x);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(spec.name.as_bytes());
    eat(&[0xff]);
    for q in &spec.quotas {
        eat(&q.limit().to_le_bytes());
        eat(&q.window().to_le_bytes());
    }
    h
}
