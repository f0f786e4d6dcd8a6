//! Unit tests of the on-disk format: round trips, damage detection, and
//! arbitrary bytes.

use super::reader::WINDOW;
use super::*;
use crate::error::Damage;

fn geo() -> Geometry {
    Geometry {
        segment_size: 1 << 16,
        header_size: 4096,
        uuid: 42,
    }
}

fn image(recs: &[&[u8]]) -> Vec<u8> {
    let g = geo();
    let mut out = Vec::new();
    for r in recs {
        let lsn = out.len() as u64;
        out.extend_from_slice(&encode_record(&g, lsn, r));
        out.resize(align_up(out.len() as u64, RECORD_ALIGN) as usize, 0);
    }
    out
}

fn read_all(bytes: &[u8]) -> (Vec<(u64, Vec<u8>)>, Next) {
    let mut r = RecordReader::new(SliceSource { base: 0, bytes }, geo(), 1 << 20, 0);
    let mut out = Vec::new();
    loop {
        match r.next_record().unwrap() {
            Next::Record(l, p) => out.push((l, p)),
            other => return (out, other),
        }
    }
}

/// A segment header of another format version, its CRC made right.
fn header_of_version(version: u32) -> [u8; SEGMENT_HEADER] {
    let mut h = geo().encode_segment_header(7);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c(&h[0..40]);
    h[40..44].copy_from_slice(&crc.to_le_bytes());
    h
}

#[test]
fn reads_format_versions_1_to_3_only() {
    assert_eq!(u32_at(&geo().encode_segment_header(7), 8), 3, "writes 3");
    for v in [1, 2, 3] {
        let h = decode_segment_header(&header_of_version(v)).expect("read");
        assert_eq!((h.seq, h.geometry), (7, geo()), "version {v}");
    }
    for v in [0, 4] {
        assert!(decode_segment_header(&header_of_version(v)).is_none());
    }
}

#[test]
fn round_trip() {
    let img = image(&[b"hello", b"", b"world!!!"]);
    let (recs, end) = read_all(&img);
    assert_eq!(end, Next::End);
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[0], (0, b"hello".to_vec()));
    assert_eq!(recs[1].1, b"");
    assert_eq!(recs[2].1, b"world!!!");
    assert_eq!(recs[1].0, record_span(5));
}

#[test]
fn reads_back_agrees_with_the_reader() {
    let g = geo();
    let rec = encode_record(&g, 64, b"payload");
    assert!(reads_back(&g, 64, &rec));
    let mut r = RecordReader::new(
        SliceSource {
            base: 64,
            bytes: &rec,
        },
        g,
        64,
        64,
    );
    assert_eq!(
        r.next_record().unwrap(),
        Next::Record(64, b"payload".to_vec())
    );
    assert!(!reads_back(&g, 72, &rec), "another position");
    for i in 0..rec.len() {
        let mut bad = rec.clone();
        bad[i] ^= 1;
        assert!(!reads_back(&g, 64, &bad), "byte {i} flipped");
    }
    let f = encode_filler(&g, 64, 128);
    assert!(!reads_back(&g, 64, &f), "a filler is not a record");
    assert!(filler_reads_back(&g, 64, 128, &f));
    assert!(!filler_reads_back(&g, 64, 136, &f));
    // A damaged empty record's stretch (24 bytes): the header alone.
    let short = encode_filler(&g, 64, 24);
    assert_eq!(short.len(), RECORD_HEADER);
    assert!(filler_reads_back(&g, 64, 24, &short));
    assert!(!filler_reads_back(&g, 64, 32, &short));
    // A filler with a payload never claims less than itself.
    let mut f24 = encode_filler(&g, 64, 128);
    f24[RECORD_HEADER..].copy_from_slice(&24u64.to_le_bytes());
    seal_record(&g, 64, &mut f24);
    assert!(!filler_reads_back(&g, 64, 24, &f24));
}

#[test]
fn detects_damage() {
    let img = image(&[b"hello", b"world"]);
    let second = record_span(5) as usize;
    let mut bad = img.clone();
    bad[second + 26] ^= 1;
    assert_eq!(read_all(&bad).1, Next::Damaged(Damage::BadCrc));
    let (recs, _) = read_all(&bad);
    assert_eq!(recs.len(), 1);
    // Truncated record.
    assert_eq!(
        read_all(&img[..img.len() - 4]).1,
        Next::Damaged(Damage::Truncated)
    );
    // A valid record with the wrong LSN (moved).
    let mut moved = image(&[b"hello"]);
    moved.extend_from_slice(&img[..second]);
    assert!(matches!(
        read_all(&moved).1,
        Next::Damaged(Damage::WrongLsn(0))
    ));
    // Another journal's record.
    let other = Geometry { uuid: 7, ..geo() };
    let foreign = encode_record(&other, 0, b"x");
    assert!(matches!(
        read_all(&foreign).1,
        Next::Damaged(Damage::WrongSegment(_))
    ));
    // Zeros then garbage.
    let mut g = image(&[b"a"]);
    g.extend_from_slice(&[0u8; 100]);
    g.push(1);
    assert_eq!(read_all(&g).1, Next::Damaged(Damage::GarbageAfterEnd));
}

