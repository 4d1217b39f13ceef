//! What the ledger's search takes beyond the plain filters: a run id or the start of one (turned into a range of
//! ids, so that the primary key serves it on both backends), and error text to find (turned into a `LIKE`
//! pattern whose wildcards are escaped, so that `%` and `_` in the text are matched as themselves).

use uuid::Uuid;

/// The ids a run id, or its first hex digits, stands for: every id from `low` to `high`, both included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// The smallest id with the prefix.
    pub low: Uuid,
    /// The largest id with the prefix.
    pub high: Uuid,
}

impl IdRange {
    /// The fewest hex digits a prefix may have (fewer would match a large part of the ledger by chance).
    pub const MIN_DIGITS: usize = 4;

    /// Parses a whole run id or its first [`IdRange::MIN_DIGITS`] or more hex digits, with or without the
    /// hyphens of the usual form (where a hyphen is, it must be where that form has one). `None` when it is
    /// neither.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        const HYPHENS: [usize; 4] = [8, 13, 18, 23];
        let hyphenated = text.contains('-');
        let mut digits = String::with_capacity(32);
        for (i, c) in text.char_indices() {
            // With hyphens, exactly where the hyphenated form has them; without, hex digits only.
            if hyphenated && HYPHENS.contains(&i) {
                if c != '-' {
                    return None;
                }
            } else if c.is_ascii_hexdigit() {
                digits.push(c.to_ascii_lowercase());
            } else {
                return None;
            }
        }
        if digits.len() < Self::MIN_DIGITS || digits.len() > 32 {
            return None;
        }
        let pad = |fill: char| {
            let mut hex = digits.clone();
            hex.extend(std::iter::repeat_n(fill, 32 - digits.len()));
            Uuid::parse_str(&hex).ok()
        };
        Some(Self { low: pad('0')?, high: pad('f')? })
    }
}

/// The `LIKE` pattern (with `\` as its escape character) of every text that contains `needle`.
pub fn contains_pattern(needle: &str) -> String {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_id_is_itself_and_a_prefix_is_the_range_of_its_ids() {
        let id = Uuid::parse_str("0193ab12-3456-7def-8123-456789abcdef").expect("an id");
        assert_eq!(IdRange::parse(&id.to_string()), Some(IdRange { low: id, high: id }));
        assert_eq!(IdRange::parse(&id.simple().to_string().to_uppercase()), Some(IdRange { low: id, high: id }));
        let range = IdRange::parse("0193AB12-34").expect("a prefix");
        assert_eq!(range.low.to_string(), "0193ab12-3400-0000-0000-000000000000");
        assert_eq!(range.high.to_string(), "0193ab12-34ff-ffff-ffff-ffffffffffff");
        assert!(range.low <= id && id <= range.high);
        for bad in ["", "019", "xyz1", "0193-ab12", "0193ab12-3456-7def-8123-456789abcdef0", "0193ab12--"] {
            assert_eq!(IdRange::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn wildcards_in_the_needle_are_matched_as_themselves() {
        assert_eq!(contains_pattern("out of memory"), "%out of memory%");
        assert_eq!(contains_pattern("100%_a\\b"), "%100\\%\\_a\\\\b%");
    }
}
