//! Placeholder.

use crate::common::Harness;

#[tokio::test]
async fn smoke_harness_drops() {
    let h = Harness::new().await;
    let id = h.create().await;
    assert_eq!(h.snapshot_version(id).await, 1);
}
