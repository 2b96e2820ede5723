//! HPACK's Huffman code (RFC 7541, Appendix B), sans-IO.
//!
//! The code is canonical: codes of one length are consecutive, in symbol
//! order, and shorter codes come first. So the code lengths of the 257
//! symbols (256 bytes and EOS) are all the table holds; the codes and the
//! decoding tables are computed from them at compile time.

/// Code length in bits of each symbol, 0..=255 then EOS (RFC 7541,
/// Appendix B).
const LENGTHS: [u8; 257] = [
    // 0..=31: control characters.
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, //
    28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, //
    // ' ' ! " # $ % & ' ( ) * + , - . /
    6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, //
    // 0..9 : ; < = > ?
    5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12, 10, //
    // @ A..O
    13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, //
    // P..Z [ \ ] ^ _
    7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, //
    // ` a..o
    15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, //
    // p..z { | } ~ DEL
    6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, //
    // 128..=255
    20, 22, 20, 20, 22, 22, 22, 23, 22, 23, 23, 23, 23, 23, 24, 23, //
    24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, //
    22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, //
    21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23, //
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, //
    19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, //
    20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, //
    26, 27, 26, 26, 27, 27, 27, 27, 27, 28, 27, 27, 27, 27, 27, 26, //
    // EOS
    30,
];

/// The symbol of EOS.
const EOS: u16 = 256;
/// The longest code.
const MAX_LEN: usize = 30;

/// The canonical code, computed from [`LENGTHS`].
struct Code {
    /// Code of each symbol (right-aligned).
    codes: [u32; 257],
    /// First code of each length.
    first: [u32; MAX_LEN + 1],
    /// Number of codes of each length.
    count: [u32; MAX_LEN + 1],
    /// Index in `sorted` of the first symbol of each length.
    offset: [u32; MAX_LEN + 1],
    /// Symbols ordered by (length, symbol).
    sorted: [u16; 257],
}

const fn build() -> Code {
    let mut count = [0u32; MAX_LEN + 1];
    let mut i = 0;
    while i < 257 {
        count[LENGTHS[i] as usize] += 1;
        i += 1;
    }
    let mut first = [0u32; MAX_LEN + 1];
    let mut offset = [0u32; MAX_LEN + 1];
    let mut code = 0u32;
    let mut at = 0u32;
    let mut len = 1;
    while len <= MAX_LEN {
        code <<= 1;
        first[len] = code;
        offset[len] = at;
        code += count[len];
        at += count[len];
        len += 1;
    }
    let mut next = first;
    let mut codes = [0u32; 257];
    let mut sorted = [0u16; 257];
    let mut len = 1;
    while len <= MAX_LEN {
        let mut sym = 0;
        while sym < 257 {
            if LENGTHS[sym] as usize == len {
                codes[sym] = next[len];
                sorted[(offset[len] + next[len] - first[len]) as usize] = sym as u16;
                next[len] += 1;
            }
            sym += 1;
        }
        len += 1;
    }
    Code {
        codes,
        first,
        count,
        offset,
        sorted,
    }
}

static CODE: Code = build();

/// A Huffman-coded string that is not valid (RFC 7541, 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidHuffman;

/// Decodes `src`, appending the bytes to `dst`.
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), InvalidHuffman> {
    let code = &CODE;
    // Bits not yet decoded, right-aligned in `acc`.
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    let mut input = src.iter();
    loop {
        while bits <= 56 - 8 {
            match input.next() {
                Some(&b) => {
                    acc = (acc << 8) | u64::from(b);
                    bits += 8;
                }
                None => break,
            }
        }
        if bits == 0 {
            return Ok(());
        }
        // The next 32 bits, left-aligned (zeros past the end).
        let window = if bits >= 32 {
            (acc >> (bits - 32)) as u32
        } else {
            ((acc << (32 - bits)) & 0xffff_ffff) as u32
        };
        let mut len = 5;
        loop {
            let prefix = window >> (32 - len);
            if prefix < code.first[len] + code.count[len] {
                break;
            }
            len += 1;
            if len > MAX_LEN {
                return Err(InvalidHuffman);
            }
        }
        if len as u32 > bits {
            // What is left is padding: fewer than 8 bits, all ones (a
            // prefix of EOS).
            let pad = acc & ((1u64 << bits) - 1);
            if bits < 8 && pad == (1u64 << bits) - 1 {
                return Ok(());
            }
            return Err(InvalidHuffman);
        }
        let prefix = window >> (32 - len);
        let sym = code.sorted[(code.offset[len] + prefix - code.first[len]) as usize];
        if sym == EOS {
            return Err(InvalidHuffman);
        }
        dst.push(sym as u8);
        bits -= len as u32;
        acc &= (1u64 << bits) - 1;
    }
}

