//! Items 1, 2 and 15: every duration, rate, size and ratio in config and policies is
//! validated by `check` (and so by `serve`) with `file:line: key: reason`, and the values that
//! panicked at run time are refused before they get there.

use crate::support::process::{run, text};
use std::path::Path;

/// A config in `dir` with `extra` appended, and an empty policy folder beside it holding the
/// shipped default policy.
fn config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let policies = dir.join("policies");
    std::fs::create_dir_all(&policies).expect("mkdir");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/policies/balanced.toml"),
        policies.join("balanced.toml"),
    )
    .expect("copy policy");
    let file = dir.join("gateway.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n\
         [policies]\ndir = \"{}\"\n[provenance]\nstore = \"sqlite::memory:\"\n{extra}",
        policies.display()
    );
    std::fs::write(&file, text).expect("write config");
    file
}

/// Runs `check` and returns its problem lines with the file path replaced by `F`.
async fn problems(file: &Path, env: &[(&str, &str)]) -> Vec<String> {
    let out = run(&["check", "--config", file.to_str().expect("utf-8")], env).await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "check passed:\n{stdout}");
    let name = file.display().to_string();
    stdout
        .lines()
        .filter(|l| l.starts_with(&name))
        .map(|l| l.replacen(&name, "F", 1))
        .collect()
}

#[tokio::test]
async fn a_session_ttl_ceiling_under_one_second_is_refused_by_check() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = config(tmp.path(), "[sessions]\nmax_ttl = \"500ms\"\n");
    let p = problems(&file, &[]).await;
    assert!(
        p.contains(&"F:10: sessions.max_ttl: must be at least 1s, got 500ms".to_owned()),
        "{p:?}"
    );
    // The same value from the environment: no line, but the same refusal.
    let file = config(tmp.path(), "");
    let p = problems(&file, &[("LDP_GATEWAY_SESSIONS__MAX_TTL", "0s")]).await;
    assert!(
        p.contains(&"F: sessions.max_ttl: must be at least 1s, got 0s".to_owned()),
        "{p:?}"
    );
    // `serve` refuses it too instead of starting and panicking on every SESSION_PROPOSE.
    let out = run(
        &["serve", "--config", file.to_str().expect("utf-8")],
        &[("LDP_GATEWAY_SESSIONS__MAX_TTL", "500ms")],
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("sessions.max_ttl: must be at least 1s, got 500ms"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test]
async fn rates_too_small_for_the_limiter_are_refused_everywhere() {
    let tmp = tempfile::tempdir().expect("tmp");
    let hash = ldp_gateway::secret::hash_key("k");
    let file = config(
        tmp.path(),
        &format!(
            "[[tenants]]\nname = \"acme\"\napi_key_sha256 = [\"{hash}\"]\n\
             limits = {{ rps = 5.4e-11 }}\nskill_limits = {{ rps = 1e-300, burst = 0 }}\n\
             [[delegates]]\nurl = \"http://127.0.0.1:9\"\nlimits = {{ rps = -1 }}\n"
        ),
    );
    let p = problems(&file, &[]).await;
    let range = "must be between 0.000001 and 1000000000 requests per second";
    for want in [
        format!("F:12: tenants[0].limits.rps: {range}, got 0.000000000054"),
        format!(
            "F:13: tenants[0].skill_limits.rps: {range}, got 0.{}1",
            "0".repeat(299)
        ),
        "F:13: tenants[0].skill_limits.burst: must be at least 1, got 0".to_owned(),
        format!("F:16: delegates[0].limits.rps: {range}, got -1"),
    ] {
        assert!(p.contains(&want), "missing `{want}` in {p:?}");
    }
    // A policy's [limits] as well (it is hot-reloaded: a bad one must never load).
    std::fs::write(
        tmp.path().join("policies/slow.toml"),
        "name = \"slow\"\n[limits]\nrps = 5.4e-11\n",
    )
    .expect("write policy");
    let file = config(tmp.path(), "");
    let out = run(&["check", "--config", file.to_str().expect("utf-8")], &[]).await;
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "slow.toml:3: limits.rps: {range}, got 0.000000000054"
        )),
        "{stdout}"
    );
}

#[tokio::test]
async fn check_refuses_every_unusable_value_with_its_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = config(
        tmp.path(),
        "[discovery]\nfetch_timeout = \"0s\"\nmax_card_bytes = 10\n\
         [upstream]\ntask_timeout = \"0s\"\nmax_hops = 0\n\
         [security]\nmax_json_depth = 0\nmax_id_bytes = 1\n\
         [routing]\npanic_threshold = 2.0\nbudget_reserve_factor = -1.0\n\
         [outlier]\nerror_rate = 0.0\nbase_ejection = \"10s\"\nmax_ejection = \"1s\"\n\
         [fallback]\nretry_ratio = -0.5\nwindow = \"0s\"\n\
         [sessions]\ndefault_ttl = \"2h\"\nmax_ttl = \"1h\"\n",
    );
    let p = problems(&file, &[]).await;
    for want in [
        "F:10: discovery.fetch_timeout: must be longer than 0s",
        "F:11: discovery.max_card_bytes: must be at least 1024, got 10",
        "F:13: upstream.task_timeout: must be longer than 0s",
        "F:14: upstream.max_hops: must be at least 1, got 0",
        "F:16: security.max_json_depth: must be at least 1, got 0",
        "F:17: security.max_id_bytes: must be at least 16, got 1",
        "F:19: routing.panic_threshold: must be between 0 and 1, got 2",
        "F:20: routing.budget_reserve_factor: must be between 1 and 100 (a reservation is the declared cost times this), got -1",
        "F:22: outlier.error_rate: must be greater than 0 and at most 1, got 0",
        "F:23: outlier.base_ejection: must not be longer than outlier.max_ejection (1s), got 10s",
        "F:26: fallback.retry_ratio: must be between 0 and 1000, got -0.5",
        "F:27: fallback.window: must be longer than 0s",
        "F:29: sessions.default_ttl: must not be longer than sessions.max_ttl (1h), got 2h",
    ] {
        assert!(p.contains(&want.to_owned()), "missing `{want}` in {p:#?}");
    }
    assert_eq!(p.len(), 13, "{p:#?}");
    // The connection bounds, from the environment.
    let file = config(tmp.path(), "");
    let p = problems(
        &file,
        &[
            ("LDP_GATEWAY_SERVER__WRITE_TIMEOUT", "10ms"),
            ("LDP_GATEWAY_SERVER__MAX_CONNECTIONS", "0"),
        ],
    )
    .await;
    assert_eq!(
        p,
        [
            "F: server.write_timeout: must be at least 100ms, got 10ms",
            "F: server.max_connections: must be at least 1, got 0",
        ]
    );
    // The shipped configs stay valid under the stricter checks.
    for shipped in ["config/gateway.toml", "config/demo.toml"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(shipped);
        let problems = ldp_gateway::config::Config::load(&path)
            .map(|c| c.issues())
            .unwrap_or_default();
        assert!(problems.is_empty(), "{shipped}: {problems:?}");
    }
}
