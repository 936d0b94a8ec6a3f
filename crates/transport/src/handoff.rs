//! Handing open descriptors between processes of one node over a Unix stream
//! (SCM_RIGHTS), and who the peer is (SO_PEERCRED). Used for short-circuit I/O: a
//! daemon hands a client on its node the local file of a file's chunks, and the
//! client reads and writes it without a request per transfer (docs/DESIGN.md).
//!
//! Not for: what the messages mean (gust-proto's `short_circuit`), or when a
//! descriptor may be handed (the daemon's grants).

use nix::sys::socket::{getsockopt, recvmsg, sendmsg, sockopt, ControlMessage, ControlMessageOwned, MsgFlags};
use std::io::{self, IoSlice, IoSliceMut};
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Most descriptors one message carries.
pub const FDS_MAX: usize = 4;

/// Sends `bytes` (one message, whole or an error) with `fds` attached.
pub fn send(sock: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    assert!(fds.len() <= FDS_MAX, "at most {FDS_MAX} descriptors per message");
    let cmsgs: Vec<ControlMessage<'_>> = if fds.is_empty() { Vec::new() } else { vec![ControlMessage::ScmRights(fds)] };
    let n = sendmsg::<()>(sock.as_raw_fd(), &[IoSlice::new(bytes)], &cmsgs, MsgFlags::MSG_NOSIGNAL, None)?;
    if n != bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short message"));
    }
    Ok(())
}

/// Receives one message into `buf` (its byte count; 0 at the peer's end) and the
/// descriptors that came with it (close-on-exec). Fewer bytes than `buf` holds is
/// the caller's to refuse: messages here are small and sent whole.
pub fn recv(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; FDS_MAX]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => break r?,
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(got) = c {
            // SAFETY: descriptors just received are this process's alone.
            fds.extend(got.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
        }
    }
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    let n = msg.bytes;
    if truncated {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "too many descriptors attached"));
    }
    Ok((n, fds))
}

/// The user id of the process at the other end (as it was when it connected).
pub fn peer_uid(sock: &UnixStream) -> io::Result<u32> {
    Ok(getsockopt(sock, sockopt::PeerCredentials)?.uid())
}

/// Whether the process at the other end runs as this process's user: what a
/// daemon's node-local sockets serve (short-circuit I/O, the node cache). Why
/// not, for a log line, if not.
pub fn same_user(sock: &UnixStream) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match peer_uid(sock) {
        Ok(uid) if uid == me => Ok(()),
        Ok(uid) => Err(format!("refused a process of user {uid} (the instance is user {me}'s)")),
        Err(e) => Err(format!("cannot tell who connected: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    /// A descriptor sent is a working descriptor of the same open file at the
    /// other end; the peer is this process's user.
    #[test]
    fn a_descriptor_crosses_and_names_the_same_file() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"short circuit").unwrap();
        send(&a, b"hello", &[f.as_raw_fd()]).unwrap();
        let mut buf = [0u8; 8];
        let (n, fds) = recv(&b, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        assert_eq!(fds.len(), 1);
        let mut got = std::fs::File::from(fds.into_iter().next().unwrap());
        got.rewind().unwrap();
        let mut s = String::new();
        got.read_to_string(&mut s).unwrap();
        assert_eq!(s, "short circuit");
        // SAFETY: geteuid has no preconditions.
        assert_eq!(peer_uid(&b).unwrap(), unsafe { libc::geteuid() });
        drop(a);
        assert_eq!(recv(&b, &mut buf).unwrap().0, 0, "the peer's end reads as 0 bytes");
    }
}
