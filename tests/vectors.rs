//! Every reference root of tests/data/roots.json (computed by NOMT) must match.

mod common;

use std::collections::BTreeMap;

use common::{hex, key_from_hex, naive_root, reference_cases, root_of, unhex};

#[test]
fn reference_roots_match() {
    let cases = reference_cases();
    assert!(
        cases.len() >= 20,
        "expected the full vector set, found {} cases",
        cases.len()
    );

    for case in &cases {
        let name = case["name"].as_str().expect("case name");
        let mut model: BTreeMap<[u8; 32], Vec<u8>> = BTreeMap::new();
        for (i, step) in case["steps"].as_array().expect("steps").iter().enumerate() {
            for op in step["ops"].as_array().expect("ops") {
                let key = key_from_hex(op[0].as_str().expect("key hex"));
                match op[1].as_str() {
                    Some(value) => model.insert(key, unhex(value)),
                    None => model.remove(&key),
                };
            }
            let expected = step["root"].as_str().expect("root hex");
            let root = root_of(&model);
            assert_eq!(hex(&root), expected, "case {name}, step {i}");
            // The naive reference must agree too, or the tests' own oracle is wrong.
            assert_eq!(
                hex(&naive_root(&model)),
                expected,
                "naive reference, case {name}, step {i}"
            );
        }
    }
}
