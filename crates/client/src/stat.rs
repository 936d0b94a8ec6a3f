//! What `stat` and `statfs` report, and their translation to the C structs that the
//! C-facing front ends (preload, C API) fill in.
//!
//! Not for: fetching anything (namespace.rs and status.rs do), FUSE attributes (the
//! FUSE crate maps a [`Stat`] itself).

use gust_proto::{FileKind, Record, NAME_BYTES_MAX};

/// What `stat` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub kind: FileKind,
    /// Permission bits (no type bits).
    pub mode: u32,
    pub size: u64,
    pub ino: u64,
    pub nlink: u32,
    pub blksize: u64,
    pub blocks: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub file_id: u128,
    pub uid: u32,
    pub gid: u32,
    /// The device number of a device node (st_rdev); 0 otherwise.
    pub rdev: u64,
    /// A view's entry whose object is not fetched yet: an open by file id alone
    /// (`open_known`) would not fetch it, so front ends open it by path.
    pub unfetched: bool,
}

impl Stat {
    /// The inode number (st_ino) of the file with this id.
    pub fn ino_of(file_id: u128) -> u64 {
        if file_id == 0 {
            1
        } else {
            ((file_id as u64) ^ ((file_id >> 64) as u64)) | 2
        }
    }

    pub fn from_record(r: &Record, chunk_size: u64) -> Stat {
        let ino = Self::ino_of(r.file_id);
        // A device node's record keeps its device number in `size`.
        let (size, rdev) = match r.kind {
            FileKind::Symlink => (r.target.len() as u64, 0),
            k if k.is_device() => (0, r.size),
            _ => (r.size, 0),
        };
        Stat {
            kind: r.kind,
            mode: r.mode,
            size,
            ino,
            nlink: r.nlink,
            blksize: chunk_size,
            blocks: size.div_ceil(512),
            atime_ns: r.atime_ns,
            mtime_ns: r.mtime_ns,
            ctime_ns: r.ctime_ns,
            file_id: r.file_id,
            uid: r.uid,
            gid: r.gid,
            rdev,
            unfetched: r.unfetched_object().is_some(),
        }
    }

    /// `st_mode` with the file type bits.
    pub fn st_mode(&self) -> u32 {
        let t = match self.kind {
            FileKind::File => libc::S_IFREG,
            FileKind::Dir => libc::S_IFDIR,
            FileKind::Symlink => libc::S_IFLNK,
            FileKind::Fifo => libc::S_IFIFO,
            FileKind::Socket => libc::S_IFSOCK,
            FileKind::BlockDevice => libc::S_IFBLK,
            FileKind::CharDevice => libc::S_IFCHR,
        };
        t | (self.mode & 0o7777)
    }

    /// As `struct stat`, the way every C-facing front end (preload, C API) reports it.
    pub fn to_libc_stat(&self) -> libc::stat {
        fill_libc_stat!(self, libc::stat)
    }

    /// As `struct stat64` (the same fields; older binaries call the 64 variants).
    pub fn to_libc_stat64(&self) -> libc::stat64 {
        fill_libc_stat!(self, libc::stat64)
    }
}

/// A directory entry's `d_type` for a kind (readdir's, in every C-facing front end).
pub fn d_type(k: FileKind) -> u8 {
    match k {
        FileKind::File => libc::DT_REG,
        FileKind::Dir => libc::DT_DIR,
        FileKind::Symlink => libc::DT_LNK,
        FileKind::Fifo => libc::DT_FIFO,
        FileKind::Socket => libc::DT_SOCK,
        FileKind::BlockDevice => libc::DT_BLK,
        FileKind::CharDevice => libc::DT_CHR,
    }
}

/// Device number every GustFS file reports (st_dev), so tools that compare devices
/// (du, find -xdev, cp) see one file system.
pub const GUST_DEV: u64 = 0x6775;

