//! Corpus layouts, domains and their files.
use super::*;

#[test]
fn shard_names_map_to_domains() {
    assert_eq!(parse_shard("physics"), ("physics", None));
    assert_eq!(
        parse_shard("physics-00000-of-00002"),
        ("physics", Some((0, 2)))
    );
    assert_eq!(parse_shard("earth-science"), ("earth-science", None));
    assert_eq!(parse_shard("a-b-of-c"), ("a-b-of-c", None));
}

#[test]
fn incomplete_shard_sets_are_named() {
    let f = |names: &[&str]| -> Option<String> {
        let files: Vec<ShardFile> = names
            .iter()
            .map(|n| ShardFile {
                path: PathBuf::from(n),
                shard: parse_shard(n).1,
            })
            .collect();
        shard_problem(&files)
    };
    assert_eq!(f(&["b"]), None);
    assert_eq!(f(&["b-00000-of-00002", "b-00001-of-00002"]), None);
    assert!(f(&["b-00000-of-00002"]).unwrap().contains("missing 00001"));
    assert!(
        f(&["b-00000-of-00002", "b-00001-of-00003"])
            .unwrap()
            .contains("disagree")
    );
    assert!(f(&["b", "b-00000-of-00001"]).unwrap().contains("unsharded"));
    assert!(
        f(&["b-00000-of-00001", "b-00001-of-00001"])
            .unwrap()
            .contains("beyond")
    );
}
