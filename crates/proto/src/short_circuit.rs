//! The messages of a daemon's short-circuit socket (`<root directory>/`
//! [`SOCKET_NAME`]), where a client on the daemon's node asks for the local file
//! of a file's chunks and gets it as two descriptors (the data and its sums,
//! SCM_RIGHTS). docs/PROTOCOL.md, "Short-circuit I/O", draws them; docs/DESIGN.md
//! says when the daemon hands a file and how it takes it back.
//!
//! * ask, 32 bytes: magic "GUSTSC01", the client's id (u64, as in `hello`), the
//!   file id (u128); integers little-endian.
//! * answer, 8 bytes: magic "GSC1", then 0 with the two descriptors attached, or
//!   an errno (i32) without any.

/// The socket's name in a daemon's root directory.
pub const SOCKET_NAME: &str = "short-circuit.sock";

const ASK_MAGIC: [u8; 8] = *b"GUSTSC01";
const ANSWER_MAGIC: [u8; 4] = *b"GSC1";

pub const ASK_BYTES: usize = 32;
pub const ANSWER_BYTES: usize = 8;

/// A client's ask for the local file of `file_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub client: u64,
    pub file_id: u128,
}

impl Ask {
    pub fn encode(&self) -> [u8; ASK_BYTES] {
        let mut b = [0u8; ASK_BYTES];
        b[..8].copy_from_slice(&ASK_MAGIC);
        b[8..16].copy_from_slice(&self.client.to_le_bytes());
        b[16..].copy_from_slice(&self.file_id.to_le_bytes());
        b
    }

    /// None unless `b` is a whole ask with its magic.
    pub fn decode(b: &[u8]) -> Option<Ask> {
        if b.len() != ASK_BYTES || b[..8] != ASK_MAGIC {
            return None;
        }
        Some(Ask {
            client: u64::from_le_bytes(b[8..16].try_into().ok()?),
            file_id: u128::from_le_bytes(b[16..].try_into().ok()?),
        })
    }
}

/// The answer: 0 (the descriptors come with it) or the errno of a refusal.
pub fn encode_answer(errno: i32) -> [u8; ANSWER_BYTES] {
    let mut b = [0u8; ANSWER_BYTES];
    b[..4].copy_from_slice(&ANSWER_MAGIC);
    b[4..].copy_from_slice(&errno.to_le_bytes());
    b
}

/// None unless `b` is a whole answer with its magic.
pub fn decode_answer(b: &[u8]) -> Option<i32> {
    if b.len() != ANSWER_BYTES || b[..4] != ANSWER_MAGIC {
        return None;
    }
    Some(i32::from_le_bytes(b[4..].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes PROTOCOL.md shows, both ways; anything else is refused.
    #[test]
    fn asks_and_answers_round_trip_and_nothing_else_decodes() {
        let ask = Ask { client: 0x0102030405060708, file_id: 7 };
        let b = ask.encode();
        assert_eq!(
            hex(&b),
            "4755535453433031 0807060504030201 07000000000000000000000000000000".replace(' ', ""),
            "PROTOCOL.md's example"
        );
        assert_eq!(Ask::decode(&b), Some(ask));
        assert_eq!(Ask::decode(&b[..31]), None);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Ask::decode(&bad), None);
        // EBUSY (16).
        assert_eq!(hex(&encode_answer(16)), "4753433110000000");
        assert_eq!(decode_answer(&encode_answer(0)), Some(0));
        assert_eq!(decode_answer(&encode_answer(16)), Some(16));
        assert_eq!(decode_answer(b"HTTP/1.1"), None);
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