/// Splits nanoseconds since the epoch into (seconds, nanoseconds), also before 1970.
pub fn split_ns(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

macro_rules! fill_libc_stat {
    ($s:expr, $t:ty) => {{
        let s = $s;
        // SAFETY: stat structs are plain C data; all-zero is a valid value.
        let mut st: $t = unsafe { std::mem::zeroed() };
        st.st_dev = GUST_DEV as _;
        st.st_ino = s.ino as _;
        st.st_nlink = s.nlink as _;
        st.st_mode = s.st_mode() as _;
        st.st_uid = s.uid;
        st.st_gid = s.gid;
        st.st_size = s.size as _;
        st.st_rdev = s.rdev as _;
        st.st_blksize = s.blksize.min(1 << 30) as _;
        st.st_blocks = s.blocks as _;
        let (a, an) = split_ns(s.atime_ns);
        let (m, mn) = split_ns(s.mtime_ns);
        let (c, cn) = split_ns(s.ctime_ns);
        st.st_atime = a as _;
        st.st_atime_nsec = an as _;
        st.st_mtime = m as _;
        st.st_mtime_nsec = mn as _;
        st.st_ctime = c as _;
        st.st_ctime_nsec = cn as _;
        st
    }};
}
use fill_libc_stat;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFs {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub avail_bytes: u64,
    pub files: u64,
    pub daemons: u32,
    pub chunk_size_bytes: u64,
}

/// f_type and f_fsid reported for GustFS ("GUST").
pub const GUST_MAGIC: u64 = 0x4755_5354;
/// Block unit of statfs/statvfs results.
pub const STATFS_BLOCK_BYTES: u64 = 4096;

/// The capacity fields statfs and statvfs share.
macro_rules! fill_capacity {
    ($b:ident, $s:expr) => {{
        let s = $s;
        $b.f_bsize = STATFS_BLOCK_BYTES as _;
        $b.f_frsize = STATFS_BLOCK_BYTES as _;
        $b.f_blocks = (s.total_bytes / STATFS_BLOCK_BYTES) as _;
        $b.f_bfree = (s.free_bytes / STATFS_BLOCK_BYTES) as _;
        $b.f_bavail = (s.avail_bytes / STATFS_BLOCK_BYTES) as _;
        // No inode table: report what exists plus a large free count, so tools that
        // check for free inodes proceed.
        $b.f_files = (s.files + (1 << 32)) as _;
        $b.f_ffree = (1u64 << 32) as _;
    }};
}

macro_rules! fill_libc_statvfs {
    ($s:expr, $t:ty) => {{
        // SAFETY: statvfs structs are plain C data; all-zero is a valid value.
        let mut b: $t = unsafe { std::mem::zeroed() };
        fill_capacity!(b, $s);
        b.f_favail = (1u64 << 32) as _;
        b.f_fsid = GUST_MAGIC as _;
        b.f_namemax = NAME_BYTES_MAX as _;
        b
    }};
}

macro_rules! fill_libc_statfs {
    ($s:expr, $t:ty) => {{
        // SAFETY: statfs structs are plain C data; all-zero is a valid value.
        let mut b: $t = unsafe { std::mem::zeroed() };
        fill_capacity!(b, $s);
        b.f_type = GUST_MAGIC as _;
        b.f_namelen = NAME_BYTES_MAX as _;
        b
    }};
}

impl StatFs {
    /// As `struct statvfs`, the way the C-facing front ends report it.
    pub fn to_libc_statvfs(&self) -> libc::statvfs {
        fill_libc_statvfs!(self, libc::statvfs)
    }

    /// As `struct statvfs64`.
    pub fn to_libc_statvfs64(&self) -> libc::statvfs64 {
        fill_libc_statvfs!(self, libc::statvfs64)
    }

    /// As `struct statfs` (f_type says GustFS).
    pub fn to_libc_statfs(&self) -> libc::statfs {
        fill_libc_statfs!(self, libc::statfs)
    }

    /// As `struct statfs64`.
    pub fn to_libc_statfs64(&self) -> libc::statfs64 {
        fill_libc_statfs!(self, libc::statfs64)
    }
}
