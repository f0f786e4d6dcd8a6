//! overlap-tokio's integration tests: one binary, a module per subject.

mod reactor_ring;
