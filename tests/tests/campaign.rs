//! A campaign of jobs: `gust stop --keep` at the end of one job and
//! `gust start --restart` at the start of the next bring back the same instance with
//! all its data.

use gust_e2e::Instance;

#[test]
fn stop_keep_then_restart_serves_everything() {
    let mut inst = Instance::start_with(3, &["--chunk-size", "4k"]);
    let dir = inst.rootdir().to_path_buf();
    let instance_id = inst.hosts_file().instance;
    let files: Vec<(String, Vec<u8>)> =
        (0..30).map(|i| (format!("/job1/f{i}"), vec![i as u8; 1000 + i * 997])).collect();
    {
        let c = inst.client();
        c.mkdir("/job1", 0o755).unwrap();
        for (p, data) in &files {
            let fd = c.open(p, libc::O_CREAT | libc::O_WRONLY, 0o644).unwrap();
            assert_eq!(c.write(fd, data).unwrap(), data.len());
            c.close(fd).unwrap();
        }
    }
    let out = inst.gust(&["stop", "--keep", "--hosts-file", inst.hosts.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // A plain start refuses to clobber the kept instance and says how to restart it.
    let out = inst.gust(&["start", "--local", "3", "--rootdir", dir.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--restart"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = inst.gust(&["start", "--restart", "--rootdir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "restart failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(inst.hosts_file().instance, instance_id, "restart must keep the instance");
    let c = inst.client();
    let mut names: Vec<String> = c.read_dir("/job1").unwrap().into_iter().map(|e| e.name).collect();
    names.sort();
    assert_eq!(names.len(), files.len());
    for (p, data) in &files {
        let fd = c.open(p, libc::O_RDONLY, 0).unwrap();
        let mut b = vec![0u8; data.len() + 1];
        assert_eq!(c.pread(fd, &mut b, 0).unwrap(), data.len(), "{p}");
        assert!(b[..data.len()] == data[..], "{p} changed across the restart");
        c.close(fd).unwrap();
    }
    // Nothing to restart once an instance is gone for good.
    inst.stop();
    let out = inst.gust(&["start", "--restart", "--rootdir", dir.to_str().unwrap()]);
    assert!(!out.status.success());
}
