use gust_e2e::Instance;

#[test]
fn write_read_across_daemons() {
    let inst = Instance::start_with(3, &["--chunk-size", "4k"]);
    let c = inst.client();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let fd = c.open("/f", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    assert_eq!(c.write(fd, &data).unwrap(), data.len());
    let mut back = vec![0u8; data.len() + 10];
    assert_eq!(c.pread(fd, &mut back, 0).unwrap(), data.len());
    assert_eq!(&back[..data.len()], &data[..]);
    c.close(fd).unwrap();
    assert_eq!(c.stat("/f").unwrap().size, data.len() as u64);
}
