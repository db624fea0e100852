use super::*;

#[test]
fn saves_atomically_and_reads_back() {
    let dir = std::env::temp_dir().join(format!("rmq-store-{}", std::process::id()));
    let path = dir.join("g.offsets");
    let mut s = LocalStore::open(path.clone());
    assert_eq!(s.get("T", "b", 0), None);
    s.set("T", "b", 0, 42);
    s.set("T", "b", 1, 7);
    s.save();
    assert!(!path.with_extension("tmp").exists());
    std::fs::write(&path, std::fs::read_to_string(&path).unwrap() + "garbage\n").unwrap();
    let s = LocalStore::open(path);
    assert_eq!(
        (s.get("T", "b", 0), s.get("T", "b", 1)),
        (Some(42), Some(7))
    );
    let _ = std::fs::remove_dir_all(dir);
}
