//! The `Range` header of a log read: one byte range (`bytes=a-b`, `bytes=a-`, `bytes=-n`), refused with a
//! sentence when it cannot be read, so that a client learns what it sent wrong instead of getting the whole log.

use std::ops::Range;

/// One byte range as asked for, before the log's size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// `a-b` (both included) or `a-` (`last` is `None`).
    From { first: u64, last: Option<u64> },
    /// `-n`: the last `n` bytes.
    Last(u64),
}

impl Wanted {
    /// The bytes of a log of `size` bytes, or `None` when none of them is in it (a 416).
    pub fn resolve(self, size: u64) -> Option<Range<u64>> {
        match self {
            Self::From { first, .. } if first >= size => None,
            Self::From { first, last } => Some(first..last.map_or(size, |l| l.saturating_add(1).min(size))),
            Self::Last(0) => None,
            Self::Last(_) if size == 0 => None,
            Self::Last(n) => Some(size.saturating_sub(n)..size),
        }
    }
}

/// Reads a `Range` header's value; the error is a sentence for the 400.
pub fn parse(value: &str) -> Result<Wanted, String> {
    let shown = value.chars().take(80).collect::<String>();
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Err(format!("The Range header must ask for bytes, as in `bytes=0-1023`, not {shown:?}."));
    };
    if spec.contains(',') {
        return Err(format!("The Range header may ask for one range only, not {shown:?}."));
    }
    let number = |s: &str| s.trim().parse::<u64>().ok().filter(|_| s.trim().bytes().all(|b| b.is_ascii_digit()));
    let bad =
        || format!("The Range header must be `bytes=FIRST-LAST`, `bytes=FIRST-` or `bytes=-COUNT`, not {shown:?}.");
    let (first, last) = spec.split_once('-').ok_or_else(bad)?;
    match (first.trim().is_empty(), last.trim().is_empty()) {
        (true, true) => Err(bad()),
        (true, false) => number(last).map(Wanted::Last).ok_or_else(bad),
        (false, true) => number(first).map(|first| Wanted::From { first, last: None }).ok_or_else(bad),
        (false, false) => {
            let (first, last) = number(first).zip(number(last)).ok_or_else(bad)?;
            if last < first {
                return Err(format!("The Range header's last byte ({last}) comes before its first ({first})."));
            }
            Ok(Wanted::From { first, last: Some(last) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_and_resolved_against_the_size() {
        assert_eq!(parse("bytes=0-9").map(|w| w.resolve(100)), Ok(Some(0..10)));
        assert_eq!(parse("bytes=90-").map(|w| w.resolve(100)), Ok(Some(90..100)));
        assert_eq!(parse("bytes=90-1000").map(|w| w.resolve(100)), Ok(Some(90..100)));
        assert_eq!(parse("bytes=-10").map(|w| w.resolve(100)), Ok(Some(90..100)));
        assert_eq!(parse("bytes=-1000").map(|w| w.resolve(100)), Ok(Some(0..100)));
        assert_eq!(parse("bytes=100-").map(|w| w.resolve(100)), Ok(None));
        assert_eq!(parse("bytes=-0").map(|w| w.resolve(100)), Ok(None));
        assert_eq!(parse("bytes=0-0").map(|w| w.resolve(0)), Ok(None));
        assert_eq!(parse("bytes=0-18446744073709551615").map(|w| w.resolve(5)), Ok(Some(0..5)));
    }

    #[test]
    fn a_bad_range_is_refused_with_a_sentence() {
        for bad in
            ["lines=0-9", "bytes=", "bytes=-", "bytes=a-b", "bytes=+1-2", "bytes=1", "bytes=9-1", "bytes=0-1,5-6"]
        {
            let message = parse(bad).expect_err(bad);
            assert!(message.starts_with("The Range header") && message.ends_with('.'), "{bad}: {message}");
        }
    }
}
