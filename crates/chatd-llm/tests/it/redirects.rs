//! Provider clients follow no redirects (API.md "Limits, budgets and the
//! token lifecycle"): a `3xx` answer is a non-retryable `invalid_request`
//! error naming the status, and the redirect's target receives nothing, so
//! neither `Authorization` nor `x-api-key` travels to it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chatd_core::ProviderKind;
use chatd_llm::{AnthropicProvider, ErrorKind, OpenAiProvider, Provider, ProviderConfig};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use crate::support::{hello_request, run};

/// A listener that counts the connections it accepts and answers each
/// with a valid empty stream; the redirect target nobody may reach.
async fn target() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut buf = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: 14\r\nconnection: close\r\n\r\ndata: [DONE]\n\n")
                .await;
        }
    });
    (format!("http://{addr}"), hits)
}

/// A server answering every request with `status` and `Location:
/// location`.
async fn redirector(status: u16, location: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let location = location.clone();
            tokio::spawn(async move {
                // The whole request (headers and a small JSON body) arrives
                // in the first reads; what it says does not matter.
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 {status} Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_non_retryable_error_naming_the_status_and_its_target_gets_nothing() {
    let (target_url, hits) = target().await;
    for status in [301u16, 302, 303, 307, 308] {
        let base = redirector(status, format!("{target_url}/v1/chat/completions?stolen=1")).await;
        let providers: Vec<(&str, Arc<dyn Provider>)> = vec![
            (
                "openai",
                Arc::new(
                    OpenAiProvider::new(&base, Some("sk-openai-secret".into()), "fake").unwrap(),
                ),
            ),
            (
                "anthropic",
                Arc::new(
                    AnthropicProvider::new(&base, Some("sk-ant-secret".into()), "fake").unwrap(),
                ),
            ),
            (
                "config",
                ProviderConfig {
                    kind: ProviderKind::OpenaiCompat,
                    base_url: Some(base.clone()),
                    api_key: Some("sk-compat-secret".into()),
                    name: "fake".into(),
                    http: chatd_llm::HttpOptions::default(),
                }
                .build()
                .unwrap(),
            ),
        ];
        for (which, provider) in providers {
            let err = run(provider.as_ref(), &hello_request())
                .await
                .expect_err("a redirect is an error");
            assert_eq!(
                (err.kind, err.retryable, err.status_code),
                (ErrorKind::InvalidRequest, false, Some(status)),
                "{which} {status}: {err:?}"
            );
            assert!(
                err.message.contains(&format!("HTTP {status}")),
                "{which}: {}",
                err.message
            );
            assert!(err.message.contains("redirect"), "{}", err.message);
            assert!(!err.message.contains("stolen"), "{}", err.message);
        }
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the redirect target was reached"
    );
}

#[test]
fn provider_configs_and_providers_print_no_key() {
    let config = ProviderConfig {
        kind: ProviderKind::OpenaiCompat,
        base_url: Some("https://u:url-pass@llm.example/v1?key=url-key".into()),
        api_key: Some("sk-debug-secret".into()),
        name: "fake".into(),
        http: chatd_llm::HttpOptions::default(),
    };
    let provider = OpenAiProvider::new(
        "https://u:url-pass@llm.example/v1?key=url-key",
        Some("sk-debug-secret".into()),
        "fake",
    )
    .unwrap();
    let text = format!("{config:?} {provider:?} {provider:#?}");
    for secret in ["sk-debug-secret", "url-pass", "url-key"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    assert!(
        text.contains("llm.example") && text.contains("<redacted>"),
        "{text}"
    );
}
