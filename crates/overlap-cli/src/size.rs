//! Sizes in and out: the one parser and the one formatter of the CLI.
//!
//! Every size option (`probe --size`, `bench --bs`, `--size`,
//! `--max-inflight-bytes`, `journal --record-bytes`, `--segment-mib`,
//! `--buffer-mib`) is read by [`parse`] (or [`parse_in`] where a bare
//! number counts a larger unit), and every size printed for people goes
//! through [`fmt_bytes`]. Units are binary, as in fio: `k` = `K` = `KiB` =
//! 1024 bytes, then `m`, `g`, `t`, `p`; a trailing `b`/`B` or `iB` is
//! allowed, case does not matter.

use std::fmt;

/// KiB, MiB, ... as (suffix letter, shift).
const UNITS: [(char, u32); 5] = [('k', 10), ('m', 20), ('g', 30), ('t', 40), ('p', 50)];

/// Why a size was refused. Its text names the input and says what to write
/// instead.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum SizeError {
    /// No digits where a number was expected (`""`, `"G"`, `"abc"`).
    NotANumber { input: String },
    /// A minus sign.
    Negative { input: String },
    /// A decimal point (`1.5G`): sizes are whole numbers of their unit.
    Fractional { input: String },
    /// A suffix that is not a binary unit.
    UnknownUnit { input: String, unit: String },
    /// More than `max` bytes (or more than a u64 holds).
    TooLarge { input: String, max: u64 },
    /// Zero where at least one byte is needed.
    Zero { input: String },
    /// Not a whole number of `unit` bytes (an option counted in MiB given
    /// `512K`).
    NotAMultiple { input: String, unit: u64 },
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeError::NotANumber { input } => write!(
                f,
                "`{input}` is not a size: expected a whole number with an optional binary unit \
                 (k, m, g, t, p; KiB, MiB, ... also accepted), e.g. 4k, 64KiB, 1G"
            ),
            SizeError::Negative { input } => {
                write!(f, "`{input}` is not a size: a size cannot be negative")
            }
            SizeError::Fractional { input } => write!(
                f,
                "`{input}` is not a size: fractions are refused; write a whole number of a \
                 smaller unit (1536M, not 1.5G)"
            ),
            SizeError::UnknownUnit { input, unit } => write!(
                f,
                "`{input}`: unknown size unit `{unit}` (use k, m, g, t or p: binary, as in fio)"
            ),
            SizeError::TooLarge { input, max } => {
                write!(f, "`{input}` is too large: at most {}", fmt_bytes(*max))
            }
            SizeError::Zero { input } => {
                write!(f, "`{input}`: the size must be at least 1 byte")
            }
            SizeError::NotAMultiple { input, unit } => write!(
                f,
                "`{input}` is not a whole number of {} (a bare number counts {0})",
                fmt_bytes(*unit)
            ),
        }
    }
}

impl std::error::Error for SizeError {}

/// Parses a size in bytes: `4096`, `4k`, `64KiB`, `1G`, `2t`, `1P`
/// (binary units, any case). Zero is accepted; see [`parse_nonzero`].
pub(crate) fn parse(s: &str) -> Result<u64, SizeError> {
    parse_in(s, 1)
}

/// As [`parse`], refusing zero.
pub(crate) fn parse_nonzero(s: &str) -> Result<u64, SizeError> {
    match parse(s)? {
        0 => Err(SizeError::Zero { input: s.into() }),
        v => Ok(v),
    }
}

