//! The shard of a sharded run (`SCRINALIA_SHARD=i/N`, docs/worker-protocol.md, "Items") and the rule that puts
//! an item in a shard, in one place, so the daemon, the demo workers and the Python adapter's `shard_of`
//! (adapters/python/scrinalia_items.py) split the same items the same way: a shard that computed it differently
//! would process items another shard also processes, and skip some no shard does.

use std::{fmt, str::FromStr};

use sha2::{Digest, Sha256};

/// The environment variable that gives a run its shard.
pub const SHARD_ENV: &str = "SCRINALIA_SHARD";

/// One shard of a run split into `count`: the run processes only the items whose [`shard_of`] is `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// Which shard, from 0; less than `count`.
    pub index: u32,
    /// How many shards the run is split into; at least 1.
    pub count: u32,
}

/// The shard (0 to `count` - 1) that the item `id` belongs to among `count`: the first eight bytes of the SHA-256
/// of its id in UTF-8, read as a big-endian unsigned number, modulo `count`. Every process on every machine
/// computes the same shard, so it is never a salted or process-local hash. A `count` of 0 is taken as 1 (every
/// item in shard 0), as no run has fewer than one shard.
pub fn shard_of(id: &str, count: u32) -> u32 {
    let digest = Sha256::digest(id.as_bytes());
    let mut first = [0_u8; 8];
    first.copy_from_slice(&digest[..8]);
    let shard = u64::from_be_bytes(first) % u64::from(count.max(1));
    // Less than `count`, so it fits.
    u32::try_from(shard).unwrap_or(0)
}

impl Shard {
    /// The one shard of a run that is not split: it holds every item.
    pub const WHOLE: Self = Self { index: 0, count: 1 };

    /// Reads `SCRINALIA_SHARD`'s value: `i/N` in plain decimal digits only (no sign, space or underscore), with
    /// N at least 1 and i less than N. Otherwise a sentence naming `SCRINALIA_SHARD`, what it holds and why it is
    /// not a shard.
    pub fn parse(text: &str) -> Result<Self, String> {
        let refuse = |why: &str| {
            Err(format!(
                "{SHARD_ENV} is {text:?}; it must be i/N with whole numbers 0 <= i < N (0/4 is the first of four \
                 shards), but {why}."
            ))
        };
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let Some((index, count)) = text.split_once('/').filter(|(i, n)| digits(i) && digits(n)) else {
            return refuse("it is not two numbers of plain decimal digits around one slash");
        };
        // Only digits are left, so a number that does not parse is one too large.
        let (Ok(index), Ok(count)) = (index.parse::<u32>(), count.parse::<u32>()) else {
            return refuse(&format!("its numbers do not fit in 32 bits (at most {})", u32::MAX));
        };
        if count == 0 {
            return refuse("N is 0, and a run has at least one shard");
        }
        if index >= count {
            return refuse(&format!("{index} is not less than {count} (the shards of {count} are 0 to {})", count - 1));
        }
        Ok(Self { index, count })
    }

    /// The shard of `id` among this shard's count ([`shard_of`]).
    pub fn of(&self, id: &str) -> u32 {
        shard_of(id, self.count)
    }

    /// Whether the item `id` is in this shard, so that a run of this shard processes it.
    pub fn holds(&self, id: &str) -> bool {
        self.of(id) == self.index
    }
}

impl fmt::Display for Shard {
    /// `i/N`, as `SCRINALIA_SHARD` gives it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (id, N, its shard): the same table as `SHARD_VECTORS` in adapters/python/test_items.py, so the two
    /// implementations are checked against one table. Change both or neither.
    const VECTORS: &[(&str, u32, u32)] = &[
        ("doc-0007", 7, 3),
        ("doc-0000", 4, 0),
        ("doc-0001", 4, 2),
        ("doc-0004", 4, 3),
        ("caf\u{e9}", 5, 4),
        ("", 1, 0),
        ("", 3, 1),
        ("item-000001", 3, 0),
        ("item-000002", 3, 1),
        ("item-000003", 3, 1),
        ("日本語の文書", 16, 2),
        ("doc-0024", 64, 40),
        ("doc-0027", 64, 55),
        (" doc 0002 ", 10, 6),
        ("doc-0001", 1_000_003, 889_524),
        ("doc-0001", u32::MAX, 3_846_161_928),
    ];

