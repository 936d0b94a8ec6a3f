//! The history file: one JSON object per line, one line per event.
//!
//! A worker writes two lines per operation: the invocation, before it calls the file
//! system, and the completion, after the call returned. A line is written (and
//! reaches the file) whole, so a worker killed at any point leaves every operation
//! it completed, and at most one invocation without its completion: an operation
//! that may or may not have taken effect.
//!
//! ```text
//! {"process":2,"seq":17,"op":"chmod","path":"/h/s3","arg":420,"invoke_ns":5001200}
//! {"process":2,"seq":17,"op":"chmod","path":"/h/s3","arg":420,"invoke_ns":5001200,"return_ns":5043100,"result":"ok"}
//! {"process":0,"seq":9,"op":"stat","path":"/h/s3","invoke_ns":5044000,"return_ns":5061000,"result":{"mode":420}}
//! {"process":1,"seq":4,"op":"unlink","path":"/h/s3","invoke_ns":5050000,"return_ns":5071000,"result":{"errno":2}}
//! {"process":3,"seq":8,"op":"create","path":"/h/s3","arg":384,"invoke_ns":5052000,"result":"unknown"}
//! ```
//!
//! * `process`: the worker (a replacement of a killed worker gets a new number);
//!   `seq`: its operation counter, which pairs an invocation with its completion.
//! * `op`: create (open with O_CREAT|O_EXCL, then close), chmod, unlink, stat,
//!   setxattr or getxattr (of one attribute, `user.h`); `arg`: the mode of a
//!   create or chmod, the value of a setxattr (0 otherwise, and then omitted).
//! * `invoke_ns`, `return_ns`: CLOCK_MONOTONIC nanoseconds, taken just before the
//!   call and just after it; every worker runs on one machine, so they compare.
//! * `result`: `"ok"`, `{"mode": m}` (stat), `{"value": v}` (getxattr),
//!   `{"errno": e}` (Linux numbers), or
//!   `"unknown"`: never returned (no `return_ns`: infinity).
//!
//! A line without `result` is an invocation; [`merge`] pairs it with its completion,
//! or makes it an operation with an unknown outcome.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `return_ns` of an operation that never returned: it may take effect at any time
/// after its invocation, or never.
pub const RETURN_NEVER: u64 = u64::MAX;

/// The operations of the model ([`crate::model`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    Create,
    /// open(O_CREAT) without O_EXCL, then close: the preload library's create,
    /// deferred under a directory's claim.
    Open,
    Chmod,
    Unlink,
    Stat,
    /// Whether a listing of the path's directory named it (`Ok`) or not (ENOENT):
    /// one line per watched path of one readdir.
    Listed,
    /// setxattr of the model's one attribute (`user.h`) to the value `arg`.
    Setxattr,
    /// getxattr of it: its value, or ENODATA.
    Getxattr,
}

impl OpKind {
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Open => "open",
            OpKind::Chmod => "chmod",
            OpKind::Unlink => "unlink",
            OpKind::Stat => "stat",
            OpKind::Listed => "listed",
            OpKind::Setxattr => "setxattr",
            OpKind::Getxattr => "getxattr",
        }
    }

    /// Whether it only observes (a stat, a listing): one of unknown result says
    /// nothing and changes nothing.
    pub fn observes(self) -> bool {
        matches!(self, OpKind::Stat | OpKind::Listed | OpKind::Getxattr)
    }
}

/// What an operation returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Ok,
    /// stat: the permission bits.
    Mode(u32),
    /// getxattr: the attribute's value.
    Value(u32),
    Errno(i32),
    /// Never returned (the process was killed first).
    Unknown,
}

/// One line of a history file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub process: u32,
    #[serde(default)]
    pub seq: u64,
    pub op: OpKind,
    pub path: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub arg: u32,
    pub invoke_ns: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_ns: Option<u64>,
    /// None: an invocation line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Outcome>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl Line {
    /// The invocation line of an operation about to be called.
    pub fn invocation(process: u32, seq: u64, op: OpKind, path: &str, arg: u32, invoke_ns: u64) -> Line {
        Line { process, seq, op, path: path.to_string(), arg, invoke_ns, return_ns: None, result: None }
    }

    /// This invocation completed at `return_ns` with `result`.
    pub fn completed(&self, return_ns: u64, result: Outcome) -> Line {
        Line { return_ns: Some(return_ns), result: Some(result), ..self.clone() }
    }

    /// One line of JSON, without the newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a history line always serializes")
    }
}