/// As [`parse`], but a bare number counts `bare_unit` bytes (an option
/// named in MiB takes `64` as 64 MiB, and `1G` as well), and the result
/// must be a whole number of `bare_unit`s.
pub(crate) fn parse_in(s: &str, bare_unit: u64) -> Result<u64, SizeError> {
    let t = s.trim();
    let input = || s.to_string();
    if t.starts_with('-') {
        return Err(SizeError::Negative { input: input() });
    }
    let t = t.strip_prefix('+').unwrap_or(t);
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, rest) = t.split_at(digits);
    if num.is_empty() {
        return Err(SizeError::NotANumber { input: input() });
    }
    if rest.starts_with(['.', ',']) && rest[1..].starts_with(|c: char| c.is_ascii_digit()) {
        return Err(SizeError::Fractional { input: input() });
    }
    let unit = rest.trim();
    let mult = unit_bytes(unit).ok_or_else(|| SizeError::UnknownUnit {
        input: input(),
        unit: unit.to_string(),
    })?;
    let mult = mult.unwrap_or(bare_unit);
    let too_large = || SizeError::TooLarge {
        input: input(),
        max: u64::MAX,
    };
    let n: u64 = num.parse().map_err(|_| too_large())?;
    let bytes = n.checked_mul(mult).ok_or_else(too_large)?;
    if bare_unit > 1 && bytes % bare_unit != 0 {
        return Err(SizeError::NotAMultiple {
            input: input(),
            unit: bare_unit,
        });
    }
    Ok(bytes)
}

/// Checks `bytes` (parsed from `input`) against a ceiling.
pub(crate) fn at_most(input: &str, bytes: u64, max: u64) -> Result<u64, SizeError> {
    if bytes > max {
        return Err(SizeError::TooLarge {
            input: input.into(),
            max,
        });
    }
    Ok(bytes)
}

/// The multiplier of a unit suffix: `Some(None)` for none (a bare number),
/// `Some(Some(1))` for `b`, `None` when unknown.
fn unit_bytes(unit: &str) -> Option<Option<u64>> {
    let u = unit.to_ascii_lowercase();
    match u.as_str() {
        "" => return Some(None),
        "b" => return Some(Some(1)),
        _ => {}
    }
    let mut chars = u.chars();
    let letter = chars.next()?;
    let tail = chars.as_str();
    if !matches!(tail, "" | "b" | "ib") {
        return None;
    }
    UNITS
        .iter()
        .find(|(l, _)| *l == letter)
        .map(|&(_, shift)| Some(1u64 << shift))
}

