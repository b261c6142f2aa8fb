//! Segment and index files.
//!
//! A stream's directory holds pairs of files named after the first offset they hold,
//! `00000000000000000000.segment` and `.index`. A segment is an 8-byte file header then
//! chunks back to back; its index is an 8-byte header then one fixed 32-byte entry per chunk
//! (first offset, timestamp, position, records, type), so a reader seeks by offset or by
//! timestamp with a binary search of `pread`s and nothing but the segment list stays in
//! memory.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};

use super::chunk::{Chunk, ChunkHeader, ChunkType, HEADER_SIZE};

/// The first bytes of every segment file.
pub const SEGMENT_HEADER: &[u8; 8] = b"WSEG\0\0\0\x01";
/// The first bytes of every index file.
pub const INDEX_HEADER: &[u8; 8] = b"WIDX\0\0\0\x01";
/// Size of one index entry.
pub const INDEX_ENTRY_SIZE: u64 = 32;

/// One chunk's index entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// The chunk's first offset.
    pub first_offset: u64,
    /// Records it holds.
    pub records: u32,
    /// What it holds.
    pub chunk_type: ChunkType,
    /// When it was written (ms since the epoch).
    pub timestamp: i64,
    /// Where it starts in the segment file.
    pub position: u64,
}

impl IndexEntry {
    /// The offset after its last record.
    pub fn end_offset(&self) -> u64 {
        self.first_offset + u64::from(self.records)
    }

    /// The entry for a chunk at `position`.
    pub fn for_chunk(header: &ChunkHeader, position: u64) -> IndexEntry {
        IndexEntry {
            first_offset: header.first_offset,
            records: header.records,
            chunk_type: header.chunk_type,
            timestamp: header.timestamp,
            position,
        }
    }

    /// The entry's 32 bytes.
    pub fn encode(&self) -> [u8; INDEX_ENTRY_SIZE as usize] {
        let mut out = [0u8; INDEX_ENTRY_SIZE as usize];
        out[0..8].copy_from_slice(&self.first_offset.to_be_bytes());
        out[8..16].copy_from_slice(&self.timestamp.to_be_bytes());
        out[16..24].copy_from_slice(&self.position.to_be_bytes());
        out[24..28].copy_from_slice(&self.records.to_be_bytes());
        out[28] = self.chunk_type as u8;
        out
    }

    fn decode(bytes: &[u8; INDEX_ENTRY_SIZE as usize]) -> Option<IndexEntry> {
        let u64_at = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let chunk_type = match bytes[28] {
            0 => ChunkType::User,
            1 => ChunkType::TrackingDelta,
            2 => ChunkType::TrackingSnapshot,
            _ => return None,
        };
        Some(IndexEntry {
            first_offset: u64_at(0),
            timestamp: u64_at(8) as i64,
            position: u64_at(16),
            records: u32::from_be_bytes(bytes[24..28].try_into().unwrap_or([0; 4])),
            chunk_type,
        })
    }
}

/// The paths of the segment starting at `first_offset` and of its index.
pub fn segment_paths(dir: &Path, first_offset: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{first_offset:020}.segment")),
        dir.join(format!("{first_offset:020}.index")),
    )
}

/// The first offsets of the segments in `dir`, oldest first.
pub fn list_segments(dir: &Path) -> io::Result<Vec<u64>> {
    let mut firsts = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(".segment") {
            if let Ok(first) = stem.parse::<u64>() {
                firsts.push(first);
            }
        }
    }
    firsts.sort_unstable();
    Ok(firsts)
}

/// Reads the chunk at `position` of `file` (whose committed length is `limit`), checking
/// its CRCs. `Ok(None)` when no whole chunk is there.
pub fn read_chunk_at(file: &File, position: u64, limit: u64) -> io::Result<Option<Chunk>> {
    if position + HEADER_SIZE as u64 > limit {
        return Ok(None);
    }
    let mut header_bytes = [0u8; HEADER_SIZE];
    file.read_exact_at(&mut header_bytes, position)?;
    let Ok(header) = ChunkHeader::decode(&header_bytes) else {
        return Ok(None);
    };
    let total = header.total_size();
    if position + total > limit {
        return Ok(None);
    }
    let mut bytes = BytesMut::zeroed(total as usize);
    bytes[..HEADER_SIZE].copy_from_slice(&header_bytes);
    file.read_exact_at(&mut bytes[HEADER_SIZE..], position + HEADER_SIZE as u64)?;
    Ok(Chunk::decode(bytes.freeze()).ok())
}