/// One operation of a merged history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    pub process: u32,
    pub seq: u64,
    pub kind: OpKind,
    pub path: String,
    pub arg: u32,
    pub invoke_ns: u64,
    /// [`RETURN_NEVER`] when the outcome is [`Outcome::Unknown`].
    pub return_ns: u64,
    pub result: Outcome,
}

impl Op {
    /// The history line of this operation (a completion, or an unknown outcome).
    pub fn to_line(&self) -> Line {
        let returned = self.result != Outcome::Unknown;
        Line {
            process: self.process,
            seq: self.seq,
            op: self.kind,
            path: self.path.clone(),
            arg: self.arg,
            invoke_ns: self.invoke_ns,
            return_ns: returned.then_some(self.return_ns),
            result: Some(self.result),
        }
    }
}

/// Parses the lines of one history file. A last line cut short (its writer was
/// killed while writing it) is left out and counted in the second value; any other
/// bad line is an error naming its number.
pub fn parse_lines(text: &str) -> Result<(Vec<Line>, usize), String> {
    let mut lines = Vec::new();
    let mut cut = 0;
    let complete = text.ends_with('\n');
    let all: Vec<&str> = text.lines().collect();
    for (i, l) in all.iter().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Line>(l) {
            Ok(line) => lines.push(line),
            Err(_) if i + 1 == all.len() && !complete => cut += 1,
            Err(e) => return Err(format!("line {}: not a history line ({e}): {l}", i + 1)),
        }
    }
    Ok((lines, cut))
}

/// Pairs invocations with their completions (by process, seq and invocation time)
/// and returns the operations by invocation time. An invocation without a
/// completion becomes an operation with an unknown outcome; a line that is already
/// complete stands alone.
pub fn merge(lines: impl IntoIterator<Item = Line>) -> Result<Vec<Op>, String> {
    let mut by_key: BTreeMap<(u32, u64, u64), Op> = BTreeMap::new();
    for l in lines {
        let key = (l.process, l.seq, l.invoke_ns);
        let op = to_op(&l)?;
        match by_key.get(&key) {
            Some(prev) if prev.result != Outcome::Unknown && op.result != Outcome::Unknown => {
                return Err(format!(
                    "process {} operation {} ({} {}) completes twice",
                    l.process,
                    l.seq,
                    l.op.name(),
                    l.path
                ))
            }
            Some(prev) if prev.result != Outcome::Unknown => {}
            _ => {
                by_key.insert(key, op);
            }
        }
    }
    let mut ops: Vec<Op> = by_key.into_values().collect();
    ops.sort_by_key(|o| (o.invoke_ns, o.process, o.seq));
    Ok(ops)
}

/// The operation a line describes; an invocation line has an unknown outcome.
fn to_op(l: &Line) -> Result<Op, String> {
    let what = || format!("process {} operation {} ({} {})", l.process, l.seq, l.op.name(), l.path);
    let result = l.result.unwrap_or(Outcome::Unknown);
    let shape_ok = match (l.op, result) {
        (_, Outcome::Unknown | Outcome::Errno(_)) => true,
        (OpKind::Stat, Outcome::Mode(_)) => true,
        (OpKind::Getxattr, Outcome::Value(_)) => true,
        (OpKind::Stat | OpKind::Getxattr, Outcome::Ok) => false,
        (_, Outcome::Ok) => true,
        (_, Outcome::Mode(_) | Outcome::Value(_)) => false,
    };
    if !shape_ok {
        return Err(format!("{}: a {} cannot return {}", what(), l.op.name(), describe_outcome(result)));
    }
    let return_ns = match (result, l.return_ns) {
        (Outcome::Unknown, _) => RETURN_NEVER,
        (_, Some(t)) if t >= l.invoke_ns => t,
        (_, Some(t)) => {
            return Err(format!("{}: returns at {t} ns, before its invocation at {} ns", what(), l.invoke_ns))
        }
        (_, None) => return Err(format!("{}: has a result but no return_ns", what())),
    };
    Ok(Op {
        process: l.process,
        seq: l.seq,
        kind: l.op,
        path: l.path.clone(),
        arg: l.arg,
        invoke_ns: l.invoke_ns,
        return_ns,
        result,
    })
}

