//! The chunk: the unit a stream writes, indexes, replicates and delivers.
//!
//! The layout is Osiris's (RabbitMQ's stream log), so a chunk read from disk goes to a stream
//! protocol `Deliver` with its header patched and its data copied as they are:
//!
//! ```text
//! 0  magic/version u8 (0x50)   1  chunk type u8   2  entries u16   4  records u32
//! 8  timestamp i64 (ms)        16 epoch u64       24 first offset (chunk id) u64
//! 32 data CRC-32 u32           36 data length u32 40 trailer length u32
//! 44 Bloom filter size u8      45 reserved (3 bytes)
//! 48 Bloom filter, then data (entries), then trailer
//! ```
//!
//! Each entry of a user chunk is a simple entry: a `u32` length with the top bit clear, then
//! the record. The trailer is Warren's: a CRC-32 of the header, the Bloom
//! filter and the trailer's body, then the body (the producers' last publishing ids in this
//! chunk, for deduplication). So every byte of a chunk is checked on recovery, while the data
//! CRC stays the one stream clients may verify.

use bytes::{BufMut, Bytes, BytesMut};

/// Size of a chunk header.
pub const HEADER_SIZE: usize = 48;
/// Osiris's magic (5) and version (0) in one byte.
pub const MAGIC_VERSION: u8 = 0x50;
/// Size of each chunk's Bloom filter when any record carries a filter value (Osiris's
/// default).
pub const BLOOM_SIZE: usize = 16;
/// Number of bit positions each value sets in the Bloom filter.
const BLOOM_HASHES: u64 = 3;
/// The value a record without a filter value adds to its chunk's Bloom filter, so
/// `match-unfiltered` consumers can tell whether a chunk holds unfiltered records.
const UNFILTERED_MARK: &[u8] = b"\0unfiltered";

/// What a chunk holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkType {
    /// Published records, delivered to consumers.
    User = 0,
    /// Consumer offsets stored since the last snapshot.
    TrackingDelta = 1,
    /// Every consumer offset and producer sequence, written first in each segment, so
    /// retention never loses them.
    TrackingSnapshot = 2,
}

impl ChunkType {
    fn from_byte(byte: u8) -> Option<ChunkType> {
        match byte {
            0 => Some(ChunkType::User),
            1 => Some(ChunkType::TrackingDelta),
            2 => Some(ChunkType::TrackingSnapshot),
            _ => None,
        }
    }
}

/// A decoded chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// What the chunk holds.
    pub chunk_type: ChunkType,
    /// Entries in the data section.
    pub entries: u16,
    /// Records (offsets) the chunk takes; 0 for tracking chunks.
    pub records: u32,
    /// Milliseconds since the Unix epoch when the chunk was written.
    pub timestamp: i64,
    /// Leader epoch (always 1 on a single node).
    pub epoch: u64,
    /// Offset of the chunk's first record.
    pub first_offset: u64,
    /// CRC-32 of the data section.
    pub data_crc: u32,
    /// Length of the data section.
    pub data_length: u32,
    /// Length of the trailer.
    pub trailer_length: u32,
    /// Length of the Bloom filter.
    pub bloom_size: u8,
}

/// Why bytes are not a valid chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkError {
    /// Fewer bytes than the header says the chunk has (a torn write).
    Incomplete,
    /// A field or a checksum is wrong.
    Corrupt(&'static str),
}

impl std::fmt::Display for ChunkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChunkError::Incomplete => write!(f, "incomplete chunk"),
            ChunkError::Corrupt(what) => write!(f, "corrupt chunk: {what}"),
        }
    }
}

impl ChunkHeader {
    /// The whole chunk's size on disk.
    pub fn total_size(&self) -> u64 {
        HEADER_SIZE as u64
            + u64::from(self.bloom_size)
            + u64::from(self.data_length)
            + u64::from(self.trailer_length)
    }

    /// The offset after the chunk's last record.
    pub fn end_offset(&self) -> u64 {
        self.first_offset + u64::from(self.records)
    }

