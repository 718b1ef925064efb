//! `PublishBuffer` (spec `chatstate` `PublishBuffer`): nothing leaves before
//! flush, flush keeps order, discard drops, reuse after flush is an error.

use std::sync::Arc;

use chatd_pubsub::{Publication, PublishBuffer, Publisher, PubsubError, RecordingPublisher};

use crate::support::assert_payload_too_large;

fn buffer() -> (Arc<RecordingPublisher>, PublishBuffer) {
    let inner = Arc::new(RecordingPublisher::new());
    let buffer = PublishBuffer::new(inner.clone());
    (inner, buffer)
}

#[test]
fn publish_buffer_forwards_nothing_before_flush_and_everything_in_order_on_flush() {
    let (inner, buffer) = buffer();
    buffer.publish("chat:update:a", b"1").unwrap();
    buffer.publish("chat:ownership", b"2").unwrap();
    buffer.publish("chat:update:a", b"3").unwrap();

    assert!(
        inner.published().is_empty(),
        "nothing may be forwarded before flush"
    );
    assert_eq!(buffer.len(), 3);
    assert!(!buffer.is_empty());
    let expected = publications(&[
        ("chat:update:a", "1"),
        ("chat:ownership", "2"),
        ("chat:update:a", "3"),
    ]);
    assert_eq!(buffer.pending(), expected);

    buffer.flush().unwrap();

    assert_eq!(inner.published(), expected);
    assert!(buffer.is_empty());
    assert_eq!(buffer.len(), 0);
}

#[test]
fn publish_buffer_discard_drops_everything_including_later_publishes() {
    let (inner, buffer) = buffer();
    buffer.publish("chat:update:a", b"1").unwrap();
    buffer.publish("chat:ownership", b"2").unwrap();

    buffer.discard();
    assert!(buffer.is_empty());
    // After a discard, publishes are silently dropped, and so is a flush.
    buffer.publish("chat:update:a", b"3").unwrap();
    assert!(buffer.is_empty());
    buffer.flush().unwrap();
    buffer.discard();

    assert!(inner.published().is_empty());
}

#[test]
fn publish_buffer_publish_after_flush_returns_buffer_flushed_and_forwards_nothing() {
    let (inner, buffer) = buffer();
    buffer.publish("chat:update:a", b"1").unwrap();
    buffer.flush().unwrap();

    let err = buffer.publish("chat:update:a", b"2").unwrap_err();

    assert!(matches!(err, PubsubError::BufferFlushed), "got {err:?}");
    assert!(buffer.is_empty());
    // A second flush forwards nothing new.
    buffer.flush().unwrap();
    assert_eq!(inner.published(), publications(&[("chat:update:a", "1")]));
}

#[test]
fn publish_buffer_discard_after_flush_is_harmless() {
    let (inner, buffer) = buffer();
    buffer.publish("chat:update:a", b"1").unwrap();
    buffer.publish("chat:update:a", b"2").unwrap();
    buffer.flush().unwrap();

    buffer.discard();
    buffer.discard();

    assert_eq!(
        inner.published(),
        publications(&[("chat:update:a", "1"), ("chat:update:a", "2")])
    );
    assert!(buffer.is_empty());
}

#[test]
fn publish_buffer_flush_attempts_every_publication_and_names_the_failed_channels() {
    let (inner, buffer) = buffer();
    inner.fail_channel(Some("chat:ownership"));
    buffer.publish("chat:update:a", b"1").unwrap();
    buffer.publish("chat:ownership", b"2").unwrap();
    buffer.publish("chat:update:a", b"3").unwrap();

    let err = buffer.flush().unwrap_err();

    let PubsubError::Flush {
        attempted,
        failures,
    } = &err
    else {
        panic!("expected a flush error, got {err:?}");
    };
    assert_eq!(*attempted, 3);
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].channel, "chat:ownership");
    assert!(matches!(failures[0].error, PubsubError::Closed));
    assert_eq!(
        err.to_string(),
        "1 of 3 buffered publications failed: chat:ownership: pubsub is closed"
    );
    // The publications around the failure were still forwarded, in order.
    assert_eq!(
        inner.published(),
        publications(&[("chat:update:a", "1"), ("chat:update:a", "3")])
    );
}

#[test]
fn publish_buffer_nested_in_an_outer_buffer_reaches_the_publisher_only_on_the_outer_flush() {
    let recorder = Arc::new(RecordingPublisher::new());
    let outer = Arc::new(PublishBuffer::new(recorder.clone()));
    let inner = PublishBuffer::new(outer.clone());
    outer.publish("chat:update:a", b"outer-1").unwrap();
    inner.publish("chat:update:b", b"inner-1").unwrap();

    inner.flush().unwrap();
    assert!(
        recorder.published().is_empty(),
        "the outer transaction has not committed yet"
    );
    assert_eq!(outer.len(), 2);

    outer.flush().unwrap();
    assert_eq!(
        recorder.published(),
        publications(&[("chat:update:a", "outer-1"), ("chat:update:b", "inner-1")])
    );
}

#[test]
fn publish_buffer_rejects_undeliverable_publications_at_publish_time() {
    let (inner, buffer) = buffer();

    let too_large = vec![b'x'; chatd_pubsub::MAX_PAYLOAD_BYTES + 1];
    let err = buffer.publish("chat:update:a", &too_large).unwrap_err();
    assert_payload_too_large(&err, 7901);
    let err = buffer.publish("", b"{}").unwrap_err();
    assert!(
        matches!(err, PubsubError::InvalidChannel { .. }),
        "got {err:?}"
    );

    assert!(buffer.is_empty());
    buffer.flush().unwrap();
    assert!(inner.published().is_empty());
}

/// `(channel, payload)` pairs as the publications they describe, in order.
fn publications(list: &[(&str, &str)]) -> Vec<Publication> {
    list.iter()
        .map(|&(channel, payload)| Publication::new(channel, payload))
        .collect()
}
