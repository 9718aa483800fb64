//! The session stores' tests: a single node's table, and two replicas sharing sessions through
//! the Redis on this machine.
use super::redis::plausible_id;
use super::*;
use crate::ldp::NegotiatedPayload;
use crate::registry::Registry;
use crate::upstream::UpstreamSession;
use std::time::Duration;

#[test]
fn only_issued_looking_ids_reach_the_shared_state() {
    assert!(plausible_id(&crate::ldp::new_id()));
    for bad in ["", "x:bindings", "../..", &"a".repeat(65), "abc def"] {
        assert!(!plausible_id(bad), "{bad}");
    }
}

fn new(owner: &str) -> NewSession {
    NewSession {
        owner: owner.into(),
        tenant: "acme".into(),
        client_domain: "default".into(),
        required_domain: None,
        payload: NegotiatedPayload::text(),
        policy: Some("fast".into()),
        ttl: Duration::from_secs(60),
    }
}

fn registry() -> Arc<Registry> {
    let cfg = crate::config::DelegateConfig {
        name: Some("d1".into()),
        ..crate::config::DelegateConfig::new("http://127.0.0.1:9")
    };
    Arc::new(Registry::from_config(&[cfg], Default::default(), false).unwrap())
}

fn binding(registry: &Registry, upstream_id: &str) -> Binding {
    Binding {
        delegate: registry.get("d1").unwrap(),
        upstream: UpstreamSession {
            session_id: upstream_id.into(),
            payload: NegotiatedPayload::text(),
            delegate_id: "d1-id".into(),
        },
    }
}

#[tokio::test]
async fn local_sessions_are_the_table() {
    let reg = registry();
    let store = Sessions::Local(LocalSessions::default());
    let s = store.open(new("a"), 10, Some(1)).await.unwrap();
    assert!(matches!(
        store.open(new("a"), 10, Some(1)).await,
        Err(OpenError::Limit(SessionLimit::Tenant(1)))
    ));
    assert!(store.get(&s.id, "b").await.unwrap().session.is_none());
    let found = store.get(&s.id, "a").await.unwrap().session.unwrap();
    assert!(Arc::ptr_eq(&found, &s));
    s.bind("echo", binding(&reg, "u1"));
    store.share_binding(&s, "echo", &binding(&reg, "u1")).await;
    assert!(store
        .share_first_binding(&s, "echo", &binding(&reg, "u2"))
        .await
        .is_none());
    assert!(store.close(&s.id, "b").await.unwrap().is_empty());
    let closed = store.close(&s.id, "a").await.unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(store.table().len(), 0);
    let s = store.open(new("a"), 10, None).await.unwrap();
    s.bind("echo", binding(&reg, "u3"));
    assert_eq!(
        store.take_all().len(),
        1,
        "a single node closes what it holds"
    );
}

fn replicas() -> (Sessions, Sessions, Arc<Registry>) {
    let (redis, _) = crate::state::redis::testing::redis();
    let reg = registry();
    (
        Sessions::Shared(RedisSessions::new(redis.clone(), reg.clone())),
        Sessions::Shared(RedisSessions::new(redis, reg.clone())),
        reg,
    )
}

#[tokio::test]
async fn a_session_opened_on_one_replica_is_served_and_closed_on_another() {
    let (a, b, reg) = replicas();
    let s = a.open(new("o"), 10, None).await.unwrap();
    s.bind("echo", binding(&reg, "u1"));
    a.share_binding(&s, "echo", &binding(&reg, "u1")).await;

    let copy = b.get(&s.id, "o").await.unwrap().session.unwrap();
    assert_eq!(copy.policy.as_deref(), Some("fast"));
    assert_eq!(copy.binding("echo").unwrap().upstream.session_id, "u1");
    assert!(b.get(&s.id, "intruder").await.unwrap().session.is_none());
    assert!(b.get("not an id", "o").await.unwrap().session.is_none());

    // B rebinds; A's next lookup sees it. B withdraws another skill's binding.
    copy.bind("echo", binding(&reg, "u2"));
    b.share_binding(&copy, "echo", &binding(&reg, "u2")).await;
    b.share_binding(&copy, "other", &binding(&reg, "u9")).await;
    b.unshare_binding(&copy, "other").await;
    let again = a.get(&s.id, "o").await.unwrap().session.unwrap();
    assert_eq!(again.binding("echo").unwrap().upstream.session_id, "u2");
    assert!(again.binding("other").is_none());

    // Closed on B: A's copy is dropped at its next lookup, its bindings handed back.
    assert!(b.close(&s.id, "intruder").await.unwrap().is_empty());
    let closed = b.close(&s.id, "o").await.unwrap();
    assert_eq!(closed.len(), 1);
    assert_eq!(b.table().len(), 0);
    let gone = a.get(&s.id, "o").await.unwrap();
    assert!(gone.session.is_none());
    assert_eq!(gone.stale.len(), 1);
    assert_eq!(a.table().len(), 0);
    // Shutdown leaves the shared sessions to the other replicas.
    let s = a.open(new("o"), 10, None).await.unwrap();
    s.bind("echo", binding(&reg, "u5"));
    assert!(a.take_all().is_empty());
    assert!(b.get(&s.id, "o").await.unwrap().session.is_some());
}

#[tokio::test]
async fn the_first_binding_published_wins() {
    let (a, b, reg) = replicas();
    let s = a.open(new("o"), 10, None).await.unwrap();
    let copy = b.get(&s.id, "o").await.unwrap().session.unwrap();
    assert!(a
        .share_first_binding(&s, "echo", &binding(&reg, "ua"))
        .await
        .is_none());
    let winner = b
        .share_first_binding(&copy, "echo", &binding(&reg, "ub"))
        .await
        .unwrap();
    assert_eq!(winner.upstream.session_id, "ua");
    // Publishing the winner again is not a conflict.
    assert!(b
        .share_first_binding(&copy, "echo", &winner)
        .await
        .is_none());
}

#[tokio::test]
async fn an_expired_copy_keeps_its_bindings_while_the_session_lives_elsewhere() {
    let (redis, _) = crate::state::redis::testing::redis();
    let reg = registry();
    let a = RedisSessions::new(redis.clone(), reg.clone());
    let b = RedisSessions::new(redis, reg.clone());
    let s = b.open(new("o"), 10, None).await.unwrap();
    // A's copy idles out (1 ms) while the session lives on in Redis (60 s).
    let expire_copy = || async {
        let mut short = new("o");
        short.ttl = Duration::ZERO;
        let copy = a.table().adopt(&s.id, short);
        copy.bind("echo", binding(&reg, "u1"));
        loop {
            let (n, bindings) = a.take_expired().await;
            if n == 1 {
                return bindings;
            }
            tokio::task::yield_now().await;
        }
    };
    assert!(
        expire_copy().await.is_empty(),
        "another replica may still use them"
    );
    b.close(&s.id, "o").await.unwrap();
    assert_eq!(expire_copy().await.len(), 1, "gone everywhere: closed");
}
