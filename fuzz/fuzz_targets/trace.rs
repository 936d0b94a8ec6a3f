//! The trace file codec (gust-trace, codec.rs: `decode_header`, `decode_blocks`, what
//! `gust trace report` reads), over a whole file from the input.
//!
//! Checks: nothing panics; an error's byte offset lies within the file. What decodes
//! re-encodes (`encode_header`, `encode_block` of `encode_record`s, blocks regrouped
//! by thread as the writer makes them) to a file that decodes to the same header and
//! records. Not to the same bytes: varints need not be minimal, a header may carry
//! bytes past its table, and blocks may be split or empty, so the encoding is not
//! canonical. The comparison holds for every decoded string within the encoder's
//! bounds (role, names, paths), which the invalid UTF-8 a reader replaces by U+FFFD
//! (3 bytes for 1) can push past; past them, the encoder cuts, and only "decodes
//! without error" is checked.
#![no_main]

use gust_trace::codec::{
    decode_blocks, decode_header, encode_block, encode_header, encode_record, BLOCK_FLUSH_BYTES, PATH_BYTES_MAX,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (header, at) = match decode_header(data) {
        Ok(h) => h,
        Err(e) => {
            assert!(e.offset <= data.len(), "error at byte {} of {}", e.offset, data.len());
            return;
        }
    };
    assert!(at <= data.len());
    let records = match decode_blocks(data, at, header.base_ns) {
        Ok(r) => r,
        Err(e) => {
            assert!(e.offset <= data.len(), "error at byte {} of {}", e.offset, data.len());
            return;
        }
    };

    // The writer's shape: a thread's records in blocks of about BLOCK_FLUSH_BYTES.
    let mut file = encode_header(&header);
    let mut payload = Vec::new();
    let mut count = 0u32;
    let mut tid = records.first().map_or(0, |(t, _)| *t);
    for (t, r) in &records {
        if *t != tid || payload.len() >= BLOCK_FLUSH_BYTES {
            file.extend_from_slice(&encode_block(tid, count, &payload));
            payload.clear();
            count = 0;
            tid = *t;
        }
        encode_record(&mut payload, r, header.base_ns);
        count += 1;
    }
    if count > 0 {
        file.extend_from_slice(&encode_block(tid, count, &payload));
    }

    let (header2, at2) = decode_header(&file).expect("a re-encoded header decodes");
    let records2 = decode_blocks(&file, at2, header2.base_ns).expect("re-encoded blocks decode");
    assert_eq!(records2.len(), records.len());
    let fits = header.role.len() <= u16::MAX as usize && header.tracepoints.iter().all(|(_, n)| n.len() <= 255);
    if fits {
        assert_eq!(header2, header);
    }
    for ((t, r), (t2, r2)) in records.iter().zip(&records2) {
        assert_eq!(t, t2);
        if r.path.len() <= PATH_BYTES_MAX {
            assert_eq!(r, r2);
        } else {
            assert!(r.path.starts_with(&r2.path), "a long path is cut, never changed");
        }
    }
});
