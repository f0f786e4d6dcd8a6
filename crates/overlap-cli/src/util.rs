//! Small functions that more than one command uses.

use std::time::Duration;

use hdrhistogram::Histogram;

/// A latency histogram: 1 ns to 1 hour, 3 significant digits.
#[allow(
    clippy::expect_used,
    reason = "the bounds are constants that hdrhistogram accepts: a failure is a bug"
)]
pub(crate) fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

/// A duration as the commands take it: `10s`, `500ms`, `250us`, `2m`, `1h`;
/// a bare number is seconds (as nginx's and fio's time values); above 0,
/// at most 24 h.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a duration: expected e.g. 10s, 500ms, 2m or a number of seconds")
    })?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        other => {
            return Err(format!(
                "`{s}`: unknown time unit `{other}` (use ms, s, m or h)"
            ))
        }
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!(
            "`{s}`: the duration must be above 0 and at most 24h"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}
