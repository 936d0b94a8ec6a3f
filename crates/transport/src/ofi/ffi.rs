//! The libfabric shim (shim.c) as safe Rust: one endpoint, its address, peers,
//! sends and receives that carry a token, and completions. Where the shim was not
//! built (no libfabric headers), opening says so and nothing else is reachable.

use std::io;

/// One completion: the token its operation was posted with.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Event {
    pub token: u64,
    /// Bytes received (receives only).
    pub len: u64,
    pub is_recv: i32,
    /// 0, or a libfabric error number.
    pub err: i32,
}

/// How the provider spells addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrKind {
    /// A `struct sockaddr` (tcp, verbs over IP): written as `IP:PORT`.
    Socket,
    /// A string (shm: `fi_shm://…`).
    Text,
    /// Anything else (cxi, efa, psm): written in hex.
    Opaque,
}

#[cfg(gust_ofi)]
mod sys {
    use super::Event;
    use std::os::raw::{c_char, c_int, c_void};
    #[repr(C)]
    pub struct Raw {
        _private: [u8; 0],
    }
    extern "C" {
        pub fn gust_ofi_load() -> *const c_char;
        pub fn gust_ofi_strerror(err: c_int) -> *const c_char;
        pub fn gust_ofi_open(
            provider: *const c_char,
            node: *const c_char,
            wait: c_int,
            out: *mut *mut Raw,
            err: *mut c_char,
            errlen: usize,
        ) -> c_int;
        pub fn gust_ofi_close(o: *mut Raw);
        pub fn gust_ofi_addr_kind(o: *const Raw) -> c_int;
        pub fn gust_ofi_max_msg(o: *const Raw) -> u64;
        pub fn gust_ofi_waits(o: *const Raw) -> c_int;
        pub fn gust_ofi_signal(o: *mut Raw);
        pub fn gust_ofi_name(o: *mut Raw, buf: *mut c_void, len: *mut usize) -> c_int;
        pub fn gust_ofi_insert(o: *mut Raw, addr: *const c_void, handle: *mut u64) -> c_int;
        pub fn gust_ofi_send(o: *mut Raw, buf: *const c_void, len: usize, dest: u64, token: u64) -> isize;
        pub fn gust_ofi_recv(o: *mut Raw, buf: *mut c_void, len: usize, token: u64) -> isize;
        pub fn gust_ofi_poll(o: *mut Raw, ev: *mut Event, n: usize, timeout_ms: c_int) -> isize;
    }
}

/// libfabric's "try again" (FI_EAGAIN, which is EAGAIN).
pub const EAGAIN: i64 = libc::EAGAIN as i64;

/// An open endpoint. Every method may be called from any thread (FI_THREAD_SAFE).
pub struct RawEndpoint {
    #[cfg(gust_ofi)]
    raw: *mut sys::Raw,
    /// Without the shim no endpoint can exist: every method is unreachable.
    #[cfg(not(gust_ofi))]
    never: std::convert::Infallible,
}

// SAFETY: the endpoint was opened FI_THREAD_SAFE; the shim keeps no state outside it.
unsafe impl Send for RawEndpoint {}
// SAFETY: as above.
unsafe impl Sync for RawEndpoint {}

#[cfg(gust_ofi)]
fn message(err: i64) -> String {
    // SAFETY: fi_strerror returns a static string for any number.
    unsafe { std::ffi::CStr::from_ptr(sys::gust_ofi_strerror(err as i32)).to_string_lossy().into_owned() }
}

#[cfg(gust_ofi)]
fn error(what: &str, rc: i64) -> io::Error {
    let kind = if rc.abs() == EAGAIN { io::ErrorKind::WouldBlock } else { io::ErrorKind::Other };
    io::Error::new(kind, format!("{what}: {}", message(rc)))
}