    #[test]
    fn the_shard_of_an_id_is_the_first_eight_bytes_of_its_sha256_big_endian_modulo_n() {
        for &(id, count, shard) in VECTORS {
            assert_eq!(shard_of(id, count), shard, "{id:?} among {count}");
        }
        // Another way than `shard_of` takes: from the hexadecimal digest's first sixteen digits.
        let hex = hex::encode(Sha256::digest(b"doc-0007"));
        assert_eq!(u64::from_str_radix(&hex[..16], 16).map(|n| n % 7), Ok(3));
        let shards: Vec<u32> = (0..12).map(|n| shard_of(&format!("doc-{n:04}"), 4)).collect();
        assert_eq!(shards, [0, 2, 0, 0, 3, 3, 0, 3, 0, 2, 0, 3], "the Python adapter's own list");
        assert!((0..100).all(|n| shard_of(&format!("doc-{n}"), 1) == 0));
        assert_eq!(shard_of("doc-0001", 0), 0, "no shards at all is taken as one");
    }

    #[test]
    fn the_shards_of_a_run_hold_every_id_once() {
        let shards: Vec<Shard> = (0..3).map(|index| Shard { index, count: 3 }).collect();
        for n in 0..200 {
            let id = format!("doc-{n:04}");
            assert_eq!(shards.iter().filter(|s| s.holds(&id)).count(), 1, "{id}");
        }
        assert!((0..50).all(|n| Shard::WHOLE.holds(&format!("item-{n}"))));
        assert!(Shard { index: 3, count: 7 }.holds("doc-0007"));
        assert_eq!(Shard { index: 0, count: 7 }.of("doc-0007"), 3);
    }

    #[test]
    fn a_shard_reads_and_prints_as_i_of_n() {
        for (text, index, count) in [("0/1", 0, 1), ("3/4", 3, 4), ("0/16", 0, 16), ("10/11", 10, 11)] {
            let shard = Shard::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(shard, Shard { index, count });
            assert_eq!(shard.to_string(), text);
            assert_eq!(text.parse::<Shard>(), Ok(shard));
        }
        assert_eq!(Shard::parse("01/04"), Ok(Shard { index: 1, count: 4 }), "leading zeros are still decimal");
        assert_eq!(Shard::parse("4294967294/4294967295"), Ok(Shard { index: u32::MAX - 1, count: u32::MAX }));
    }

    #[test]
    fn anything_but_i_of_n_with_i_less_than_n_is_refused_with_a_sentence() {
        let start = "SCRINALIA_SHARD is";
        let rule = "it must be i/N with whole numbers 0 <= i < N (0/4 is the first of four shards), but";
        for text in [
            "",
            "1",
            "a/b",
            "-1/4",
            "+1/4",
            " 1/4",
            "1/4 ",
            "1_0/20",
            "1/4/8",
            "\u{661}/4",
            "1/",
            "/4",
            "1/+4",
            "1/4\n",
        ] {
            let error = Shard::parse(text).expect_err(text);
            assert_eq!(
                error,
                format!("{start} {text:?}; {rule} it is not two numbers of plain decimal digits around one slash.")
            );
        }
        assert_eq!(
            Shard::parse("0/0"),
            Err(format!("{start} \"0/0\"; {rule} N is 0, and a run has at least one shard."))
        );
        assert_eq!(
            Shard::parse("4/4"),
            Err(format!("{start} \"4/4\"; {rule} 4 is not less than 4 (the shards of 4 are 0 to 3)."))
        );
        assert_eq!(
            Shard::parse("5/4"),
            Err(format!("{start} \"5/4\"; {rule} 5 is not less than 4 (the shards of 4 are 0 to 3)."))
        );
        assert_eq!(
            Shard::parse("1/4294967296"),
            Err(format!("{start} \"1/4294967296\"; {rule} its numbers do not fit in 32 bits (at most 4294967295)."))
        );
    }
}
