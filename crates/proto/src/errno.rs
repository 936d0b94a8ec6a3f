//! Names of errno values (Linux numbering, as on the wire): one table for every
//! place that shows an errno to people or labels a metric with it.

/// Answer to a request that names a directory whose claim another client holds
/// while the daemon recalls that claim (docs/DESIGN.md, "Claims"): the client sends
/// the request again shortly. Never given to an application.
pub const RETRY: i32 = libc::ERESTART;

/// Answer to a request while its daemon takes part in a move of data to a new
/// layout (`gust expand`, `gust shrink`; docs/DESIGN.md, "Growing and shrinking"):
/// the client sends it again once the move is over. Never given to an application.
pub const MOVING: i32 = libc::EINPROGRESS;

/// Answer to a request routed by an older layout than the daemon's (the frame
/// header's generation): the client reads the hosts file again and routes the
/// operation anew. Never given to an application.
pub const MOVED: i32 = libc::ENOTUNIQ;

/// The symbolic name of a Linux errno, for the ones GustFS gives or meets.
pub fn name(e: i32) -> Option<&'static str> {
    Some(match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::EDEADLK => "EDEADLK",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOLCK => "ENOLCK",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::EREMOTE => "EREMOTE",
        libc::ERESTART => "ERESTART",
        libc::EPROTO => "EPROTO",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ENOTSUP => "ENOTSUP",
        libc::ECONNRESET => "ECONNRESET",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTDOWN => "EHOSTDOWN",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ESTALE => "ESTALE",
        libc::EDQUOT => "EDQUOT",
        libc::EINPROGRESS => "EINPROGRESS",
        libc::ENOTUNIQ => "ENOTUNIQ",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_are_the_symbols() {
        assert_eq!(super::name(libc::ENOENT), Some("ENOENT"));
        assert_eq!(super::name(libc::EREMOTE), Some("EREMOTE"));
        assert_eq!(super::name(-1), None);
    }
}
