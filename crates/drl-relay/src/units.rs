//! Rates and sizes as operators write them: `10Mbit/s`, `1.25MB/s`,
//! `64KiB`. Everything is converted to bytes (per second).
//!
//! * rates: a number and a unit per second: `bit/s`, `kbit/s`, `Mbit/s`,
//!   `Gbit/s` (also written `bps`, `kbps`, `Mbps`, `Gbps`), or `B/s`,
//!   `KB/s`, `MB/s`, `GB/s`, `KiB/s`, `MiB/s`, `GiB/s`; a bare number is
//!   bytes per second. `k`, `M`, `G` are powers of 1000 (as in `tc`), `Ki`,
//!   `Mi`, `Gi` powers of 1024; bits are divided by 8.
//! * sizes: the same byte units without `/s` (`1500`, `64KB`, `1MiB`).

/// Parses a rate into bytes per second (rounded down, at least 1).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = split(t);
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a rate (expected e.g. 10Mbit/s, 1.25MB/s, 500kbps)"))?;
    let per_byte = match unit {
        "" | "B/s" | "Bps" => 1.0,
        "KB/s" | "kB/s" => 1e3,
        "MB/s" => 1e6,
        "GB/s" => 1e9,
        "KiB/s" => 1024.0,
        "MiB/s" => 1024.0 * 1024.0,
        "GiB/s" => 1024.0 * 1024.0 * 1024.0,
        "bit/s" | "bps" => 1.0 / 8.0,
        "kbit/s" | "Kbit/s" | "kbps" | "Kbps" => 1e3 / 8.0,
        "Mbit/s" | "mbit/s" | "Mbps" | "mbps" => 1e6 / 8.0,
        "Gbit/s" | "gbit/s" | "Gbps" | "gbps" => 1e9 / 8.0,
        other => {
            return Err(format!(
                "unknown rate unit {other:?} in {s:?} (use bit/s, kbit/s, Mbit/s, Gbit/s, \
                 B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s or GiB/s)"
            ));
        }
    };
    to_bytes(s, x * per_byte)
}

/// Parses a size into bytes (rounded down, at least 1).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = split(t);
    let x: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (expected e.g. 1500, 64KB, 1MiB)"))?;
    let mult = match unit {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (use B, KB, MB, GB, KiB, MiB or GiB)"
            ));
        }
    };
    to_bytes(s, x * mult)
}

fn split(t: &str) -> (&str, &str) {
    let i = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    (t[..i].trim(), t[i..].trim())
}

fn to_bytes(s: &str, v: f64) -> Result<u64, String> {
    if !v.is_finite() || !(1.0..=1e18).contains(&v) {
        return Err(format!(
            "{s:?} is out of range (at least 1 byte, at most 1e18)"
        ));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10Mbit/s"), Ok(1_250_000));
        assert_eq!(parse_rate("10 Mbps"), Ok(1_250_000));
        assert_eq!(parse_rate("2Mbit/s"), Ok(250_000));
        assert_eq!(parse_rate("500kbit/s"), Ok(62_500));
        assert_eq!(parse_rate("1.25MB/s"), Ok(1_250_000));
        assert_eq!(parse_rate("1KiB/s"), Ok(1024));
        assert_eq!(parse_rate("1000"), Ok(1000));
        assert!(
            parse_rate("10 furlongs/s")
                .unwrap_err()
                .contains("unknown rate unit")
        );
        assert!(parse_rate("fast").unwrap_err().contains("not a rate"));
        assert!(parse_rate("0Mbit/s").unwrap_err().contains("out of range"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1500"), Ok(1500));
        assert_eq!(parse_size("64KB"), Ok(64_000));
        assert_eq!(parse_size("64KiB"), Ok(65_536));
        assert!(
            parse_size("64Kb")
                .unwrap_err()
                .contains("unknown size unit")
        );
    }

    proptest! {
        /// Mbit/s is exactly 125,000 bytes/s per unit, for whole numbers.
        #[test]
        fn mbit_is_125000_bytes(n in 1u64..100_000) {
            prop_assert_eq!(parse_rate(&format!("{n}Mbit/s")), Ok(n * 125_000));
            prop_assert_eq!(parse_rate(&format!("{}", n * 125_000)), Ok(n * 125_000));
        }
    }
}
