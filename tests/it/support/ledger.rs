//! Reading the provenance ledger: through the admin API, or straight from a SQLite file.

pub mod contract;

use super::client::Client;
use ldp_gateway::provenance::LedgerRow;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// `GET /admin/provenance?{query}` on `admin`: the rows and the whole page (expects 200).
pub async fn page(admin: &Client, query: &str) -> (Vec<LedgerRow>, Value) {
    let r = admin.get(&format!("/admin/provenance?{query}")).await;
    assert_eq!(r.status, 200, "{query}: {}", r.text());
    let rows: Vec<LedgerRow> = serde_json::from_value(r.json["rows"].clone()).expect("ledger rows");
    assert_eq!(r.json["count"], rows.len(), "{}", r.json);
    (rows, r.json)
}

/// `task_id → outcome` of every row in the SQLite ledger at `db` (SQLite recovers the WAL a
/// dead process left on this first open).
pub fn sqlite_outcomes(db: &Path) -> BTreeMap<String, String> {
    let conn = rusqlite::Connection::open(db).expect("open the ledger file");
    let mut stmt = conn
        .prepare("SELECT task_id, outcome FROM ledger")
        .expect("query");
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect();
    rows
}

/// `(task_id, outcome)` of every row in the Postgres ledger at `url`.
pub async fn postgres_outcomes(url: &str) -> Vec<(String, String)> {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        c.query("SELECT task_id, outcome FROM ledger", &[])
            .expect("query")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    })
    .await
    .expect("join")
}
