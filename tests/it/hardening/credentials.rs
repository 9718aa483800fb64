//! Item 16: credentials in a delegate URL (`http://user:pass@host`) passed `check`, never
//! worked, and the password was published in `/metrics` (no token needed) and
//! `/admin/delegates`. They are refused in config (`check` with `file:line`, and `serve`) and
//! at registration (400), and shown nowhere.

use crate::support::process::{run, text};
use crate::support::TestGateway;
use serde_json::json;

/// The password the tests look for everywhere.
const PASSWORD: &str = "hunter2-CANARY";

#[tokio::test]
async fn credentials_in_a_configured_delegate_url_are_refused_by_check_and_serve() {
    let dir = tempfile::tempdir().expect("tmp");
    let policies = dir.path().join("policies");
    std::fs::create_dir_all(&policies).expect("mkdir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/policies/balanced.toml"),
        policies.join("balanced.toml"),
    )
    .expect("copy policy");
    let file = dir.path().join("gateway.toml");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [policies]\ndir = \"{}\"\n[provenance]\nstore = \"sqlite::memory:\"\n\
         [[delegates]]\nurl = \"http://127.0.0.1:9/ok\"\n\
         [[delegates]]\nurl = \"http://admin:{PASSWORD}@127.0.0.1:9/\"\n",
        policies.display()
    );
    std::fs::write(&file, config).expect("write config");
    let path = file.to_str().expect("utf-8");

    let out = run(&["check", "--config", path], &[]).await;
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "check passed:\n{said}");
    let line = said
        .lines()
        .find(|l| l.contains("delegates[1].url"))
        .unwrap_or_else(|| panic!("no line for the URL:\n{said}"));
    assert!(
        line.starts_with(&format!("{path}:12: delegates[1].url: ")),
        "{line}"
    );
    assert!(line.contains("credentials"), "{line}");
    assert!(
        !said.contains(PASSWORD),
        "the password was printed:\n{said}"
    );

    let out = run(&["serve", "--config", path], &[]).await;
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "serve did not refuse:\n{said}");
    assert!(said.contains("credentials"), "{said}");
    assert!(
        !said.contains(PASSWORD),
        "the password was printed:\n{said}"
    );
    eprintln!("check: {line}");
}

#[tokio::test]
async fn credentials_in_a_registered_delegate_url_are_refused_and_never_published() {
    let gw = TestGateway::builder().spawn().await;
    let admin = gw.admin();
    for reg in [
        json!({"url": format!("http://user:{PASSWORD}@127.0.0.1:9")}),
        json!({"url": format!("ldp://{PASSWORD}@127.0.0.1:9/x"), "name": "named"}),
    ] {
        let r = admin.post_json("/admin/delegates", &reg).await;
        assert_eq!(r.status, 400, "{reg}: {}", r.text());
        let m = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("credentials"), "{m}");
        assert!(!r.text().contains(PASSWORD), "{}", r.text());
    }
    let delegates = admin.get("/admin/delegates").await;
    assert!(!delegates.text().contains(PASSWORD), "{}", delegates.text());
    assert_eq!(
        delegates.json["delegates"].as_array().map(Vec::len),
        Some(0)
    );
    let scrape = gw.metrics().await;
    assert!(!scrape.text().contains(PASSWORD), "{scrape}");
    gw.shutdown().await;
}
