//! Request bodies: the first two bytes are the header's op code (u16 little endian),
//! the rest the body, decoded with `decode_request`. Checks: nothing panics or
//! allocates without bound (bincode's size limit); a decoded request has that op code
//! and re-encodes to exactly the body (the encoding is canonical), which decodes to
//! the same request.
#![no_main]

use gust_proto::{decode_request, encode, op_name};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((op, body)) = data.split_first_chunk::<2>() else { return };
    let op = u16::from_le_bytes(*op);
    if let Ok(req) = decode_request(op, body) {
        assert_eq!(req.op(), op);
        assert_eq!(req.name(), op_name(op));
        let again = encode(&req);
        assert_eq!(again, body, "a decoded request re-encodes to its body");
        assert_eq!(decode_request(op, &again).unwrap(), req);
    }
});