/// Encodes `src`, appending the code (padded with ones) to `dst`.
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits: u32 = 0;
    for &b in src {
        let len = u32::from(LENGTHS[b as usize]);
        acc = (acc << len) | u64::from(CODE.codes[b as usize]);
        bits += len;
        while bits >= 8 {
            bits -= 8;
            dst.push((acc >> bits) as u8);
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        let pad = 8 - bits;
        dst.push(((acc << pad) | ((1u64 << pad) - 1)) as u8);
    }
}

/// Bytes [`encode`] would write for `src`.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| LENGTHS[b as usize] as usize).sum();
    bits.div_ceil(8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn codes_match_the_rfc_table() {
        // A few rows of RFC 7541, Appendix B.
        assert_eq!(CODE.codes[0], 0x1ff8);
        assert_eq!(CODE.codes[1], 0x7f_ffd8);
        assert_eq!(CODE.codes[10], 0x3fff_fffc);
        assert_eq!(CODE.codes[b' ' as usize], 0x14);
        assert_eq!(CODE.codes[b'0' as usize], 0x0);
        assert_eq!(CODE.codes[b'z' as usize], 0x7b);
        assert_eq!(CODE.codes[b'~' as usize], 0x1ffd);
        assert_eq!(CODE.codes[200], 0x3ff_ffe2);
        assert_eq!(CODE.codes[255], 0x3ff_ffee);
        assert_eq!(CODE.codes[256], 0x3fff_ffff);
        // A complete code: the last code of the longest length is all ones.
        assert_eq!(CODE.first[30] + CODE.count[30] - 1, (1 << 30) - 1);
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc_examples() {
        // RFC 7541, C.4 and C.6.
        for (text, code) in [
            ("www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
            ("no-cache", "a8eb10649cbf"),
            ("custom-key", "25a849e95ba97d7f"),
            ("custom-value", "25a849e95bb8e8b4bf"),
            ("302", "6402"),
            ("private", "aec3771a4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07abe941054d444a8200595040b8166e082a62d1bff",
            ),
            (
                "https://www.example.com",
                "9d29ad171863c78f0b97c8e9ae82ae43d3",
            ),
        ] {
            let mut enc = Vec::new();
            encode(text.as_bytes(), &mut enc);
            assert_eq!(enc, hex(code), "{text}");
            assert_eq!(encoded_len(text.as_bytes()), enc.len());
            let mut dec = Vec::new();
            decode(&hex(code), &mut dec).unwrap();
            assert_eq!(dec, text.as_bytes());
        }
    }

    #[test]
    fn bad_padding_and_eos_fail() {
        let mut d = Vec::new();
        // 'a' (00011) then 3 zero bits: padding must be ones.
        assert_eq!(decode(&[0b0001_1000], &mut d), Err(InvalidHuffman));
        // Eight bits of padding.
        assert_eq!(decode(&[0b0001_1111, 0xff], &mut d), Err(InvalidHuffman));
        // EOS itself.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut d),
            Err(InvalidHuffman)
        );
        d.clear();
        assert_eq!(decode(&[0b0001_1111], &mut d), Ok(()));
        assert_eq!(d, b"a");
    }

    proptest! {
        #[test]
        fn decode_of_encode_is_identity(s in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut enc = Vec::new();
            encode(&s, &mut enc);
            prop_assert_eq!(enc.len(), encoded_len(&s));
            let mut dec = Vec::new();
            decode(&enc, &mut dec).unwrap();
            prop_assert_eq!(dec, s);
        }

        #[test]
        fn decode_never_panics(s in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut dec = Vec::new();
            let _ = decode(&s, &mut dec);
        }
    }
}