/// A byte count for people: `512 B`, `4 KiB`, `64 MiB`, `1.5 GiB` (binary
/// units; a whole number when exact, else one decimal).
pub(crate) fn fmt_bytes(b: u64) -> String {
    const NAMES: [(&str, u32); 6] = [
        ("EiB", 60),
        ("PiB", 50),
        ("TiB", 40),
        ("GiB", 30),
        ("MiB", 20),
        ("KiB", 10),
    ];
    for (name, shift) in NAMES {
        let unit = 1u64 << shift;
        if b >= unit {
            return if b % unit == 0 {
                format!("{} {name}", b >> shift)
            } else {
                format!("{:.1} {name}", b as f64 / unit as f64)
            };
        }
    }
    format!("{b} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_in_any_case() {
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse(" 4096 "), Ok(4096));
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("512b"), Ok(512));
        assert_eq!(parse("512B"), Ok(512));
        assert_eq!(parse("4k"), Ok(4096));
        assert_eq!(parse("4K"), Ok(4096));
        assert_eq!(parse("4kb"), Ok(4096));
        assert_eq!(parse("64KiB"), Ok(64 << 10));
        assert_eq!(parse("64kib"), Ok(64 << 10));
        assert_eq!(parse("100M"), Ok(100 << 20));
        assert_eq!(parse("1G"), Ok(1 << 30));
        assert_eq!(parse("1 GiB"), Ok(1 << 30));
        assert_eq!(parse("2t"), Ok(2 << 40));
        assert_eq!(parse("1P"), Ok(1 << 50));
        assert_eq!(parse("+8M"), Ok(8 << 20));
        assert_eq!(parse("15E").map_err(|e| e.to_string()).unwrap_err(), {
            "`15E`: unknown size unit `E` (use k, m, g, t or p: binary, as in fio)"
        });
    }

    #[test]
    fn bad_input_says_which_kind_of_bad() {
        let e = |s: &str| parse(s).unwrap_err();
        assert!(matches!(e(""), SizeError::NotANumber { .. }));
        assert!(matches!(e("G"), SizeError::NotANumber { .. }));
        assert!(matches!(e("abc"), SizeError::NotANumber { .. }));
        assert!(matches!(e("-1"), SizeError::Negative { .. }));
        assert!(matches!(e("-1G"), SizeError::Negative { .. }));
        assert!(matches!(e("1.5G"), SizeError::Fractional { .. }));
        assert!(matches!(e("0.5"), SizeError::Fractional { .. }));
        assert!(matches!(e("4q"), SizeError::UnknownUnit { .. }));
        assert!(matches!(e("4kk"), SizeError::UnknownUnit { .. }));
        assert!(matches!(e("4ki"), SizeError::UnknownUnit { .. }));
        assert!(matches!(e("4 bytes"), SizeError::UnknownUnit { .. }));
        assert!(matches!(e("1."), SizeError::UnknownUnit { .. }));
        assert!(e("4q").to_string().contains("unknown size unit `q`"));
        assert!(e("abc").to_string().contains("is not a size"));
        assert!(e("-1G").to_string().contains("negative"));
        assert!(e("1.5G").to_string().contains("1536M"));
    }

    #[test]
    fn overflow_is_too_large_not_wrapped() {
        let too_large = |s: &str| matches!(parse(s), Err(SizeError::TooLarge { .. }));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        assert!(too_large("18446744073709551616"));
        assert!(too_large("99999999999999999999t"));
        assert!(too_large("18446744073709551615K"));
        assert!(too_large("16384P"));
        assert_eq!(parse("16383P"), Ok(16383 << 50));
        assert!(matches!(
            at_most("2P", 2 << 50, 1 << 50),
            Err(SizeError::TooLarge { max, .. }) if max == 1 << 50
        ));
        assert_eq!(at_most("1P", 1 << 50, 1 << 50), Ok(1 << 50));
        assert!(at_most("2P", 2 << 50, 1 << 50)
            .unwrap_err()
            .to_string()
            .contains("at most 1 PiB"));
    }

    #[test]
    fn zero_only_where_allowed() {
        assert_eq!(parse("0"), Ok(0));
        assert_eq!(parse("0k"), Ok(0));
        assert!(matches!(parse_nonzero("0"), Err(SizeError::Zero { .. })));
        assert!(matches!(parse_nonzero("0G"), Err(SizeError::Zero { .. })));
        assert!(parse_nonzero("0")
            .unwrap_err()
            .to_string()
            .contains("at least 1 byte"));
        assert_eq!(parse_nonzero("1"), Ok(1));
    }

    #[test]
    fn a_bare_number_can_count_a_larger_unit() {
        const MIB: u64 = 1 << 20;
        assert_eq!(parse_in("64", MIB), Ok(64 << 20));
        assert_eq!(parse_in("64M", MIB), Ok(64 << 20));
        assert_eq!(parse_in("1g", MIB), Ok(1 << 30));
        assert_eq!(parse_in("2048k", MIB), Ok(2 << 20));
        assert_eq!(parse_in("0", MIB), Ok(0));
        assert!(matches!(
            parse_in("512K", MIB),
            Err(SizeError::NotAMultiple { unit: MIB, .. })
        ));
        assert!(matches!(
            parse_in("17592186044416", MIB),
            Err(SizeError::TooLarge { .. })
        ));
    }

    #[test]
    fn bytes_are_formatted_in_binary_units() {
        assert_eq!(fmt_bytes(0), "0 B");
        assert_eq!(fmt_bytes(1), "1 B");
        assert_eq!(fmt_bytes(1023), "1023 B");
        assert_eq!(fmt_bytes(1024), "1 KiB");
        assert_eq!(fmt_bytes(1536), "1.5 KiB");
        assert_eq!(fmt_bytes(4096), "4 KiB");
        assert_eq!(fmt_bytes(64 << 20), "64 MiB");
        assert_eq!(fmt_bytes((1 << 30) + (1 << 29)), "1.5 GiB");
        assert_eq!(fmt_bytes(1 << 40), "1 TiB");
        assert_eq!(fmt_bytes(1 << 50), "1 PiB");
        assert_eq!(fmt_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn what_is_formatted_parses_back_when_exact() {
        for b in [1u64, 512, 4096, 65536, 64 << 20, 3 << 30, 5 << 40, 1 << 50] {
            assert_eq!(parse(&fmt_bytes(b)), Ok(b), "{}", fmt_bytes(b));
        }
    }
}
