//! Reading a run's log without holding it: the objects under the run's prefix are listed once (a [`Snapshot`]),
//! and any byte range of their concatenation is streamed object by object; the last lines are found by reading
//! backwards from the end. Only a listing and one block per object are ever in memory, however big the log.

use std::ops::Range;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt, stream::BoxStream};
use object_store::{GetOptions, GetRange, ObjectStore, path::Path};

use super::LogStore;

/// How much the search for the last lines reads at a time.
const SCAN_BLOCK: u64 = 64 * 1024;

/// What one object of a run's log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    /// Output, numbered when its key is one the daemon writes.
    Chunk(Option<u32>),
    /// The statement of a cut by the log cap, rewritten as the cut grows (never shorter).
    Cut,
}

/// One object of a run's log.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its key.
    pub key: Path,
    /// Its size when listed.
    pub size: u64,
    /// What it holds.
    pub kind: PartKind,
}

/// A run's log as listed at one moment: its objects in key order, which is the order of the log.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The objects.
    pub parts: Vec<Part>,
    /// The sum of their sizes.
    pub size: u64,
}

/// A piece of one object to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The object.
    pub key: Path,
    /// The bytes of it.
    pub range: Range<u64>,
    /// Whether that is the whole object as listed (then a lenient read takes it as it is now).
    pub whole: bool,
}

impl Snapshot {
    /// The pieces of the objects that hold `range` of the concatenated log.
    pub fn pieces(&self, range: Range<u64>) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let mut start = 0;
        for part in &self.parts {
            let end = start + part.size;
            let (lo, hi) = (range.start.max(start), range.end.min(end));
            if lo < hi {
                let local = lo - start..hi - start;
                pieces.push(Piece { key: part.key.clone(), whole: local == (0..part.size), range: local });
            }
            start = end;
        }
        pieces
    }

    /// Which object holds byte `offset` of the log, and where in it: the object's index and the offset inside it.
    /// The end of the log is the end of the last object.
    pub fn locate(&self, offset: u64) -> Option<(usize, u64)> {
        let mut start = 0;
        for (i, part) in self.parts.iter().enumerate() {
            if offset < start + part.size || (i + 1 == self.parts.len() && offset == start + part.size) {
                return Some((i, offset - start));
            }
            start += part.size;
        }
        None
    }
}

/// What a part is, from its key: `<seq>.log` is a chunk, `<seq>.cut` the statement of a cut.
fn kind_of(key: &Path) -> PartKind {
    let name = key.filename().unwrap_or_default();
    match name.rsplit_once('.') {
        Some((_, "cut")) => PartKind::Cut,
        Some((seq, "log")) => PartKind::Chunk(seq.parse().ok()),
        _ => PartKind::Chunk(None),
    }
}

impl LogStore {
    /// Lists the log under `prefix` (empty when there is none yet).
    pub async fn snapshot(&self, prefix: &Path) -> Result<Snapshot, object_store::Error> {
        let listed: Result<Vec<_>, _> = self.store.list(Some(prefix)).try_collect().await;
        let mut objects = match listed {
            Ok(objects) => objects,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        objects.sort_by(|a, b| a.location.cmp(&b.location));
        let parts: Vec<Part> = objects
            .into_iter()
            .map(|meta| Part { kind: kind_of(&meta.location), key: meta.location, size: meta.size })
            .collect();
        Ok(Snapshot { size: parts.iter().map(|p| p.size).sum(), parts })
    }

    /// Streams `pieces` in order, each object as the store hands it out (small blocks, never an object whole).
    ///
    /// `strict` is for an answer whose length was promised (a byte range): every piece must be read exactly, and
    /// an object gone since the listing is an error. Otherwise such an object is skipped (the cap dropped it from
    /// a log still being written; the log's cut statement covers it) and a whole object is read as it is now.
    pub fn stream(&self, pieces: Vec<Piece>, strict: bool) -> BoxStream<'static, Result<Bytes, object_store::Error>> {
        let store = self.store.clone();
        futures::stream::iter(pieces).then(move |piece| open(store.clone(), piece, strict)).try_flatten().boxed()
    }

