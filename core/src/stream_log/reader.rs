//! Reading a stream: where an offset specification starts, and whole user chunks from
//! there on, through the segments, skipping tracking chunks and chunks a filter excludes.

use std::fs::File;
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::chunk::{Chunk, ChunkType};
use super::log::{Inner, SegmentInfo};
use super::segment::{read_chunk_at, IndexFile, SEGMENT_HEADER};

/// Where a consumer starts, as the stream protocol and `x-stream-offset` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The first record still kept.
    First,
    /// The newest chunk.
    Last,
    /// Only what is published from now on.
    Next,
    /// The chunk holding this offset (the first kept when it is older, the end when newer).
    Offset(u64),
    /// The first chunk written at or after this time (ms since the epoch).
    Timestamp(i64),
}

/// Which chunks a filtering consumer wants (`filter.N` and `match-unfiltered`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkFilter {
    /// Filter values; a chunk whose Bloom filter may hold one is read.
    pub values: Vec<String>,
    /// Also read chunks holding records without a filter value.
    pub match_unfiltered: bool,
}

/// A position in a stream, read forward chunk by chunk.
pub struct StreamReader {
    inner: Arc<Inner>,
    segment: u64,
    position: u64,
    file: Option<(u64, File)>,
    start: u64,
    filter: Option<ChunkFilter>,
}

impl StreamReader {
    pub(crate) fn new(inner: Arc<Inner>, spec: OffsetSpec) -> io::Result<StreamReader> {
        let (segments, next_offset, last_chunk) = {
            let shared = inner.shared.lock();
            (
                shared.segments.clone(),
                shared.next_offset,
                shared.last_chunk,
            )
        };
        let first = segments.first().expect("a stream always has a segment");
        let live = segments.last().expect("a stream always has a segment");
        let at_start =
            |s: &SegmentInfo| (s.first_offset, SEGMENT_HEADER.len() as u64, s.first_offset);
        let at_end = (live.first_offset, live.size, next_offset);
        let (segment, position, start) = match spec {
            OffsetSpec::First => at_start(first),
            OffsetSpec::Next => at_end,
            OffsetSpec::Last => match last_chunk {
                Some((offset, segment, position)) if segment >= first.first_offset => {
                    (segment, position, offset)
                }
                _ => at_end,
            },
            OffsetSpec::Offset(offset) if offset >= next_offset => at_end,
            OffsetSpec::Offset(offset) if offset <= first.first_offset => at_start(first),
            OffsetSpec::Offset(offset) => {
                let at = segments
                    .iter()
                    .rposition(|s| s.first_offset <= offset)
                    .unwrap_or(0);
                locate(&segments, at, at_end, |e| e.end_offset() > offset)?
            }
            OffsetSpec::Timestamp(timestamp) => {
                match segments
                    .iter()
                    .position(|s| s.newest_timestamp.is_some_and(|t| t >= timestamp))
                {
                    Some(at) => locate(&segments, at, at_end, |e| e.timestamp >= timestamp)?,
                    None => at_end,
                }
            }
        };
        Ok(StreamReader {
            inner,
            segment,
            position,
            file: None,
            start,
            filter: None,
        })
    }

    /// Reads only chunks that may match `filter`.
    pub fn with_filter(mut self, filter: Option<ChunkFilter>) -> StreamReader {
        self.filter = filter;
        self
    }

    /// The offset the reader started at (the first offset of its first chunk).
    pub fn start_offset(&self) -> u64 {
        self.start
    }

    /// Whether the stream was deleted.
    pub fn is_deleted(&self) -> bool {
        self.inner.deleted.load(Ordering::Acquire)
    }

    /// The next committed user chunk, or `None` when the reader has caught up (wait on
    /// [`super::StreamLog::subscribe`] and ask again).
    pub fn next_chunk(&mut self) -> io::Result<Option<Chunk>> {
        loop {
            let (current, later, first) = {
                let shared = self.inner.shared.lock();
                let current = shared
                    .segments
                    .iter()
                    .position(|s| s.first_offset == self.segment);
                let first = shared.segments.first().map(|s| s.first_offset);
                match current {
                    Some(at) => (
                        Some(shared.segments[at].clone()),
                        shared.segments.get(at + 1).map(|s| s.first_offset),
                        first,
                    ),
                    None => (None, None, first),
                }
            };
            let Some(current) = current else {
                // Retention deleted the segment being read: go on from the oldest kept.
                match first {
                    Some(first) if first != self.segment => {
                        self.move_to(first);
                        continue;
                    }
                    _ => return Ok(None),
                }
            };
            if self.position < current.size {
                let file = match &self.file {
                    Some((segment, file)) if *segment == self.segment => file,
                    _ => {
                        let file = File::open(&current.path)?;
                        &self.file.insert((self.segment, file)).1
                    }
                };
                let Some(chunk) = read_chunk_at(file, self.position, current.size)? else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "damaged chunk in {} at byte {}",
                            current.path.display(),
                            self.position
                        ),
                    ));
                };
                if chunk.header.end_offset() > self.inner.readable.load(Ordering::Acquire)
                    && chunk.header.records > 0
                {
                    // Not on a majority of the members yet: wait until it is.
                    return Ok(None);
                }
                self.position += chunk.header.total_size();
                if chunk.header.chunk_type != ChunkType::User || chunk.header.records == 0 {
                    continue;
                }
                if let Some(filter) = &self.filter {
                    if !chunk.may_match(&filter.values, filter.match_unfiltered) {
                        continue;
                    }
                }
                return Ok(Some(chunk));
            }
            match later {
                Some(next) => self.move_to(next),
                None => return Ok(None),
            }
        }
    }

    fn move_to(&mut self, segment: u64) {
        self.segment = segment;
        self.position = SEGMENT_HEADER.len() as u64;
        self.file = None;
    }
}

/// The position of the first chunk from segment `at` on for which `is_after` holds.
fn locate(
    segments: &[SegmentInfo],
    at: usize,
    at_end: (u64, u64, u64),
    is_after: impl Fn(&super::segment::IndexEntry) -> bool,
) -> io::Result<(u64, u64, u64)> {
    for segment in &segments[at..] {
        let index = IndexFile::open(&segment.index_path, segment.chunks)?;
        if let Some(entry) = index.partition_point(&is_after)? {
            return Ok((segment.first_offset, entry.position, entry.first_offset));
        }
    }
    Ok(at_end)
}
