//! Reply bodies (`decode::<Reply>`) from arbitrary bytes, as a client receives them.
//! Checks: nothing panics or allocates without bound; a decoded reply re-encodes to
//! exactly its bytes and decodes to the same reply.
#![no_main]

use gust_proto::{decode, encode, Reply};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = decode::<Reply>(data) {
        let again = encode(&reply);
        assert_eq!(again, data, "a decoded reply re-encodes to its bytes");
        assert_eq!(decode::<Reply>(&again).unwrap(), reply);
    }
});
