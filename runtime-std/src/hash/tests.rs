use super::*;
use std::hash::{BuildHasher, Hash};

fn h<T: Hash>(t: &T) -> u64 {
    BuildHasherDefault::<FastHasher>::default().hash_one(t)
}

#[test]
fn different_keys_hash_apart_and_equal_keys_alike() {
    // Names differing only past the first word, or only in length (the tail's padding).
    let names = [
        "TopicTest",
        "TopicTesu",
        "TopicTest1",
        "TopicTest\0",
        "BenchTopic",
        "",
    ];
    for (i, a) in names.iter().enumerate() {
        assert_eq!(h(a), h(&a.to_string()));
        for b in names.iter().skip(i + 1) {
            assert_ne!(h(a), h(b), "{a:?} vs {b:?}");
        }
    }
    let mut m: FastMap<String, usize> = FastMap::default();
    for (i, n) in names.iter().enumerate() {
        m.insert((*n).to_owned(), i);
    }
    for (i, n) in names.iter().enumerate() {
        assert_eq!(m.get(*n), Some(&i));
    }
}