    /// Decodes a header from the first [`HEADER_SIZE`] bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<ChunkHeader, ChunkError> {
        if bytes.len() < HEADER_SIZE {
            return Err(ChunkError::Incomplete);
        }
        if bytes[0] != MAGIC_VERSION {
            return Err(ChunkError::Corrupt("magic"));
        }
        let chunk_type = ChunkType::from_byte(bytes[1]).ok_or(ChunkError::Corrupt("chunk type"))?;
        let u16_at = |at: usize| u16::from_be_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_be_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        Ok(ChunkHeader {
            chunk_type,
            entries: u16_at(2),
            records: u32_at(4),
            timestamp: u64_at(8) as i64,
            epoch: u64_at(16),
            first_offset: u64_at(24),
            data_crc: u32_at(32),
            data_length: u32_at(36),
            trailer_length: u32_at(40),
            bloom_size: bytes[44],
        })
    }

    /// Encodes the header.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u8(MAGIC_VERSION);
        out.put_u8(self.chunk_type as u8);
        out.put_u16(self.entries);
        out.put_u32(self.records);
        out.put_i64(self.timestamp);
        out.put_u64(self.epoch);
        out.put_u64(self.first_offset);
        out.put_u32(self.data_crc);
        out.put_u32(self.data_length);
        out.put_u32(self.trailer_length);
        out.put_u8(self.bloom_size);
        out.put_bytes(0, 3);
    }
}

/// A chunk as read back: its header and its sections.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// The header.
    pub header: ChunkHeader,
    /// The Bloom filter (empty when no record had a filter value).
    pub bloom: Bytes,
    /// The data section (entries).
    pub data: Bytes,
    /// The trailer body (after its CRC).
    pub trailer: Bytes,
}

impl Chunk {
    /// Checks and splits a whole chunk (`bytes` starts with its header and holds at least
    /// [`ChunkHeader::total_size`] bytes).
    pub fn decode(bytes: Bytes) -> Result<Chunk, ChunkError> {
        let header = ChunkHeader::decode(&bytes)?;
        if (bytes.len() as u64) < header.total_size() {
            return Err(ChunkError::Incomplete);
        }
        if header.trailer_length < 4 {
            return Err(ChunkError::Corrupt("trailer length"));
        }
        let bloom_end = HEADER_SIZE + usize::from(header.bloom_size);
        let data_end = bloom_end + header.data_length as usize;
        let end = data_end + header.trailer_length as usize;
        let data = bytes.slice(bloom_end..data_end);
        if crc32fast::hash(&data) != header.data_crc {
            return Err(ChunkError::Corrupt("data CRC"));
        }
        let stored = u32::from_be_bytes(
            bytes[data_end..data_end + 4]
                .try_into()
                .map_err(|_| ChunkError::Corrupt("trailer"))?,
        );
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&bytes[..HEADER_SIZE]);
        hasher.update(&bytes[HEADER_SIZE..bloom_end]);
        hasher.update(&bytes[data_end + 4..end]);
        if hasher.finalize() != stored {
            return Err(ChunkError::Corrupt("header CRC"));
        }
        Ok(Chunk {
            header,
            bloom: bytes.slice(HEADER_SIZE..bloom_end),
            data,
            trailer: bytes.slice(data_end + 4..end),
        })
    }

    /// The records of a user chunk's data section.
    pub fn records(&self) -> EntryIter<'_> {
        EntryIter { rest: &self.data }
    }

    /// The chunk as a stream protocol `Deliver` carries it: the header with no Bloom filter
    /// and no trailer (clients parse records right after the header), then the data.
    pub fn wire_bytes(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(HEADER_SIZE + self.data.len());
        self.write_wire(&mut out);
        out.freeze()
    }

    /// Appends [`Chunk::wire_bytes`] to `out` without building them apart.
    pub fn write_wire(&self, out: &mut BytesMut) {
        ChunkHeader {
            bloom_size: 0,
            trailer_length: 0,
            ..self.header
        }
        .encode(out);
        out.extend_from_slice(&self.data);
    }

    /// Whether any of `values` may be in the chunk, or (with `match_unfiltered`) a record
    /// without a filter value. A chunk without a Bloom filter holds only unfiltered records.
    pub fn may_match(&self, values: &[String], match_unfiltered: bool) -> bool {
        if self.bloom.is_empty() {
            return match_unfiltered;
        }
        (match_unfiltered && bloom_contains(&self.bloom, UNFILTERED_MARK))
            || values
                .iter()
                .any(|value| bloom_contains(&self.bloom, value.as_bytes()))
    }

    /// Whether the chunk may hold a record published without a filter value.
    pub fn may_hold_unfiltered(&self) -> bool {
        self.bloom.is_empty() || bloom_contains(&self.bloom, UNFILTERED_MARK)
    }
}