    /// The byte offset where the last `lines` lines of the log begin (0 when it has no more lines than that); the
    /// log's own last newline ends its last line rather than starting another.
    pub async fn tail_start(&self, snapshot: &Snapshot, lines: u64) -> Result<u64, object_store::Error> {
        if lines == 0 {
            return Ok(snapshot.size);
        }
        let mut wanted = lines;
        let mut last_byte = true;
        let mut end = snapshot.size;
        for part in snapshot.parts.iter().rev() {
            let start = end - part.size;
            let mut hi = part.size;
            while hi > 0 {
                let lo = hi.saturating_sub(SCAN_BLOCK);
                let block = match self.store.get_range(&part.key, lo..hi).await {
                    Ok(block) => block,
                    // Dropped by the cap since the listing: it holds no line of the log any more.
                    Err(object_store::Error::NotFound { .. }) => break,
                    Err(e) => return Err(e),
                };
                for (i, &b) in block.iter().enumerate().rev() {
                    let ends_log = std::mem::take(&mut last_byte);
                    if b == b'\n' && !ends_log {
                        wanted -= 1;
                        if wanted == 0 {
                            return Ok(start + lo + i as u64 + 1);
                        }
                    }
                }
                hi = lo;
            }
            end = start;
        }
        Ok(0)
    }
}

async fn open(
    store: std::sync::Arc<dyn ObjectStore>,
    piece: Piece,
    strict: bool,
) -> Result<BoxStream<'static, Result<Bytes, object_store::Error>>, object_store::Error> {
    let range = (strict || !piece.whole).then(|| GetRange::Bounded(piece.range.clone()));
    match store.get_opts(&piece.key, GetOptions { range, ..GetOptions::default() }).await {
        Ok(got) => Ok(got.into_stream()),
        Err(object_store::Error::NotFound { .. }) if !strict => Ok(futures::stream::empty().boxed()),
        Err(e) => Err(e),
    }
}

/// Where a followed log is: what of the log has been sent, so that each new listing sends only what is new.
/// Chunks never change once written, so a chunk is sent once; a cut statement that appears after the reader got
/// past its place is not sent (the reader saw what it stands for), but output dropped before the reader got it is
/// stated where it was.
#[derive(Debug, Clone, Default)]
pub struct Cursor {
    /// The last object sent and how much of it.
    sent: Option<(Path, u64)>,
    /// The number of the last chunk sent.
    last_chunk: Option<u32>,
}

/// What a followed log sends next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// A piece of an object.
    Piece(Piece),
    /// Output was dropped by the cap before this reader got it.
    Dropped,
}

impl Cursor {
    /// A cursor at byte `offset` of the log `snapshot`: everything before it counts as sent.
    pub fn at(snapshot: &Snapshot, offset: u64) -> Self {
        let Some((i, inside)) = snapshot.locate(offset).filter(|_| offset > 0) else { return Self::default() };
        let (i, inside) = if inside == 0 { (i - 1, snapshot.parts[i - 1].size) } else { (i, inside) };
        let part = &snapshot.parts[i];
        let last_chunk = match part.kind {
            PartKind::Chunk(seq) => seq,
            PartKind::Cut => None,
        };
        Self { sent: Some((part.key.clone(), inside)), last_chunk }
    }