/// Reads the chunk at `position` of `file` (committed length `limit`) as its bytes on disk,
/// checked: what the leader ships to its replicas. `Ok(None)` when no whole valid chunk is
/// there.
pub fn read_raw_chunk_at(
    file: &File,
    position: u64,
    limit: u64,
) -> io::Result<Option<(ChunkHeader, Bytes)>> {
    if position + HEADER_SIZE as u64 > limit {
        return Ok(None);
    }
    let mut header_bytes = [0u8; HEADER_SIZE];
    file.read_exact_at(&mut header_bytes, position)?;
    let Ok(header) = ChunkHeader::decode(&header_bytes) else {
        return Ok(None);
    };
    let total = header.total_size();
    if position + total > limit {
        return Ok(None);
    }
    let mut bytes = BytesMut::zeroed(total as usize);
    file.read_exact_at(&mut bytes, position)?;
    let bytes = bytes.freeze();
    match Chunk::decode(bytes.clone()) {
        Ok(_) => Ok(Some((header, bytes))),
        Err(_) => Ok(None),
    }
}

/// Reads every valid chunk of a segment from its start, stopping at the first torn or
/// corrupt one. Returns the index entries of the valid chunks and the length of the valid
/// prefix; `visit` sees each valid chunk in order.
pub fn scan_segment(
    path: &Path,
    mut visit: impl FnMut(&Chunk),
) -> io::Result<(Vec<IndexEntry>, u64)> {
    let mut file = File::open(path)?;
    let mut contents = Vec::new();
    file.read_to_end(&mut contents)?;
    let contents = Bytes::from(contents);
    if contents.len() < SEGMENT_HEADER.len() || &contents[..SEGMENT_HEADER.len()] != SEGMENT_HEADER
    {
        return Ok((Vec::new(), 0));
    }
    let mut position = SEGMENT_HEADER.len();
    let mut entries = Vec::new();
    while let Ok(header) = ChunkHeader::decode(&contents[position..]) {
        let end = position as u64 + header.total_size();
        if end > contents.len() as u64 {
            break;
        }
        let Ok(chunk) = Chunk::decode(contents.slice(position..end as usize)) else {
            break;
        };
        if entries
            .last()
            .is_some_and(|last: &IndexEntry| chunk.header.first_offset != last.end_offset())
        {
            break;
        }
        visit(&chunk);
        entries.push(IndexEntry::for_chunk(&chunk.header, position as u64));
        position = end as usize;
    }
    Ok((entries, position as u64))
}

/// Creates (or empties) a segment and its index, each with its header.
pub fn create_segment(dir: &Path, first_offset: u64) -> io::Result<(File, File)> {
    let (segment_path, index_path) = segment_paths(dir, first_offset);
    let segment = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(segment_path)?;
    segment.write_all_at(SEGMENT_HEADER, 0)?;
    let index = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(index_path)?;
    index.write_all_at(INDEX_HEADER, 0)?;
    Ok((segment, index))
}

/// Rewrites an index from scanned entries.
pub fn write_index(path: &Path, entries: &[IndexEntry]) -> io::Result<File> {
    let index = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)?;
    let mut bytes = Vec::with_capacity(8 + entries.len() * INDEX_ENTRY_SIZE as usize);
    bytes.extend_from_slice(INDEX_HEADER);
    for entry in entries {
        bytes.extend_from_slice(&entry.encode());
    }
    index.write_all_at(&bytes, 0)?;
    index.sync_data()?;
    Ok(index)
}

/// The entries of an index file, or `None` when it is missing or damaged.
pub fn read_index(path: &Path) -> Option<Vec<IndexEntry>> {
    let bytes = std::fs::read(path).ok()?;
    if bytes.len() < 8 || &bytes[..8] != INDEX_HEADER || (bytes.len() - 8) % 32 != 0 {
        return None;
    }
    bytes[8..]
        .chunks_exact(INDEX_ENTRY_SIZE as usize)
        .map(|entry| IndexEntry::decode(entry.try_into().ok()?))
        .collect()
}

/// An index file opened for lookups: entry `i` is read with one `pread`.
pub struct IndexFile {
    file: File,
    /// Entries that may be read (the committed ones).
    pub count: u64,
}

impl IndexFile {
    /// Opens the index at `path`, of which `count` entries are committed.
    pub fn open(path: &Path, count: u64) -> io::Result<IndexFile> {
        Ok(IndexFile {
            file: File::open(path)?,
            count,
        })
    }

    /// Entry `i`.
    pub fn entry(&self, i: u64) -> io::Result<IndexEntry> {
        let mut bytes = [0u8; INDEX_ENTRY_SIZE as usize];
        self.file
            .read_exact_at(&mut bytes, INDEX_HEADER.len() as u64 + i * INDEX_ENTRY_SIZE)?;
        IndexEntry::decode(&bytes)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "damaged index entry"))
    }

    /// The first entry for which `is_after` holds (entries are ordered so that it is false,
    /// then true), or `None` when there is none.
    pub fn partition_point(
        &self,
        is_after: impl Fn(&IndexEntry) -> bool,
    ) -> io::Result<Option<IndexEntry>> {
        let (mut low, mut high) = (0, self.count);
        while low < high {
            let middle = low + (high - low) / 2;
            if is_after(&self.entry(middle)?) {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        if low == self.count {
            Ok(None)
        } else {
            self.entry(low).map(Some)
        }
    }
}