/// Iterates over the records of a data section; stops at the first malformed entry.
pub struct EntryIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for EntryIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.len() < 4 {
            return None;
        }
        let size = u32::from_be_bytes(self.rest[..4].try_into().ok()?);
        if size & 0x8000_0000 != 0 {
            return None;
        }
        let size = size as usize;
        let record = self.rest.get(4..4 + size)?;
        self.rest = &self.rest[4 + size..];
        Some(record)
    }
}

/// Builds a chunk's bytes.
pub struct ChunkBuilder {
    chunk_type: ChunkType,
    data: BytesMut,
    entries: u32,
    records: u32,
    bloom: Option<[u8; BLOOM_SIZE]>,
    unfiltered: bool,
}

impl ChunkBuilder {
    /// An empty chunk of `chunk_type`.
    pub fn new(chunk_type: ChunkType) -> ChunkBuilder {
        ChunkBuilder {
            chunk_type,
            data: BytesMut::new(),
            entries: 0,
            records: 0,
            bloom: None,
            unfiltered: false,
        }
    }

    /// Adds one record as a simple entry; `filter` is its `x-stream-filter-value`.
    pub fn push_record(&mut self, record: &[u8], filter: Option<&str>) {
        self.data.put_u32(record.len() as u32);
        self.data.extend_from_slice(record);
        self.entries += 1;
        self.records += 1;
        match filter {
            Some(value) => {
                let bloom = self.bloom.get_or_insert([0; BLOOM_SIZE]);
                bloom_insert(bloom, value.as_bytes());
            }
            None => self.unfiltered = true,
        }
    }

    /// Sets the data section of a tracking chunk.
    pub fn set_data(&mut self, data: &[u8]) {
        self.data.clear();
        self.data.extend_from_slice(data);
        self.entries = 1;
    }

    /// Records added so far.
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Entries added so far.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Bytes of data so far.
    pub fn data_len(&self) -> usize {
        self.data.len()
    }

    /// The chunk's bytes, starting at `first_offset`, with `trailer` as the trailer body,
    /// written in epoch 1 (a single node's).
    pub fn finish(self, first_offset: u64, timestamp: i64, trailer: &[u8]) -> Bytes {
        self.finish_in_epoch(1, first_offset, timestamp, trailer)
    }

    /// [`ChunkBuilder::finish`] by the leader of `epoch`.
    pub fn finish_in_epoch(
        mut self,
        epoch: u64,
        first_offset: u64,
        timestamp: i64,
        trailer: &[u8],
    ) -> Bytes {
        if let Some(bloom) = self.bloom.as_mut() {
            if self.unfiltered {
                bloom_insert(bloom, UNFILTERED_MARK);
            }
        }
        let bloom: &[u8] = self.bloom.as_ref().map_or(&[], |b| &b[..]);
        let header = ChunkHeader {
            chunk_type: self.chunk_type,
            entries: self.entries.min(u32::from(u16::MAX)) as u16,
            records: self.records,
            timestamp,
            epoch,
            first_offset,
            data_crc: crc32fast::hash(&self.data),
            data_length: self.data.len() as u32,
            trailer_length: 4 + trailer.len() as u32,
            bloom_size: bloom.len() as u8,
        };
        let mut out = BytesMut::with_capacity(header.total_size() as usize);
        header.encode(&mut out);
        out.extend_from_slice(bloom);
        out.extend_from_slice(&self.data);
        let mut hasher = crc32fast::Hasher::new();
        hasher.update(&out[..HEADER_SIZE]);
        hasher.update(bloom);
        hasher.update(trailer);
        out.put_u32(hasher.finalize());
        out.extend_from_slice(trailer);
        out.freeze()
    }
}

