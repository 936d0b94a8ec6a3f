//! Erasure codes (`gust start --ec 4+2`; docs/DESIGN.md, "Erasure codes"): on six
//! daemons, files written, overwritten in part and truncated read back byte-exact
//! with any two daemons lost (every pair, with clients that pass over them, and
//! two daemons killed with kill -9); a third lost daemon fails the reads of the
//! stripes it held with EIO and a message naming the daemons, never with other
//! bytes; `gust repair` rebuilds the killed daemons' data and parity cells, after
//! which two other daemons may go. A flipped byte in a data cell or a parity cell
//! is never served: a read rewrites a corrupt data block from its stripe, `gust
//! scrub` both kinds. Concurrent writers of one stripe keep its parity. The parity
//! takes half the data's size again. Real daemons, real files.

mod common;

use common::{flip, get, local_file, pattern, put};
use gust_client::{Client, ClientOptions, Errno};
use gust_e2e::{wait_until, Instance};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const CHUNK: u64 = 4096;
const K: u64 = 4;

fn start() -> Instance {
    let inst = Instance::start_with(6, &["--chunk-size", "4k", "--ec", "4+2"]);
    let h = inst.hosts_file();
    assert_eq!((h.ec, h.replicas), (Some((4, 2)), 3), "the hosts file names the code, records kept 3 times");
    inst
}

fn client(inst: &Instance) -> Client {
    inst.client_with(ClientOptions { rpc_timeout: Duration::from_secs(3), force_tcp: false, ..Default::default() })
}

/// A client that passes over `lost` as if they were down.
fn client_without(inst: &Instance, lost: &[u32]) -> Client {
    let c = client(inst);
    for d in lost {
        c.skip_daemon(*d);
    }
    c
}

/// Files of every shape: inline-sized, within one cell, a whole stripe, many
/// stripes with a partial last one; then overwrites across cells and stripes,
/// a truncate inside a stripe and a write past the end (a hole between).
fn write_files(c: &Client) -> BTreeMap<String, Vec<u8>> {
    let mut model = BTreeMap::new();
    for (i, len) in [100usize, 3000, 16384, 40_000, 100_003, 1 << 20].into_iter().enumerate() {
        let p = format!("/f{i}");
        let data = pattern(i as u64 + 1, len);
        put(c, &p, &data);
        model.insert(p, data);
    }
    let over = |c: &Client, model: &mut BTreeMap<String, Vec<u8>>, p: &str, at: usize, len: usize, seed: u64| {
        let bytes = pattern(seed, len);
        let fd = c.open(p, libc::O_WRONLY, 0).unwrap();
        assert_eq!(c.pwrite(fd, &bytes, at as u64).unwrap(), len);
        c.close(fd).unwrap();
        let m = model.get_mut(p).unwrap();
        if m.len() < at + len {
            m.resize(at + len, 0);
        }
        m[at..at + len].copy_from_slice(&bytes);
    };
    over(c, &mut model, "/f3", 5000, 9000, 77);
    over(c, &mut model, "/f4", 100, 60_000, 78);
    over(c, &mut model, "/f4", 33_000, 10, 79);
    over(c, &mut model, "/f5", 500_000, 3, 80);
    c.truncate("/f4", 21_000).unwrap();
    model.get_mut("/f4").unwrap().truncate(21_000);
    over(c, &mut model, "/f4", 30_000, 2000, 81);
    c.truncate("/f2", 9000).unwrap();
    model.get_mut("/f2").unwrap().truncate(9000);
    model
}

/// Overwrites across stripes, a write past the end and a new file, with daemons
/// lost; `model` follows.
fn write_degraded(c: &Client, model: &mut BTreeMap<String, Vec<u8>>) {
    for (p, at, len, seed) in
        [("/f5", 300_000usize, 50_000usize, 90u64), ("/f3", 0, 40_000, 91), ("/f4", 20_000, 30_000, 92)]
    {
        let bytes = pattern(seed, len);
        let fd = c.open(p, libc::O_WRONLY, 0).unwrap();
        assert_eq!(c.pwrite(fd, &bytes, at as u64).unwrap_or_else(|e| panic!("write {p}: {e}")), len);
        c.close(fd).unwrap();
        let m = model.get_mut(p).unwrap();
        if m.len() < at + len {
            m.resize(at + len, 0);
        }
        m[at..at + len].copy_from_slice(&bytes);
    }
    let data = pattern(93, 200_003);
    put(c, "/new", &data);
    model.insert("/new".into(), data);
}

