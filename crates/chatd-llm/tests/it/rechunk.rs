//! The decoded events do not depend on how the network split the bytes:
//! every transcript of both providers, re-chunked at random byte boundaries
//! (inside multi-byte UTF-8 characters and between `\r` and `\n` included),
//! decodes to the same items as the whole body at once.

use proptest::prelude::*;

use crate::support::{Items, decode_anthropic_pieces, decode_pieces, read_fixture, split_at};
use crate::transcripts::{all, check};

/// A decoder of one provider's wire format.
type Decode = fn(Vec<Vec<u8>>) -> Items;

/// Every available transcript with its bytes and its decoder.
fn transcripts() -> Vec<(&'static str, Vec<u8>, Decode)> {
    let openai = all()
        .into_iter()
        .filter_map(|e| read_fixture(e.file).map(|body| (e.file, body, decode_pieces as Decode)));
    let anthropic = crate::anthropic::all().into_iter().filter_map(|e| {
        crate::anthropic::body(&e)
            .map(|body| (e.expected.file, body, decode_anthropic_pieces as Decode))
    });
    openai.chain(anthropic).collect()
}

#[test]
fn decoding_in_one_piece_matches_the_documented_content() {
    // The reference the property compares against is itself right.
    for expected in all() {
        if let Some(body) = read_fixture(expected.file) {
            check(&expected, &decode_pieces(vec![body]));
        }
    }
    for expected in crate::anthropic::all() {
        if let Some(body) = crate::anthropic::body(&expected) {
            crate::anthropic::check_anthropic(&expected, &decode_anthropic_pieces(vec![body]));
        }
    }
}

#[test]
fn one_byte_pieces_decode_to_the_same_items() {
    for (file, body, decode) in transcripts() {
        let whole: Items = decode(vec![body.clone()]);
        let bytes: Vec<Vec<u8>> = body.iter().map(|b| vec![*b]).collect();
        assert_eq!(decode(bytes), whole, "{file}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_rechunking_decodes_to_the_same_items(
        cuts in proptest::collection::vec(any::<usize>(), 0..120),
    ) {
        for (file, body, decode) in transcripts() {
            let whole = decode(vec![body.clone()]);
            let pieces = split_at(&body, &cuts);
            prop_assert_eq!(decode(pieces), whole, "{}", file);
        }
    }
}
