use super::*;

#[test]
fn a_heap_table_refuses_past_its_capacity_and_hands_the_value_back() {
    let mut v: HeapVec<u32, 2> = Table::new();
    assert_eq!(v.push(1), Ok(()));
    assert_eq!(v.push(2), Ok(()));
    assert_eq!(v.push(3), Err(3));
    assert_eq!(v.swap_remove(0), 1);
    v.retain(|x| *x != 2);
    assert!(v.is_empty());
    struct Seven(u8);
    impl Empty for Seven {
        const EMPTY: Self = Seven(7);
    }
    let s: HeapSlots<Seven, 3> = Slots::new();
    assert!(s.iter().all(|x| x.0 == 7) && s.len() == 3);
}
