//! Frame headers and whole frames from arbitrary bytes: `Header::decode` on the first
//! 24 bytes, then `read_frame` over the input as a stream of frames, read in short
//! pieces as a socket delivers them. Checks: nothing panics; a decoded header is
//! within the bounds and re-encodes to the same bytes; a frame read re-encodes (with
//! `write_frame`) to exactly the bytes it was read from.
#![no_main]

use gust_proto::frame::{read_frame, write_frame, FrameError, Header, HEADER_BYTES};
use gust_proto::{BODY_BYTES_MAX, BULK_BYTES_MAX};
use libfuzzer_sys::fuzz_target;
use std::io::{self, Read};

/// A reader that hands out at most `piece` bytes per read and counts what it gave.
struct Pieces<'a> {
    data: &'a [u8],
    pos: usize,
    piece: usize,
}

impl Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.piece).min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fuzz_target!(|data: &[u8]| {
    if let Some(hb) = data.first_chunk::<HEADER_BYTES>() {
        if let Ok(h) = Header::decode(hb) {
            assert!(h.body_len <= BODY_BYTES_MAX && h.bulk_len <= BULK_BYTES_MAX);
            assert_eq!(&h.encode(), hb, "a decoded header re-encodes to its bytes");
        }
    }
    // Read sizes vary with the input so that partial reads of headers are covered.
    let mut r = Pieces { data, pos: 0, piece: 1 + data.len() % 29 };
    let mut bulk = Vec::new();
    loop {
        let start = r.pos;
        // read_frame sizes its buffers from a header that passed the bounds before
        // reading (up to 32 MiB of bulk); declared lengths far past the input only
        // cost zeroing here, so they are left to `Header::decode` above and the unit
        // tests, to keep this target fast.
        if let Some(hb) = data[start..].first_chunk::<HEADER_BYTES>() {
            if let Ok(h) = Header::decode(hb) {
                if (h.body_len as usize + h.bulk_len as usize) > data.len() - start + (64 << 10) {
                    break;
                }
            }
        }
        match read_frame(&mut r, &mut bulk) {
            Ok(f) => {
                let mut out = Vec::new();
                write_frame(&mut out, f.header.op, f.header.request_id, &f.body, &bulk).unwrap();
                // write_frame says no layout generation (bytes 24..28); the rest is
                // the bytes the frame was read from.
                let read = &data[start..r.pos];
                assert_eq!(out.len(), read.len(), "a frame re-encodes to as many bytes as it was read from");
                assert_eq!(&out[..24], &read[..24], "a frame's header re-encodes to its bytes");
                assert_eq!(&out[28..], &read[28..], "a frame re-encodes to the bytes it was read from");
            }
            Err(FrameError::Closed) => {
                assert_eq!(start, data.len(), "a clean close only between frames");
                break;
            }
            Err(_) => break,
        }
    }
});
