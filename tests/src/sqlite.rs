//! SQLite's multi-process test pattern (Python's sqlite3): writers insert rows in
//! transactions into one database at once; afterwards no row is lost or duplicated
//! and the database checks out. Shared by the lock tests on one host (locks.rs,
//! locks_fuse.rs) and across test hosts (netns_locks.rs), which differ only in how
//! a Python process is started: `python` gets Python's arguments and returns the
//! command (its environment, namespace or mount set).

use std::process::{Command, Stdio};

/// Starts Python with the arguments given, where a writer runs (its namespace,
/// environment, mount).
pub type Python<'a> = &'a dyn Fn(&[&str]) -> Command;

/// Transactions per writer.
pub const ROWS: usize = 200;

/// Arguments: database, writer name, rows. One `begin immediate` transaction per
/// row, so every row takes SQLite's locks on the database file.
const WRITER: &str = r#"
import sqlite3, sys
db, who, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = sqlite3.connect(db, timeout=60, isolation_level=None)
con.execute("create table if not exists t (who text, i integer, unique (who, i))")
for i in range(rows):
    con.execute("begin immediate")
    (n,) = con.execute("select count(*) from t").fetchone()
    con.execute("insert into t values (?, ?)", (who, i))
    con.execute("commit")
con.close()
print("done", who)
"#;

/// Prints rows, distinct rows and the integrity check.
const CHECK: &str = r#"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("select who, i from t").fetchall()
print(len(rows), len(set(rows)), con.execute("pragma integrity_check").fetchone()[0])
"#;

/// Creates an empty database file `db` (what "database is locked" came from
/// before locks), then runs one writer per entry of `writers` at once (the
/// `python` of that writer, so each can be on its own host), each inserting
/// [`ROWS`] rows, and waits for them; panics with a failed writer's output.
pub fn run_writers(writers: &[Python<'_>], db: &str) {
    let touch = writers[0](&["-c", "import sys; open(sys.argv[1], 'w').close()", db]).output().expect("python3");
    assert!(touch.status.success(), "create the empty database: {}", String::from_utf8_lossy(&touch.stderr));
    let rows = ROWS.to_string();
    let names = ["a", "b", "c", "d"];
    let running: Vec<_> = writers
        .iter()
        .zip(names)
        .map(|(python, who)| {
            python(&["-c", WRITER, db, who, &rows])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("python3")
        })
        .collect();
    for w in running {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a writer failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Checks database `db` after `writers` writers ran: every row once, integrity ok.
pub fn check_rows(python: Python<'_>, db: &str, writers: usize) {
    let out = python(&["-c", CHECK, db]).output().expect("python3");
    let want = format!("{0} {0} ok", writers * ROWS);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), want, "{}", String::from_utf8_lossy(&out.stderr));
}