/// An outcome for people: ok, mode 0644, ENOENT, never returned.
pub fn describe_outcome(r: Outcome) -> String {
    match r {
        Outcome::Ok => "ok".into(),
        Outcome::Mode(m) => format!("mode {m:04o}"),
        Outcome::Value(v) => format!("value {v}"),
        Outcome::Errno(e) => errno_name(e),
        Outcome::Unknown => "never returned".into(),
    }
}

/// The symbolic name of a Linux errno (gust-proto's table), else "errno N".
pub fn errno_name(e: i32) -> String {
    gust_proto::errno::name(e).map_or_else(|| format!("errno {e}"), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_in_the_documented_shape() {
        let inv = Line::invocation(2, 17, OpKind::Chmod, "/h/s3", 0o644, 5_001_200);
        assert_eq!(
            inv.to_json(),
            r#"{"process":2,"seq":17,"op":"chmod","path":"/h/s3","arg":420,"invoke_ns":5001200}"#
        );
        let done = inv.completed(5_043_100, Outcome::Ok);
        assert_eq!(
            done.to_json(),
            r#"{"process":2,"seq":17,"op":"chmod","path":"/h/s3","arg":420,"invoke_ns":5001200,"return_ns":5043100,"result":"ok"}"#
        );
        let stat = Line::invocation(0, 9, OpKind::Stat, "/h/s3", 0, 1).completed(2, Outcome::Mode(0o644));
        assert_eq!(
            stat.to_json(),
            r#"{"process":0,"seq":9,"op":"stat","path":"/h/s3","invoke_ns":1,"return_ns":2,"result":{"mode":420}}"#
        );
        let err = Line::invocation(1, 4, OpKind::Unlink, "/h/s3", 0, 1).completed(2, Outcome::Errno(2));
        assert!(err.to_json().ends_with(r#""result":{"errno":2}}"#));
        for l in [inv, done, stat, err] {
            assert_eq!(serde_json::from_str::<Line>(&l.to_json()).unwrap(), l);
        }
    }

    #[test]
    fn merge_pairs_invocations_and_keeps_the_unreturned_as_unknown() {
        let a = Line::invocation(1, 0, OpKind::Create, "/p", 0o600, 10);
        let b = Line::invocation(1, 1, OpKind::Chmod, "/p", 0o644, 30);
        let text = format!("{}\n{}\n{}\n", a.to_json(), a.completed(20, Outcome::Ok).to_json(), b.to_json());
        let (lines, cut) = parse_lines(&text).unwrap();
        assert_eq!((lines.len(), cut), (3, 0));
        let ops = merge(lines).unwrap();
        assert_eq!(ops.len(), 2);
        assert_eq!((ops[0].result, ops[0].return_ns), (Outcome::Ok, 20));
        assert_eq!((ops[1].result, ops[1].return_ns), (Outcome::Unknown, RETURN_NEVER));
        // The merged line of an unknown outcome reads back the same.
        let again = merge([ops[1].to_line()]).unwrap();
        assert_eq!(again[0], ops[1]);
    }

    #[test]
    fn a_cut_last_line_is_left_out_and_a_bad_line_elsewhere_is_an_error() {
        let a = Line::invocation(1, 0, OpKind::Stat, "/p", 0, 10).to_json();
        let (lines, cut) = parse_lines(&format!("{a}\n{}", &a[..20])).unwrap();
        assert_eq!((lines.len(), cut), (1, 1));
        let e = parse_lines(&format!("{}\n{a}\n", &a[..20])).unwrap_err();
        assert!(e.starts_with("line 1:"), "{e}");
        let bad = Line::invocation(1, 0, OpKind::Stat, "/p", 0, 10).completed(11, Outcome::Ok);
        assert!(merge([bad]).unwrap_err().contains("a stat cannot return ok"));
        let early = Line::invocation(1, 0, OpKind::Unlink, "/p", 0, 10).completed(9, Outcome::Ok);
        assert!(merge([early]).unwrap_err().contains("before its invocation"));
    }
}
