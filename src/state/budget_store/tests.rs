//! The budget stores' tests: the same reservations against a single node's book and against
//! the Redis on this machine; idempotent settles and lapsing holds.
use super::*;
use crate::session::{NewSession, SessionTable};
use crate::state::redis::Redis;
use std::time::Duration;

fn session(table: &SessionTable) -> std::sync::Arc<ClientSession> {
    table.open(NewSession {
        owner: "o".into(),
        tenant: "acme".into(),
        client_domain: "default".into(),
        required_domain: None,
        payload: crate::ldp::NegotiatedPayload::text(),
        policy: None,
        ttl: Duration::from_secs(60),
    })
}

fn daily(limit: f64) -> BudgetConfig {
    BudgetConfig {
        usd_per_day: Some(limit),
        usd_per_month: None,
        usd_per_session: Some(0.8),
    }
}

/// Reserve, exceed, settle, read: what either store must answer.
async fn holds_and_refuses(store: &Budgets) {
    let table = SessionTable::default();
    let (s1, s2) = (session(&table), session(&table));
    let limits = daily(1.0);
    let Reserved::Held(a) = store.reserve("acme", &limits, &s1, 0.5).await.unwrap() else {
        panic!("first reservation refused")
    };
    let Reserved::Exceeded(e) = store.reserve("acme", &limits, &s1, 0.4).await.unwrap() else {
        panic!("session budget not enforced")
    };
    assert_eq!(e.which, "session");
    let Reserved::Held(b) = store.reserve("acme", &limits, &s2, 0.4).await.unwrap() else {
        panic!("second session refused")
    };
    let Reserved::Exceeded(e) = store.reserve("acme", &limits, &s2, 0.2).await.unwrap() else {
        panic!("daily budget not enforced")
    };
    assert_eq!(e.which, "daily");
    assert!((e.reserved - 0.9).abs() < 1e-9, "{e:?}");
    store.settle(a, &s1, 0.25).await;
    store.settle(b, &s2, 0.0).await;
    let (day, _) = store.spent("acme").await.unwrap();
    assert!((day - 0.25).abs() < 1e-9, "{day}");
    assert!(matches!(
        store.reserve("acme", &limits, &s2, 0.7).await.unwrap(),
        Reserved::Held(_)
    ));
}

#[tokio::test]
async fn local_budgets_hold_refuse_and_settle() {
    let store = Budgets::Local(LocalBudgets::default());
    store.seed("acme", 0.0, 0.0).await.unwrap();
    holds_and_refuses(&store).await;
    assert!((store.book().spent("acme").0 - 0.25).abs() < 1e-9);
}

fn redis_budgets() -> (RedisBudgets, Redis) {
    let (redis, _) = crate::state::redis::testing::redis();
    let tasks = tokio_util::task::TaskTracker::new();
    (
        RedisBudgets::new(redis.clone(), Duration::from_secs(60), tasks),
        redis,
    )
}

#[tokio::test]
async fn shared_budgets_ask_to_be_seeded_then_hold_refuse_and_settle() {
    let (r, _) = redis_budgets();
    let store = Budgets::Shared(r);
    let table = SessionTable::default();
    let s = session(&table);
    assert!(matches!(
        store.reserve("acme", &daily(1.0), &s, 0.1).await.unwrap(),
        Reserved::Unseeded
    ));
    store.seed("acme", 0.0, 0.0).await.unwrap();
    // A second seed (another replica, later) does not overwrite.
    store.seed("acme", 5.0, 5.0).await.unwrap();
    assert_eq!(store.spent("acme").await.unwrap(), (0.0, 0.0));
    holds_and_refuses(&store).await;
    assert!(
        store.book().spent("acme") == (0.0, 0.0),
        "no local book in cluster mode"
    );
}

#[tokio::test]
async fn a_shared_settle_counts_once_and_unsettled_holds_lapse() {
    let (r, _) = redis_budgets();
    r.seed("acme", 0.0, 0.0).await.unwrap();
    let limits = daily(1.0);
    let Reserved::Held(h) = r
        .reserve_for(
            "acme",
            "s1",
            Duration::from_secs(60),
            &limits,
            0.5,
            Duration::from_secs(60),
        )
        .await
        .unwrap()
    else {
        panic!("refused")
    };
    r.settle_once(&h, 0.3).await.unwrap();
    r.settle_once(&h, 0.3).await.unwrap();
    assert!((r.spent("acme").await.unwrap().0 - 0.3).abs() < 1e-9);
    // Held for 1 ms and never settled: gone by the next reservation that meets it.
    let Reserved::Held(_lost) = r
        .reserve_for(
            "acme",
            "s2",
            Duration::from_secs(60),
            &limits,
            0.7,
            Duration::from_millis(1),
        )
        .await
        .unwrap()
    else {
        panic!("refused")
    };
    let mut held = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        if let Reserved::Held(_) = r
            .reserve_for(
                "acme",
                "s3",
                Duration::from_secs(60),
                &limits,
                0.7,
                Duration::from_secs(60),
            )
            .await
            .unwrap()
        {
            held = true;
            break;
        }
    }
    assert!(held, "the lapsed hold was never released");
}
