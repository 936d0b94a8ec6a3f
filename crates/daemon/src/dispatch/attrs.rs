//! Requests that change a record in place: its size, attributes, owner, link
//! count and link, extended attributes, a directory's counts and times.

use super::*;

pub(super) fn serve(state: &State, req: Request) -> Reply {
    let md = &state.metadata;
    match req {
        Request::UpdateSize { path, file_id, end, append_len, mtime_ns } => {
            validate_path(&path)?;
            md.update_size(&path, file_id, end, append_len, mtime_ns).map(Response::Offset)
        }
        // The hold itself is registered by `handle_for`, once the size is applied.
        Request::HoldSize { path, file_id, end, mtime_ns, .. } => {
            validate_path(&path)?;
            md.update_size(&path, file_id, end, None, mtime_ns).map(Response::Offset)
        }
        Request::Truncate { path, size, mtime_ns } => {
            validate_path(&path)?;
            let r = md.truncate(&path, size, mtime_ns)?;
            state.events.record(EventKind::Modify, &path, r.file_id, false);
            Ok(Response::Record(r))
        }
        Request::SetAttr { path, mode, atime_ns, mtime_ns, ctime_ns } => {
            validate_path(&path)?;
            let r = md.set_attr(&path, mode, atime_ns, mtime_ns, ctime_ns)?;
            state.events.record(EventKind::Attrib, &path, r.file_id, r.kind == FileKind::Dir);
            Ok(Response::Record(r))
        }
        Request::SetOwner { path, uid, gid, ctime_ns } => {
            validate_path(&path)?;
            md.set_owner(&path, uid, gid, ctime_ns).map(Response::Record)
        }
        Request::SetXattr { path, name, value, flags, ctime_ns } => {
            validate_path(&path)?;
            let r = md.set_xattr(&path, &name, value.as_deref(), flags, ctime_ns)?;
            state.events.record(EventKind::Attrib, &path, r.file_id, r.kind == FileKind::Dir);
            Ok(Response::Record(r))
        }
        Request::LinkCount { path, file_id, delta, ctime_ns } => {
            validate_path(&path)?;
            match md.link_count(&path, file_id, delta, ctime_ns)? {
                LinkCount::Counted(r) => Ok(Response::Record(r)),
                LinkCount::Removed(record) => Ok(Response::Removed { record, inline: false }),
            }
        }
        Request::MarkLinked { path, file_id, link } => {
            validate_path(&path)?;
            validate_path(&link)?;
            md.mark_linked(&path, file_id, &link).map(Response::Record)
        }
        Request::DirChanged { path, subdirs_delta, time_ns } => {
            validate_path(&path)?;
            md.dir_changed(&path, subdirs_delta, time_ns).map(|_| Response::Ok)
        }
        other => misrouted(&other),
    }
}