fn check(c: &Client, model: &BTreeMap<String, Vec<u8>>, why: &str) {
    for (p, want) in model {
        let got = get(c, p);
        assert!(
            got == *want,
            "{p} ({why}): {} bytes read, {} expected, first difference at {:?}",
            got.len(),
            want.len(),
            got.iter().zip(want).position(|(a, b)| a != b)
        );
    }
}

fn byte_at(path: &Path, at: u64) -> u8 {
    use std::os::unix::fs::FileExt;
    let mut b = [0u8];
    std::fs::File::open(path).unwrap().read_exact_at(&mut b, at).unwrap();
    b[0]
}

fn kill9(inst: &Instance, id: u32) {
    let pid = inst.daemon_pid(id) as i32;
    // SAFETY: a signal to a daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(wait_until(Duration::from_secs(10), || inst.daemon_gone(id)), "daemon {id} did not die");
}

/// Allocated bytes of the daemons' chunk files (data and parity, not sums).
fn chunk_bytes(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut todo = vec![root.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if m.is_dir() {
                todo.push(e.path());
            } else if d.components().any(|c| c.as_os_str() == "chunks") && !name.ends_with(".sum") {
                total += m.blocks() * 512;
            }
        }
    }
    total
}

#[test]
fn any_two_lost_daemons_lose_nothing_and_repair_rebuilds_them() {
    let inst = start();
    let c = client(&inst);
    let model = write_files(&c);
    check(&c, &model, "all daemons");
    // Every pair of the six daemons, passed over by a client of its own: the
    // stripes' lost cells come back from the other four.
    for a in 0..6 {
        for b in a + 1..6 {
            check(&client_without(&inst, &[a, b]), &model, &format!("without daemons {a} and {b}"));
        }
    }
    // Two daemons really gone (kill -9).
    kill9(&inst, 1);
    kill9(&inst, 4);
    let c2 = client(&inst);
    check(&c2, &model, "daemons 1 and 4 killed");
    // Writes go on without them (degraded): a lost data cell's old bytes are
    // rebuilt from its stripe, its change goes into the parity, and the lost
    // daemons are fenced; `gust repair` below rebuilds their cells, new bytes and
    // all. A fresh client meets the dead daemons during its first write (which is
    // then made again without them).
    let mut model = model;
    write_degraded(&client(&inst), &mut model);
    check(&c2, &model, "written with daemons 1 and 4 killed");
    // A third: the stripes with three cells on lost daemons cannot be read, and
    // say why; none reads wrong bytes.
    let lost3 = client_without(&inst, &[2]);
    let big = "/f5";
    let fd = lost3.open(big, libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(lost3.pread(fd, &mut buf, 0), Err(Errno(libc::EIO)), "a 1 MiB file has stripes on daemons 1, 2 and 4");
    let why = lost3.last_transport_error().unwrap_or_default();
    assert!(why.contains("cells left, 4 needed") && why.contains("do not answer"), "{why}");
    lost3.close(fd).unwrap();

    // Back on their root directories (crashed: they serve nothing until repaired),
    // then repaired from the other cells; then two other daemons may go.
    let probe = client(&inst);
    for d in [1, 4] {
        inst.restart_daemon(d);
        let back = || probe.daemon_recovering(d) == Ok(true);
        assert!(wait_until(Duration::from_secs(20), back), "daemon {d} did not come back recovering");
    }
    for d in [1u32, 4] {
        let out = inst.gust(&["repair", "--id", &d.to_string()]);
        assert!(out.status.success(), "repair {d}: {}", String::from_utf8_lossy(&out.stderr));
    }
    check(&client(&inst), &model, "after repair");
    for pair in [[0u32, 2], [3, 5], [2, 5]] {
        check(&client_without(&inst, &pair), &model, &format!("repaired, then without {pair:?}"));
    }
}

#[test]
fn a_flipped_byte_in_a_data_or_parity_cell_is_never_served() {
    let inst = start();
    let c = client(&inst);
    let data = pattern(5, 64 * 1024);
    put(&c, "/f", &data);
    let id = c.stat("/f").unwrap().file_id;
    let place = gust_placement::ErasureCoded::new(6, gust_placement::ec::Code { k: 4, m: 2 });
    // Stripe 0: data cell 1 (bytes 4096..8192) and parity cell 0.
    let d1 = place.cell_daemon(id, 0, 1);
    let was = flip(&local_file(&inst, d1, id), CHUNK + 100);
    assert_eq!(get(&c, "/f"), data, "the corrupt data cell is rebuilt from its stripe");
    assert_eq!(byte_at(&local_file(&inst, d1, id), CHUNK + 100), was, "and its corrupt block rewritten");
    flip(&local_file(&inst, d1, id), CHUNK + 100);
    let p0 = place.cell_daemon(id, 0, K as u32);
    let parity_file = local_file(&inst, p0, gust_placement::ec::parity_file_id(id));
    let parity_was = flip(&parity_file, 100);
    // Now stripe 0 has a corrupt data cell and a corrupt parity cell: the four
    // others still rebuild it (and rewrite the data cell again); with two more
    // of the stripe's daemons lost, three cells are unusable and the read fails.
    assert_eq!(get(&c, "/f"), data);
    assert_eq!(byte_at(&local_file(&inst, d1, id), CHUNK + 100), was);
    let d0 = place.cell_daemon(id, 0, 0);
    let d2 = place.cell_daemon(id, 0, 2);
    let c2 = client_without(&inst, &[d0, d2]);
    let fd = c2.open("/f", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 2 * CHUNK as usize];
    assert_eq!(c2.pread(fd, &mut buf, 0), Err(Errno(libc::EIO)), "three of stripe 0's cells unusable");
    c2.close(fd).unwrap();

    // `gust scrub` finds what no read met and rewrites it from the stripes: the
    // corrupt parity block (encoded again from the data cells) and a data block
    // of stripe 2 (rebuilt from the other cells).
    let d = place.cell_daemon(id, 2, 3);
    let at = 11 * CHUNK + 7;
    let data_was = flip(&local_file(&inst, d, id), at);
    let out = inst.gust(&["scrub", "--json"]);
    assert!(out.status.success(), "{}", common::output_text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let found = r["corrupt"].as_array().unwrap();
    assert_eq!(found.len(), 2, "{r}");
    assert!(found.iter().all(|f| f["repaired"] == true), "{r}");
    assert_eq!(byte_at(&parity_file, 100), parity_was, "the parity block rewritten");
    assert_eq!(byte_at(&local_file(&inst, d, id), at), data_was, "the data block rewritten");
    assert_eq!(get(&client_without(&inst, &[d0, d2]), "/f"), data, "stripe 0 whole again");
}

#[test]
fn concurrent_writers_of_one_stripe_keep_its_parity() {
    let inst = start();
    let c = client(&inst);
    put(&c, "/shared", &vec![0u8; 4 * K as usize * CHUNK as usize]);
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let inst = &inst;
            s.spawn(move || {
                let c = client(inst);
                let fd = c.open("/shared", libc::O_WRONLY, 0).unwrap();
                for i in 0..150u64 {
                    // Offsets that overlap the other writers' and cross cells.
                    let at = (i * 7919 + t * 1237) % (4 * K * CHUNK - 9000);
                    let len = 1 + ((i * 31 + t) % 9000) as usize;
                    c.pwrite(fd, &pattern(t * 1000 + i, len), at).unwrap();
                }
                c.close(fd).unwrap();
            });
        }
    });
    let truth = get(&c, "/shared");
    for a in 0..6 {
        for b in a + 1..6 {
            assert!(get(&client_without(&inst, &[a, b]), "/shared") == truth, "without {a} and {b}");
        }
    }
}

