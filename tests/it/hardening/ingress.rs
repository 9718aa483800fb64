//! Item 6 and the ingress's unknown routes: an OpenAI-backed delegate whose URL is the
//! gateway's own `/v1` turned one request into ~200 nested ones (no hop count on the OpenAI
//! path); `/v1/*` paths the ingress does not serve answered in the LDP error shape.

use super::liar::ask;
use crate::support::openai::{declared, entry};
use crate::support::TestGateway;
use std::time::{Duration, Instant};

#[tokio::test]
async fn an_openai_delegate_that_is_the_gateways_own_v1_is_refused_as_a_loop() {
    // The gateway's LDP port, chosen before it starts so its one delegate can be itself.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let own = format!("http://127.0.0.1:{port}/v1");
    let max_hops = 4;
    let served = TestGateway::builder()
        .entry(entry("itself", &own, "chat", declared(&["chat"], 0.9)))
        .config(move |c| {
            c.server.listen = format!("127.0.0.1:{port}").parse().expect("addr");
            c.upstream.max_hops = max_hops;
            c.upstream.task_timeout = Duration::from_secs(20);
            // Bounds the damage on a gateway without the fix: the loop stops at the cap.
            c.server.max_connections = 256;
            // Its `/models` is its own: healthy once it serves, at the next poll.
            c.discovery.poll_interval = Duration::from_millis(300);
        })
        .spawn_process()
        .await;
    let started = Instant::now();
    let r = served
        .client()
        .try_post_with(
            "/v1/chat/completions",
            ask("chat", "hello").to_string().into_bytes(),
            &[],
            Some(Duration::from_secs(60)),
        )
        .await
        .expect("an answer within a minute");
    let took = started.elapsed();
    // On a loop the body nests every level's message: shown cut.
    let text = r.text();
    let shown = &text[..text.len().min(600)];
    let scrape = crate::support::metrics::Scrape(served.admin().get("/metrics").await.text());
    let requests = scrape.sum("ldp_gateway_http_requests_total{route=\"/v1/chat/completions\"");
    // The client's, and one nested request per hop until the hop limit refuses the last.
    assert_eq!(
        requests,
        (max_hops + 1) as f64,
        "{requests} requests for one ({:?}, {shown})",
        r.status
    );
    assert_eq!(r.status, 508, "{shown}");
    assert_eq!(r.json["error"]["code"], "loop_detected", "{shown}");
    let m = r.json["error"]["message"].as_str().unwrap_or_default();
    assert!(m.contains("Loop Detected") && m.contains("'itself'"), "{m}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    eprintln!(
        "an OpenAI delegate at the gateway's own /v1 (max_hops {max_hops}): 508 loop_detected in {took:?} after {} nested requests",
        requests - 1.0
    );
    served.stop().await;
}

#[tokio::test]
async fn unknown_v1_routes_answer_in_openais_shape() {
    let gw = TestGateway::builder().spawn().await;
    let c = gw.client();
    for (method, path) in [
        ("GET", "/v1/embeddings"),
        ("POST", "/v1/completions"),
        ("GET", "/v1/chat/completions"),
        ("GET", "/v1"),
    ] {
        let r = match method {
            "GET" => c.get(path).await,
            _ => c.post_with(path, b"{}".to_vec(), &[]).await,
        };
        assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
        let e = &r.json["error"];
        let keys: Vec<&str> = e
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 4, "{method} {path}: {}", r.text());
        for k in ["message", "type", "param", "code"] {
            assert!(keys.contains(&k), "{method} {path}: no {k} in {}", r.text());
        }
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text());
        assert!(e.get("category").is_none(), "no LDP fields: {}", r.text());
    }
    // The LDP listener's other unknown paths keep the LDP shape.
    let r = c.get("/nope").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json["error"]["category"], "session", "{}", r.text());
    gw.shutdown().await;
}