#[test]
fn fillers_are_skipped_and_batch_flags_read() {
    let g = geo();
    let mut img = image(&[b"first"]);
    let filler_at = img.len() as u64;
    // A filler over 96 bytes of garbage, then a record of a batch.
    img.extend_from_slice(&encode_filler(&g, filler_at, 128));
    img.extend((0..96).map(|i| i as u8 | 0x80));
    let at = img.len() as u64;
    let mut rec = vec![0u8; RECORD_HEADER + 3];
    rec[8..16].copy_from_slice(&(FLAG_BATCH_CONT | FLAG_BATCH_MORE).to_le_bytes());
    rec[RECORD_HEADER..].copy_from_slice(b"mid");
    seal_record(&g, at, &mut rec);
    img.extend_from_slice(&rec);
    img.resize(align_up(img.len() as u64, RECORD_ALIGN) as usize, 0);
    let mut r = RecordReader::new(
        SliceSource {
            base: 0,
            bytes: &img,
        },
        g,
        1 << 20,
        0,
    );
    assert_eq!(r.next_record().unwrap(), Next::Record(0, b"first".to_vec()));
    assert_eq!(r.last_batch(), (false, false));
    assert_eq!(r.next_record().unwrap(), Next::Record(at, b"mid".to_vec()));
    assert_eq!(r.last_batch(), (true, true));
    assert_eq!(r.next_record().unwrap(), Next::End);
    // A filler is not where a search for valid records stops.
    assert_eq!(
        r.find_valid_after(filler_at, img.len() as u64).unwrap(),
        Some(at)
    );
    // A filler whose length is not a multiple of 8, or too short, is damage.
    for bad in [100u64, 8] {
        let mut img = encode_filler(&g, 0, 128);
        img[RECORD_HEADER..].copy_from_slice(&bad.to_le_bytes());
        seal_record(&g, 0, &mut img);
        assert!(matches!(
            read_all(&img).1,
            Next::Damaged(Damage::BadLength(_))
        ));
    }
}

#[test]
fn headers_round_trip() {
    let g = geo();
    let h = g.encode_segment_header(9);
    assert_eq!(
        decode_segment_header(&h),
        Some(SegmentHeader {
            geometry: g,
            seq: 9
        })
    );
    let mut bad = h;
    bad[30] ^= 1;
    assert_eq!(decode_segment_header(&bad), None);
    let c = Checkpoint {
        geometry: g,
        generation: 3,
        start_lsn: 8,
        durable_lsn: 800,
        reserved_lsn: 4800,
        max_record_bytes: 4096,
    };
    let mut file = vec![0u8; 2 * CHECKPOINT_SLOT];
    file[CHECKPOINT_SLOT..].copy_from_slice(&c.encode());
    let older = Checkpoint { generation: 2, ..c };
    file[..CHECKPOINT_SLOT].copy_from_slice(&older.encode());
    assert_eq!(Checkpoint::decode_file(&file), Some(c));
    file[CHECKPOINT_SLOT + 40] ^= 1;
    assert_eq!(Checkpoint::decode_file(&file), Some(older));
}

/// A version-2 checkpoint slot (no floor; the CRC at 60) reads with its
/// floor at its durable point.
#[test]
fn reads_a_version_2_checkpoint() {
    let c = Checkpoint {
        geometry: geo(),
        generation: 5,
        start_lsn: 8,
        durable_lsn: 800,
        reserved_lsn: 800,
        max_record_bytes: 4096,
    };
    let mut b = c.encode();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    b[60..72].fill(0);
    let crc = crc32c::crc32c(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(Checkpoint::decode(&b), Some(c));
    let v3 = Checkpoint {
        reserved_lsn: 9000,
        ..c
    };
    assert_eq!(Checkpoint::decode(&v3.encode()), Some(v3));
    assert_eq!(v3.floor(), 9000);
    // A floor below the durable point is not a checkpoint the journal writes.
    let bad = Checkpoint {
        reserved_lsn: 700,
        ..c
    };
    assert_eq!(Checkpoint::decode(&bad.encode()), None);
}

#[test]
fn random_bytes_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let valid = image(&[b"one", b"two", b"three"]);
    // The decoder is the same code on every system; under Wine (Windows'
    // tests here) a tenth of the inputs, whose allocations cost far more.
    let inputs = if cfg!(windows) { 2_000 } else { 20_000 };
    for i in 0..inputs {
        let len = rng.random_range(0..600);
        let mut bytes: Vec<u8> = if i % 2 == 0 {
            (0..len).map(|_| rng.random()).collect()
        } else {
            // Mutations of a valid image reach deeper into the decoder.
            let mut v = valid.clone();
            for _ in 0..rng.random_range(1..4) {
                let at = rng.random_range(0..v.len());
                v[at] = rng.random();
            }
            v.truncate(rng.random_range(0..=v.len()));
            v
        };
        if i % 3 == 0 && bytes.len() >= 4 {
            // A huge length must not make the reader allocate it.
            bytes[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        }
        let mut r = RecordReader::new(
            SliceSource {
                base: 0,
                bytes: &bytes,
            },
            geo(),
            4096,
            0,
        );
        let mut steps = 0;
        while let Next::Record(..) = r.next_record().unwrap() {
            steps += 1;
            assert!(steps <= bytes.len() / RECORD_HEADER);
        }
        assert!(r.win.capacity() <= WINDOW + 4096 + RECORD_HEADER);
    }
}