/// FNV-1a: stable across builds and platforms, unlike std's hasher, so filters written by
/// one version are read by the next.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

fn bloom_bits(value: &[u8], bits: u64) -> impl Iterator<Item = u64> {
    let hash = fnv1a(value);
    let (first, second) = (hash & 0xffff_ffff, (hash >> 32) | 1);
    (0..BLOOM_HASHES).map(move |i| first.wrapping_add(i.wrapping_mul(second)) % bits)
}

fn bloom_insert(bloom: &mut [u8], value: &[u8]) {
    let bits = bloom.len() as u64 * 8;
    for bit in bloom_bits(value, bits) {
        bloom[(bit / 8) as usize] |= 1 << (bit % 8);
    }
}

fn bloom_contains(bloom: &[u8], value: &[u8]) -> bool {
    let bits = bloom.len() as u64 * 8;
    bits > 0 && bloom_bits(value, bits).all(|bit| bloom[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_round_trips_and_its_records_come_back_in_order() {
        let mut builder = ChunkBuilder::new(ChunkType::User);
        builder.push_record(b"one", None);
        builder.push_record(b"two", Some("eu"));
        let bytes = builder.finish(10, 1234, b"trailer");
        let chunk = Chunk::decode(bytes).unwrap();
        assert_eq!(chunk.header.first_offset, 10);
        assert_eq!(chunk.header.records, 2);
        assert_eq!(chunk.header.end_offset(), 12);
        assert_eq!(chunk.header.timestamp, 1234);
        assert_eq!(&chunk.trailer[..], b"trailer");
        let records: Vec<&[u8]> = chunk.records().collect();
        assert_eq!(records, vec![&b"one"[..], &b"two"[..]]);
        assert!(chunk.may_match(&["eu".into()], false));
        assert!(chunk.may_match(&[], true), "holds an unfiltered record");
    }

    #[test]
    fn a_flipped_bit_anywhere_or_a_cut_chunk_is_refused() {
        let mut builder = ChunkBuilder::new(ChunkType::User);
        builder.push_record(b"payload", Some("x"));
        let bytes = builder.finish(0, 1, b"t");
        for at in 0..bytes.len() {
            let mut damaged = bytes.to_vec();
            damaged[at] ^= 0x10;
            assert!(Chunk::decode(Bytes::from(damaged)).is_err(), "byte {at}");
        }
        for len in 0..bytes.len() {
            assert!(Chunk::decode(bytes.slice(..len)).is_err(), "length {len}");
        }
    }

    #[test]
    fn wire_bytes_drop_the_bloom_filter_and_trailer_but_keep_the_data_crc() {
        let mut builder = ChunkBuilder::new(ChunkType::User);
        builder.push_record(b"abc", Some("f"));
        let chunk = Chunk::decode(builder.finish(5, 9, b"xyz")).unwrap();
        let wire = chunk.wire_bytes();
        let header = ChunkHeader::decode(&wire).unwrap();
        assert_eq!((header.bloom_size, header.trailer_length), (0, 0));
        assert_eq!(&wire[HEADER_SIZE..], &chunk.data[..]);
        assert_eq!(crc32fast::hash(&wire[HEADER_SIZE..]), header.data_crc);
    }

    #[test]
    fn the_bloom_filter_has_no_false_negatives_and_rejects_most_other_values() {
        let mut builder = ChunkBuilder::new(ChunkType::User);
        builder.push_record(b"a", Some("california"));
        builder.push_record(b"b", Some("texas"));
        let chunk = Chunk::decode(builder.finish(0, 0, b"")).unwrap();
        assert!(chunk.may_match(&["texas".into()], false));
        assert!(chunk.may_match(&["california".into()], false));
        assert!(!chunk.may_match(&[], true), "no unfiltered record");
        let misses = (0..200)
            .filter(|i| !chunk.may_match(&[format!("state-{i}")], false))
            .count();
        assert!(misses > 150, "{misses} of 200 other values rejected");
    }
}
