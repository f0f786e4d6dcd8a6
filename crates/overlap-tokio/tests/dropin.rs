//! One program, written against `tokio::fs` and the `tokio::io` traits,
//! run unchanged with `overlapped_tokio::fs` in its place: both must observe
//! the same.

mod with_tokio {
    use tokio::fs;
    include!("dropin_program.rs");
}

mod with_overlap {
    use overlapped_tokio::fs;
    include!("dropin_program.rs");
}

rt_tests!(the_same_program_observes_the_same);

async fn the_same_program_observes_the_same() {
    let (d1, d2) = (crate::util::tempdir(), crate::util::tempdir());
    let theirs = with_tokio::program(d1.path()).await;
    let ours = with_overlap::program(d2.path()).await;
    for (i, (t, o)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(
            o, t,
            "step {i} differs (left: overlapped_tokio, right: tokio)"
        );
    }
    assert_eq!(ours.len(), theirs.len());
    // Not two identical mistakes: some results checked outright.
    assert_eq!(ours[0], "io::copy 300000 bytes, equal: true");
    assert!(ours.iter().any(|l| l == "from 6: \"world\""), "{ours:#?}");
    assert!(
        ours.iter()
            .any(|l| l == "append: \"zero\\none\\ntwo\\n\", position 13"),
        "{ours:#?}"
    );
    assert!(
        ours.iter()
            .any(|l| l.starts_with("open missing: NotFound/Some(2)")),
        "{ours:#?}"
    );
}