#[test]
fn parity_takes_half_the_datas_size_again() {
    let inst = start();
    let c = client(&inst);
    let before = chunk_bytes(inst.rootdir());
    let data = pattern(9, 4 << 20);
    put(&c, "/big", &data);
    let used = chunk_bytes(inst.rootdir()) - before;
    let ratio = used as f64 / data.len() as f64;
    assert!((1.49..1.52).contains(&ratio), "4+2 stores {ratio:.3} times the data");
    // Removing the file removes its parity too.
    c.unlink("/big").unwrap();
    assert_eq!(chunk_bytes(inst.rootdir()), before);
    // Bad codes are refused with a message.
    let out = std::process::Command::new(gust_e2e::gust_bin())
        .args(["start", "--local", "4", "--ec", "4+2", "--rootdir"])
        .arg(inst.rootdir().join("other"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--ec 4+2 needs at least 6 daemons"), "{err}");
}

/// A write's old bytes (a data cell's `write_swap` answer) flipped on their way
/// back would turn into a wrong parity change: the writer finds them not matching
/// their sums and encodes those stripes' parity again from the data instead. Every
/// byte then reads back with any one daemon of a 2+1 code lost.
#[test]
fn old_bytes_corrupted_on_the_way_back_do_not_corrupt_the_parity() {
    use gust_e2e::wire::{hosts_through, marked, CorruptingProxy};
    let inst = Instance::start_with(3, &["--chunk-size", "4k", "--ec", "2+1"]);
    let mut want = pattern(5, 60_000);
    want[10_000..30_000].copy_from_slice(&marked(20_000));
    put(&client(&inst), "/f", &want);

    let proxies: Vec<CorruptingProxy> =
        inst.hosts_file().daemons.iter().map(|d| CorruptingProxy::start(&d.tcp_addr(), usize::MAX)).collect();
    let hosts = hosts_through(&inst.hosts, &proxies.iter().map(Some).collect::<Vec<_>>());
    let o = ClientOptions { rpc_timeout: Duration::from_secs(5), force_tcp: true, ..Default::default() };
    let through = Client::open_instance(&hosts, o).unwrap();
    let new = pattern(6, 20_000);
    let fd = through.open("/f", libc::O_WRONLY, 0).unwrap();
    assert_eq!(through.pwrite(fd, &new, 10_000).unwrap(), new.len());
    through.close(fd).unwrap();
    want[10_000..30_000].copy_from_slice(&new);
    let flipped: usize = proxies.iter().map(|p| p.flipped.load(std::sync::atomic::Ordering::SeqCst)).sum();
    assert!(flipped > 0, "the old bytes passed the proxies unflipped");

    let model = BTreeMap::from([("/f".to_string(), want)]);
    check(&client(&inst), &model, "all daemons");
    for d in 0..3 {
        check(&client_without(&inst, &[d]), &model, &format!("daemon {d} lost"));
    }
}

/// Without `--chunk-size`, a stripe holds 1 MiB (256 KiB cells for 4+2, 512 KiB for
/// 2+1); `--chunk-size` still decides when given; instances without `--ec` keep
/// 512 KiB chunks.
#[test]
fn erasure_coded_instances_default_to_stripes_of_a_mebibyte() {
    let chunk = |n: u32, args: &[&str]| Instance::start_with(n, args).hosts_file().chunk_size_bytes;
    assert_eq!(chunk(6, &["--ec", "4+2"]), 256 << 10);
    assert_eq!(chunk(3, &["--ec", "2+1"]), 512 << 10);
    assert_eq!(chunk(6, &["--ec", "4+2", "--chunk-size", "64KiB"]), 64 << 10);
    assert_eq!(chunk(2, &[]), 512 << 10);
}

/// The write hole: parity that passes its checksums but no longer matches its
/// stripe's data (as a writer killed between its two rounds leaves it; here
/// written behind the stripe's back) rebuilds a lost data cell wrong. `gust scrub
/// --stripes` finds it, naming the file, stripe and daemon, and rewrites the
/// parity from the data; the lost cell then rebuilds right.
#[test]
fn scrub_stripes_finds_and_rewrites_parity_behind_its_data() {
    use gust_e2e::frames::call;
    use gust_proto::{Request, Response, Span};
    let inst = Instance::start_with(3, &["--chunk-size", "4k", "--ec", "2+1"]);
    let c = client(&inst);
    let data = pattern(7, 30_000); // stripes of 8 KiB: four, the last in part
    put(&c, "/f", &data);
    let model = BTreeMap::from([("/f".to_string(), data.clone())]);
    let id = c.stat("/f").unwrap().file_id;
    let stripe = 1u64;
    let holder = |cell| (0..3).find(|&d| c.cells_on(id, data.len() as u64, d).contains(&(stripe, cell))).unwrap();
    let (parity, first) = (holder(2), holder(0));
    let junk = pattern(8, 4096);
    let span = Span { offset: stripe * 4096, len: 4096 };
    let sums = gust_proto::sums::piece_sums(span.offset, &junk).collect();
    let w = Request::Write { file_id: gust_placement::ec::parity_file_id(id), spans: vec![span], sums };
    let r = call(&mut inst.authed(parity), &w, &junk);
    assert!(matches!(r, Ok(Response::Written(4096))), "{r:?}");
    check(&client(&inst), &model, "every daemon serving: the parity is not read");
    assert!(get(&client_without(&inst, &[first]), "/f") != data, "stale parity rebuilds the lost cell wrong");

    let json = |out: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let out = inst.gust(&["scrub", "--json", "--no-repair", "--stripes"]);
    assert!(!out.status.success(), "a stale stripe is left: exit 1");
    let r = json(&out);
    assert!(r["corrupt"].as_array().unwrap().is_empty(), "every checksum holds: {r}");
    assert_eq!(r["stripes"]["checked"], 4, "{r}");
    let stale = r["stripes"]["stale"].as_array().unwrap();
    assert_eq!(stale.len(), 1, "{r}");
    assert_eq!(stale[0]["stripe"], stripe);
    assert_eq!(stale[0]["paths"], serde_json::json!(["/f"]));
    assert_eq!(stale[0]["daemons"], serde_json::json!([parity]));
    assert_eq!(stale[0]["repaired"], false);

    let out = inst.gust(&["scrub", "--json", "--stripes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json(&out)["stripes"]["stale"][0]["repaired"], true);
    check(&client_without(&inst, &[first]), &model, "the lost cell, rebuilt after the scrub");
    let out = inst.gust(&["scrub", "--json", "--stripes"]);
    assert!(out.status.success() && json(&out)["stripes"]["stale"].as_array().unwrap().is_empty());
}

/// With capacity placement (`--ec 2+1 --placement capacity`), a stripe's cells go
/// to the first three daemons of its capacity-weighted ranking: a daemon declared
/// eight times the others' size holds cells of about 96% of the stripes, each
/// other one about 41% (an exponential race: module doc of gust-placement's
/// capacity.rs), and with that daemon killed every file still reads back. Local
/// placement is refused with the reason.
#[test]
fn capacity_placement_weights_the_stripes_and_loses_nothing() {
    let sizes = "64MiB,64MiB,64MiB,64MiB,64MiB,512MiB";
    let inst = Instance::start_with(
        6,
        &["--chunk-size", "4k", "--ec", "2+1", "--placement", "capacity", "--declare-capacity", sizes],
    );
    let c = client(&inst);
    let model = write_files(&c);
    for i in 0..40u64 {
        let data = pattern(200 + i, 64 << 10);
        put(&c, &format!("/w{i}"), &data);
    }
    let bytes: Vec<u64> = inst.hosts_file().daemons.iter().map(|d| chunk_bytes(&d.rootdir)).collect();
    let others = bytes[..5].iter().sum::<u64>() as f64 / 5.0;
    assert!(bytes[5] as f64 > 1.8 * others, "the large daemon holds about 2.4 times each other's: {bytes:?}");
    assert!(bytes[..5].iter().all(|&b| b > 0), "every daemon holds cells: {bytes:?}");

    kill9(&inst, 5);
    check(&client_without(&inst, &[5]), &model, "the large daemon lost");

    let out = std::process::Command::new(gust_e2e::gust_bin())
        .args(["start", "--local", "3", "--ec", "2+1", "--placement", "local", "--rootdir"])
        .arg(inst.rootdir().join("other"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--placement local"), "{err}");
}