#[cfg(gust_ofi)]
impl RawEndpoint {
    /// Opens an endpoint of `provider` bound to `node` (an address of this host;
    /// None: the provider picks), with a queue [`poll`](Self::poll) can wait on if
    /// `wait` and the provider has one.
    pub fn open(provider: &str, node: Option<&str>, wait: bool) -> io::Result<RawEndpoint> {
        use std::ffi::CString;
        let bad = |_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a fabric name");
        let p = CString::new(provider).map_err(bad)?;
        let n = node.map(CString::new).transpose().map_err(bad)?;
        let mut raw = std::ptr::null_mut();
        let mut err = [0 as std::os::raw::c_char; 256];
        // SAFETY: valid C strings and an error buffer of the length given.
        let rc = unsafe {
            sys::gust_ofi_open(
                p.as_ptr(),
                n.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                wait as std::os::raw::c_int,
                &mut raw,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc != 0 {
            // SAFETY: the shim wrote a NUL-terminated string into `err`.
            let why = unsafe { std::ffi::CStr::from_ptr(err.as_ptr()) }.to_string_lossy().into_owned();
            return Err(io::Error::new(io::ErrorKind::Unsupported, why));
        }
        Ok(RawEndpoint { raw })
    }

    pub fn addr_kind(&self) -> AddrKind {
        // SAFETY: an open endpoint.
        match unsafe { sys::gust_ofi_addr_kind(self.raw) } {
            1 => AddrKind::Socket,
            2 => AddrKind::Text,
            _ => AddrKind::Opaque,
        }
    }

    /// The largest message the provider carries.
    pub fn max_msg(&self) -> u64 {
        // SAFETY: an open endpoint.
        unsafe { sys::gust_ofi_max_msg(self.raw) }
    }

    /// Whether `poll` can wait (the queue has a wait object) rather than return.
    pub fn waits(&self) -> bool {
        // SAFETY: an open endpoint.
        unsafe { sys::gust_ofi_waits(self.raw) != 0 }
    }

    /// Wakes a thread waiting in [`poll`](Self::poll).
    pub fn signal(&self) {
        // SAFETY: an open endpoint.
        unsafe { sys::gust_ofi_signal(self.raw) }
    }

    /// This endpoint's address, as the provider encodes it.
    pub fn name(&self) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: a buffer of `len` bytes.
        let rc = unsafe { sys::gust_ofi_name(self.raw, buf.as_mut_ptr().cast(), &mut len) };
        if rc != 0 {
            return Err(error("fi_getname", rc as i64));
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Makes a peer address sendable; its handle.
    pub fn insert(&self, addr: &[u8]) -> io::Result<u64> {
        let mut h = 0u64;
        // SAFETY: the provider reads one address of its own format from `addr`,
        // which the caller built in that format (ofi/address.rs).
        let rc = unsafe { sys::gust_ofi_insert(self.raw, addr.as_ptr().cast(), &mut h) };
        if rc != 0 {
            return Err(error("fi_av_insert", rc as i64));
        }
        Ok(h)
    }

    /// Posts a send of `buf` to `dest`.
    ///
    /// # Safety
    /// `buf` must stay valid and unchanged until the completion of `token` is read.
    pub unsafe fn send(&self, buf: &[u8], dest: u64, token: u64) -> io::Result<()> {
        let rc = sys::gust_ofi_send(self.raw, buf.as_ptr().cast(), buf.len(), dest, token);
        if rc != 0 {
            return Err(error("fi_send", rc as i64));
        }
        Ok(())
    }

    /// Posts a receive into `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid, and nothing else may touch it, until the completion
    /// of `token` is read.
    pub unsafe fn recv(&self, buf: *mut u8, len: usize, token: u64) -> io::Result<()> {
        let rc = sys::gust_ofi_recv(self.raw, buf.cast(), len, token);
        if rc != 0 {
            return Err(error("fi_recv", rc as i64));
        }
        Ok(())
    }

    /// Completions into `ev` (how many), waiting up to `timeout_ms` where the queue can.
    pub fn poll(&self, ev: &mut [Event], timeout_ms: i32) -> io::Result<usize> {
        // SAFETY: `ev` holds `ev.len()` events.
        let n = unsafe { sys::gust_ofi_poll(self.raw, ev.as_mut_ptr(), ev.len(), timeout_ms) };
        if n < 0 {
            return Err(error("fi_cq_read", n as i64));
        }
        Ok(n as usize)
    }

    /// A libfabric error number for people.
    pub fn describe(err: i32) -> String {
        message(err as i64)
    }
}

#[cfg(gust_ofi)]
impl Drop for RawEndpoint {
    fn drop(&mut self) {
        // SAFETY: opened by gust_ofi_open and closed once.
        unsafe { sys::gust_ofi_close(self.raw) }
    }
}

/// Whether libfabric can be used here: None, or why not.
pub fn unavailable() -> Option<String> {
    #[cfg(gust_ofi)]
    {
        // SAFETY: no arguments; returns NULL or a static string.
        let p = unsafe { sys::gust_ofi_load() };
        if p.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated static string.
        Some(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }
    #[cfg(not(gust_ofi))]
    Some("this build of GustFS has no libfabric support (its headers, rdma/fabric.h, were not installed)".into())
}

#[cfg(not(gust_ofi))]
#[allow(clippy::missing_safety_doc)]
impl RawEndpoint {
    pub fn open(_provider: &str, _node: Option<&str>, _wait: bool) -> io::Result<RawEndpoint> {
        Err(io::Error::new(io::ErrorKind::Unsupported, unavailable().unwrap_or_default()))
    }
    pub fn addr_kind(&self) -> AddrKind {
        match self.never {}
    }
    pub fn max_msg(&self) -> u64 {
        match self.never {}
    }
    pub fn waits(&self) -> bool {
        match self.never {}
    }
    pub fn signal(&self) {
        match self.never {}
    }
    pub fn name(&self) -> io::Result<Vec<u8>> {
        match self.never {}
    }
    pub fn insert(&self, _addr: &[u8]) -> io::Result<u64> {
        match self.never {}
    }
    pub unsafe fn send(&self, _buf: &[u8], _dest: u64, _token: u64) -> io::Result<()> {
        match self.never {}
    }
    pub unsafe fn recv(&self, _buf: *mut u8, _len: usize, _token: u64) -> io::Result<()> {
        match self.never {}
    }
    pub fn poll(&self, _ev: &mut [Event], _timeout_ms: i32) -> io::Result<usize> {
        match self.never {}
    }
    pub fn describe(err: i32) -> String {
        format!("libfabric error {err}")
    }
}
