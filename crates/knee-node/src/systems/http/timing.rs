//! The W3C `Server-Timing` header: `name;dur=12.3;desc="..."` entries, comma separated, in
//! one header or several. `dur` is in milliseconds. The spec's keys say which entries add up
//! to the server's time and which one is its `detail` part (e.g. the database).

/// Which entries make up the server time, and which one is its detail.
#[derive(Clone, Debug, Default)]
pub struct TimingKeys {
    /// Entries summed into `server_ns` (names compare case-insensitively, as the header's
    /// metric names are tokens).
    pub server: Vec<String>,
    /// The entry recorded as `detail_ns` (None: no detail).
    pub detail: Option<String>,
}

/// What a response's Server-Timing said, in ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    /// Whether any of the server entries was present with a `dur`: without one, the split
    /// is unavailable (not zero).
    pub present: bool,
    pub server_ns: u64,
    pub detail_ns: u64,
}

impl TimingKeys {
    /// Adds one Server-Timing header value to `split`. Entries that do not parse are
    /// skipped, as a browser skips them: a malformed header is not a failed request.
    pub fn add(&self, value: &[u8], split: &mut Split) {
        let Ok(text) = std::str::from_utf8(value) else {
            return;
        };
        for entry in unquoted_split(text, ',') {
            let Some((name, dur_ms)) = metric(entry) else {
                continue;
            };
            let Some(ns) = dur_ms.map(ms_to_ns) else {
                continue;
            };
            if self.server.iter().any(|k| k.eq_ignore_ascii_case(name)) {
                split.present = true;
                split.server_ns = split.server_ns.saturating_add(ns).min(MAX_DURATION_NS);
            }
            if self
                .detail
                .as_deref()
                .is_some_and(|d| d.eq_ignore_ascii_case(name))
            {
                split.detail_ns = split.detail_ns.saturating_add(ns).min(MAX_DURATION_NS);
            }
        }
    }
}

/// The parts of `text` between `sep`s outside quoted strings (a `desc` may hold either).
fn unquoted_split(text: &str, sep: char) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let t = rest?;
        let (mut quoted, mut escaped) = (false, false);
        for (i, c) in t.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if quoted => escaped = true,
                '"' => quoted = !quoted,
                c if c == sep && !quoted => {
                    rest = Some(&t[i + c.len_utf8()..]);
                    return Some(&t[..i]);
                }
                _ => {}
            }
        }
        rest = None;
        Some(t)
    })
}

/// An entry's name and its `dur` in ms (None when it has none or it is not a number).
fn metric(entry: &str) -> Option<(&str, Option<f64>)> {
    let mut params = unquoted_split(entry, ';');
    let name = params.next()?.trim();
    if name.is_empty() || name.contains(['"', '=', ' ']) {
        return None;
    }
    let mut dur = None;
    for p in params {
        let (k, v) = p.split_once('=').unwrap_or((p, ""));
        // The first dur counts (the spec ignores repeats).
        if dur.is_none() && k.trim().eq_ignore_ascii_case("dur") {
            dur = v.trim().trim_matches('"').parse::<f64>().ok();
        }
    }
    Some((name, dur))
}

/// The largest time a header can give (292 years): a sample's times are signed 64-bit ns
/// in samples.parquet, and `u64::MAX` is the recorder's "no server time" mark, so a server
/// that sends a huge `dur` must not reach either.
pub const MAX_DURATION_NS: u64 = i64::MAX as u64;

/// ms (a finite number >= 0) to ns, at most [`MAX_DURATION_NS`]; anything else counts as 0.
fn ms_to_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        // `as` saturates: a product beyond u64 is u64::MAX before the bound.
        ((ms * 1e6).round() as u64).min(MAX_DURATION_NS)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(server: &[&str], detail: Option<&str>) -> TimingKeys {
        TimingKeys {
            server: server.iter().map(|s| s.to_string()).collect(),
            detail: detail.map(str::to_string),
        }
    }

    fn split(k: &TimingKeys, values: &[&str]) -> Split {
        let mut s = Split::default();
        for v in values {
            k.add(v.as_bytes(), &mut s);
        }
        s
    }

    /// Found while fuzzing the samples reader: `dur=1e300` gave u64::MAX, the recorder's
    /// "no server time" mark, and a sum of two huge entries a negative time in Python.
    #[test]
    fn huge_durations_stay_below_the_no_server_time_mark() {
        let k = keys(&["app", "edge"], Some("db"));
        let s = split(&k, &["app;dur=1e300, edge;dur=9e12, db;dur=1e300", "db;dur=9e12"]);
        assert!(s.present);
        assert_eq!(s.server_ns, MAX_DURATION_NS);
        assert_eq!(s.detail_ns, MAX_DURATION_NS);
        assert!(s.server_ns < crate::load::recorder::NO_SERVER_TIME);
    }

    #[test]
    fn chosen_entries_add_up_and_the_detail_is_apart() {
        let k = keys(&["app", "edge"], Some("db"));
        let s = split(&k, &["app;dur=12.3, db;dur=4.1;desc=\"a, b\"", "Edge;dur=1"]);
        assert_eq!(
            s,
            Split {
                present: true,
                server_ns: 13_300_000,
                detail_ns: 4_100_000
            }
        );
    }

    #[test]
    fn absent_is_not_zero() {
        let k = keys(&["app"], None);
        assert!(!split(&k, &[]).present);
        assert!(!split(&k, &["cache;desc=hit", "app"]).present); // app without dur
        assert!(split(&k, &["app;dur=0"]).present);
    }

    #[test]
    fn malformed_entries_are_skipped_not_fatal() {
        let k = keys(&["app"], Some("db"));
        let s = split(
            &k,
            &[",,;dur=3, \"app\";dur=1, app;dur=x, db;dur=-5, app;dur=2;dur=9, app;desc=\"x,y;dur=7\""],
        );
        assert_eq!((s.present, s.server_ns, s.detail_ns), (true, 2_000_000, 0));
        let mut s = Split::default();
        k.add(&[0xff, 0xfe], &mut s);
        assert!(!s.present);
    }

    #[test]
    fn nginx_style_integer_ms_parse() {
        let s = split(&keys(&["app"], None), &["app;dur=0", "app;dur=12"]);
        assert_eq!(s.server_ns, 12_000_000);
    }
}