    /// What of `snapshot` is new since the last call, in order; marks it as sent.
    pub fn advance(&mut self, snapshot: &Snapshot) -> Vec<Next> {
        let mut next = Vec::new();
        let has_cut = snapshot.parts.iter().any(|p| p.kind == PartKind::Cut);
        for part in &snapshot.parts {
            let from = match &self.sent {
                Some((key, _)) if part.key < *key => continue,
                // A chunk read in part (the start of a tail) goes on; a rewritten statement is not sent again.
                Some((key, sent)) if part.key == *key => match part.kind {
                    PartKind::Chunk(_) if part.size > *sent => *sent,
                    _ => continue,
                },
                _ => 0,
            };
            match part.kind {
                PartKind::Cut => self.last_chunk = None,
                PartKind::Chunk(seq) => {
                    let gap = matches!((self.last_chunk, seq), (Some(last), Some(seq)) if seq > last + 1);
                    if gap && has_cut && from == 0 {
                        next.push(Next::Dropped);
                    }
                    self.last_chunk = seq;
                }
            }
            next.push(Next::Piece(Piece { key: part.key.clone(), range: from..part.size, whole: from == 0 }));
            self.sent = Some((part.key.clone(), part.size));
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(parts: &[(&str, u64)]) -> Snapshot {
        let parts: Vec<Part> = parts
            .iter()
            .map(|(name, size)| {
                let key = Path::from(format!("runs/w/r/{name}"));
                Part { kind: kind_of(&key), key, size: *size }
            })
            .collect();
        Snapshot { size: parts.iter().map(|p| p.size).sum(), parts }
    }

    fn names(next: &[Next]) -> Vec<String> {
        next.iter()
            .map(|n| match n {
                Next::Piece(p) => format!("{}:{}-{}", p.key.filename().unwrap_or_default(), p.range.start, p.range.end),
                Next::Dropped => "dropped".to_owned(),
            })
            .collect()
    }

    #[test]
    fn pieces_cover_a_range_across_objects() {
        let s = snapshot(&[("00000000.log", 10), ("00000001.cut", 5), ("00000002.log", 10)]);
        let pieces = s.pieces(8..17);
        let got: Vec<_> = pieces.iter().map(|p| (p.key.filename().unwrap_or_default(), p.range.clone())).collect();
        assert_eq!(got, [("00000000.log", 8..10), ("00000001.cut", 0..5), ("00000002.log", 0..2)]);
        assert!(pieces[1].whole && !pieces[0].whole);
        assert_eq!(s.locate(10), Some((1, 0)));
        assert_eq!(s.locate(25), Some((2, 10)));
        assert_eq!(s.locate(26), None);
    }

    #[test]
    fn a_follower_sends_each_chunk_once_and_states_output_dropped_before_it_got_it() {
        let mut cursor = Cursor::default();
        let first = snapshot(&[("00000000.log", 10), ("00000001.log", 10)]);
        assert_eq!(names(&cursor.advance(&first)), ["00000000.log:0-10", "00000001.log:0-10"]);
        assert!(cursor.advance(&first).is_empty());
        // Kept up: chunks 2 and 3 were seen before the cap dropped them, so the statement is not sent.
        let kept_up = snapshot(&[("00000000.log", 10), ("00000002.log", 10), ("00000003.log", 10)]);
        assert_eq!(names(&cursor.advance(&kept_up)), ["00000002.log:0-10", "00000003.log:0-10"]);
        let cut = snapshot(&[("00000000.log", 10), ("00000001.cut", 80), ("00000003.log", 10), ("00000004.log", 4)]);
        assert_eq!(names(&cursor.advance(&cut)), ["00000004.log:0-4"]);
        let behind = snapshot(&[("00000000.log", 10), ("00000001.cut", 81), ("00000009.log", 10)]);
        assert_eq!(names(&cursor.advance(&behind)), ["dropped", "00000009.log:0-10"]);
    }

    #[test]
    fn a_follower_that_starts_at_a_tail_goes_on_from_there() {
        let s = snapshot(&[("00000000.log", 10), ("00000001.cut", 8), ("00000005.log", 10)]);
        let mut cursor = Cursor::at(&s, 23);
        assert_eq!(names(&cursor.advance(&s)), ["00000005.log:5-10"]);
        let mut cursor = Cursor::at(&s, 10);
        assert_eq!(names(&cursor.advance(&s)), ["00000001.cut:0-8", "00000005.log:0-10"]);
        let mut cursor = Cursor::at(&s, 0);
        assert_eq!(names(&cursor.advance(&s)).len(), 3);
        let mut cursor = Cursor::at(&s, s.size);
        assert!(cursor.advance(&s).is_empty());
    }

    #[tokio::test]
    async fn the_last_lines_are_found_backwards_across_objects() {
        let dir = tempfile::tempdir().expect("a folder");
        let settings = crate::config::ObjectStoreSettings { path: dir.path().to_owned(), ..Default::default() };
        let store = LogStore::open(&settings).expect("a store");
        let run = uuid::Uuid::nil();
        let text = ["a\nb", "b\nc\n", "", "d\ne\n"];
        for (seq, chunk) in text.iter().enumerate() {
            let key = store.chunk_key("w", run, u32::try_from(seq).expect("small"));
            store.store().put(&key, chunk.as_bytes().to_vec().into()).await.expect("a chunk");
        }
        let s = store.snapshot(&store.run_prefix("w", run)).await.expect("a listing");
        let whole = text.concat();
        for lines in 0..8 {
            let start = store.tail_start(&s, lines).await.expect("a start");
            let tail = &whole[usize::try_from(start).expect("small")..];
            let expected: Vec<&str> = whole.lines().rev().take(usize::try_from(lines).expect("small")).collect();
            let got: Vec<&str> = tail.lines().rev().collect();
            assert_eq!(got, expected, "{lines} lines");
        }
        let bytes: Vec<Bytes> = store.stream(s.pieces(3..9), true).try_collect().await.expect("read");
        assert_eq!(bytes.concat(), whole.as_bytes()[3..9]);
    }
}
