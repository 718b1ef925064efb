//! Channel names, payload shapes and limits (spec "Notification channels").

use chatd_core::ChatStatus;
use chatd_pubsub::{
    ChatUpdate, MAX_CHANNEL_BYTES, MAX_PAYLOAD_BYTES, MemoryPubsub, OWNERSHIP_CHANNEL,
    OwnershipHint, Publication, Publisher, PubsubError, RecordingPublisher, chat_update_channel,
};
use serde_json::json;
use uuid::Uuid;

use crate::support::assert_payload_too_large;

fn sample_update(chat_id: Uuid) -> ChatUpdate {
    ChatUpdate {
        chat_id,
        snapshot_version: 7,
        worker_id: Some(Uuid::from_u128(0x11)),
        runner_id: None,
        history_version: 3,
        queue_version: 2,
        retry_state_version: 1,
        generation_attempt: 4,
        status: ChatStatus::RequiresAction,
        archived: false,
    }
}

#[test]
fn chat_update_channel_is_the_prefix_and_the_hyphenated_chat_id() {
    let chat_id = Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);

    assert_eq!(
        chat_update_channel(chat_id),
        "chat:update:01234567-89ab-cdef-0123-456789abcdef"
    );
    assert_eq!(OWNERSHIP_CHANNEL, "chat:ownership");
}

#[test]
fn chat_update_payload_has_exactly_the_spec_fields_plus_chat_id() {
    let chat_id = Uuid::from_u128(0xabc);
    let update = sample_update(chat_id);

    let value: serde_json::Value = serde_json::from_slice(&update.to_payload().unwrap()).unwrap();

    assert_eq!(
        value,
        json!({
            "chat_id": "00000000-0000-0000-0000-000000000abc",
            "snapshot_version": 7,
            "worker_id": "00000000-0000-0000-0000-000000000011",
            "runner_id": null,
            "history_version": 3,
            "queue_version": 2,
            "retry_state_version": 1,
            "generation_attempt": 4,
            "status": "requires_action",
            "archived": false,
        })
    );
    assert_eq!(
        ChatUpdate::from_payload(&update.to_payload().unwrap()).unwrap(),
        update
    );
}

#[test]
fn chat_update_and_ownership_hint_publish_on_their_channels() {
    let chat_id = Uuid::new_v4();
    let recorder = RecordingPublisher::new();
    let update = sample_update(chat_id);
    let hint = OwnershipHint {
        chat_id,
        snapshot_version: 7,
    };

    update.publish(&recorder).unwrap();
    hint.publish(&recorder).unwrap();

    let published = recorder.take();
    assert_eq!(published.len(), 2);
    assert_eq!(published[0].channel, chat_update_channel(chat_id));
    assert_eq!(
        ChatUpdate::from_payload(&published[0].payload).unwrap(),
        update
    );
    assert_eq!(published[1].channel, OWNERSHIP_CHANNEL);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&published[1].payload).unwrap(),
        json!({ "chat_id": chat_id.to_string(), "snapshot_version": 7 })
    );
    assert_eq!(
        OwnershipHint::from_payload(&published[1].payload).unwrap(),
        hint
    );
    assert!(
        recorder.published().is_empty(),
        "take() forgets what it returned"
    );
}

#[test]
fn decoding_a_payload_of_the_wrong_shape_is_a_json_error() {
    let err = ChatUpdate::from_payload(br#"{"chat_id":"not-a-uuid"}"#).unwrap_err();
    assert!(matches!(err, PubsubError::Json(_)), "got {err:?}");
}

#[test]
fn payload_and_channel_limits_are_enforced_at_their_exact_boundaries() {
    let pubsub = MemoryPubsub::new();
    let recorder = RecordingPublisher::new();
    let publishers: [&dyn Publisher; 2] = [&pubsub, &recorder];
    let longest_channel = "c".repeat(MAX_CHANNEL_BYTES);
    let largest_payload = "x".repeat(MAX_PAYLOAD_BYTES);

    for publisher in publishers {
        publisher
            .publish(&longest_channel, largest_payload.as_bytes())
            .unwrap();

        let err = publisher
            .publish(
                &longest_channel,
                "x".repeat(MAX_PAYLOAD_BYTES + 1).as_bytes(),
            )
            .unwrap_err();
        assert_payload_too_large(&err, 7901);

        let err = publisher
            .publish(&"c".repeat(MAX_CHANNEL_BYTES + 1), b"{}")
            .unwrap_err();
        assert!(
            matches!(
                err,
                PubsubError::InvalidChannel {
                    reason: "longer than 63 bytes",
                    ..
                }
            ),
            "got {err:?}"
        );

        let err = publisher.publish("a\0b", b"{}").unwrap_err();
        assert!(
            matches!(
                err,
                PubsubError::InvalidChannel {
                    reason: "contains a NUL byte",
                    ..
                }
            ),
            "got {err:?}"
        );

        let err = publisher
            .publish("chat:ownership", &[0xff, 0xfe])
            .unwrap_err();
        assert!(matches!(err, PubsubError::InvalidPayload), "got {err:?}");

        let err = publisher.publish("chat:ownership", b"a\0b").unwrap_err();
        assert!(matches!(err, PubsubError::InvalidPayload), "got {err:?}");
    }
    assert_eq!(
        recorder.published(),
        vec![Publication::new(longest_channel, largest_payload)]
    );
}
