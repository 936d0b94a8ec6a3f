//! The metadata record codec (gust-store, record.rs), the bytes of a RocksDB value
//! as a damaged store could hold them.
//!
//! Checks: nothing panics; `decode_checked` answers an empty value as absent, and any
//! other value as the record `decode_record` reads or EIO. A decoded format-2 or
//! format-3 value re-encodes to exactly its bytes (the formats are canonical: every
//! field fixed-width, the target's length exact, attributes in order and at least
//! one in format 3, no spare bytes); a decoded format-1 value (no owner)
//! re-encodes as format 2 with the daemon's uid and gid inserted before the target
//! length, every other byte kept, and that decodes to the same record.
#![no_main]

use gust_store::record::{
    daemon_owner, decode_checked, decode_record, encode_record, VALUE_FIXED_BYTES, VALUE_FIXED_BYTES_1, VALUE_FORMAT,
    VALUE_FORMAT_1, VALUE_FORMAT_XATTRS,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let rec = decode_record(data);
    match decode_checked(b"/\0fuzz", data) {
        Ok(None) => assert!(data.is_empty(), "only an empty value (a tombstone) is absent"),
        Ok(Some(r)) => assert_eq!(Some(r), rec),
        Err(e) => assert!(e == libc::EIO && rec.is_none() && !data.is_empty()),
    }
    let Some(rec) = rec else { return };
    let again = encode_record(&rec);
    assert_eq!(decode_record(&again).as_ref(), Some(&rec), "a re-encoded record decodes to itself");
    match data[0] {
        VALUE_FORMAT | VALUE_FORMAT_XATTRS => assert_eq!(again, data, "formats 2 and 3 are canonical"),
        VALUE_FORMAT_1 => {
            let (uid, gid) = daemon_owner();
            assert_eq!((rec.uid, rec.gid), (uid, gid), "format 1 records are the daemon user's");
            let owner_at = VALUE_FIXED_BYTES_1 - 2;
            let mut want = vec![VALUE_FORMAT];
            want.extend_from_slice(&data[1..owner_at]);
            want.extend_from_slice(&uid.to_le_bytes());
            want.extend_from_slice(&gid.to_le_bytes());
            want.extend_from_slice(&data[owner_at..]);
            assert_eq!(want.len(), data.len() + VALUE_FIXED_BYTES - VALUE_FIXED_BYTES_1);
            assert_eq!(again, want, "format 1 becomes format 2 with the owner inserted");
        }
        f => panic!("decoded a value of format {f}"),
    }
});
