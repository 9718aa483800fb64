//! The console (`/ui/` on the admin listener) against a real gateway process with simulated
//! delegates and an admin token: the login flow and its cookie, CSRF on every POST, the CSP on
//! every answer, each page against what the admin API says, the ledger's filters, a task's
//! page, and a card named like an HTML tag shown as text. Then the same in a real browser
//! (headless Chromium driven by Selenium, `tests/interop/console_browser.py`), which skips
//! with a note when `LDP_PY_SELENIUM` is unset, unless `LDP_INTEROP_REQUIRED=1` (CI).

use crate::support::process::{py_script, Served, ROOT};
use crate::support::{card, eventually_async, sim, unique, Client, TestGateway};
use ldp_gateway::sim::{SimHandle, SimOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The name and description of a card that tries to run script in the console.
const XSS: &str = "<img src=x onerror=alert(1)>";
/// The CSP every console answer carries.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'";
/// The environment variable holding the admin token.
const TOKEN_VAR: &str = "LDP_TEST_CONSOLE_TOKEN";

/// A gateway process with two delegates (`d0`, `d1` with the XSS card), an admin token, and
/// tasks in its ledger through two ways in (LDP and OpenAI).
struct Setup {
    bin: Served,
    sims: Vec<SimHandle>,
    token: String,
    /// The task ids sent through LDP.
    ldp_tasks: Vec<String>,
}

async fn setup() -> Setup {
    let plain = sim(SimOptions::new(card(
        "console-plain",
        "default",
        &[("summarize", 0.9)],
        &["text"],
    )))
    .await;
    let mut evil = card("console-evil", "default", &[("summarize", 0.8)], &["text"]);
    evil.name = XSS.into();
    evil.description = Some(XSS.into());
    let evil = sim(SimOptions::new(evil)).await;
    let token = unique("console-admin");
    let bin = TestGateway::builder()
        .delegate(&plain.url())
        .delegate(&evil.url())
        .config(|c| c.admin.token_env = TOKEN_VAR.into())
        .env(TOKEN_VAR, &token)
        .spawn_process()
        .await;
    let ldp = bin.client();
    let sid = ldp.accepted(json!({})).await;
    let mut ldp_tasks = Vec::new();
    for i in 0..3 {
        let t = ldp
            .task(
                &sid,
                "summarize",
                json!({"text": format!("hello {i}")}),
                "text",
            )
            .await;
        assert_eq!(t["type"], "TASK_RESULT", "{t}");
        ldp_tasks.push(t["task_id"].as_str().unwrap().to_owned());
    }
    let chat = ldp
        .post_json(
            "/v1/chat/completions",
            &json!({"model": "summarize", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(chat.status, 200, "{}", chat.json);
    Setup {
        bin,
        sims: vec![plain, evil],
        token,
        ldp_tasks,
    }
}

impl Setup {
    async fn stop(self) {
        self.bin.stop().await;
        for s in self.sims {
            s.shutdown().await;
        }
    }

    /// The admin API with the token.
    fn admin(&self) -> Client {
        self.bin.admin().with_key(Some(&self.token))
    }

    /// Ledger rows through the admin API, once all are readable.
    async fn rows(&self, query: &str, n: usize) -> Vec<Value> {
        let admin = self.admin();
        let read = || async {
            let r = admin.get(&format!("/admin/provenance?{query}")).await;
            assert_eq!(r.status, 200, "{}", r.json);
            r.json["rows"].as_array().cloned().unwrap_or_default()
        };
        let found =
            eventually_async(Duration::from_secs(5), || async { read().await.len() >= n }).await;
        assert!(found, "fewer than {n} rows for {query}");
        read().await
    }
}

/// A browser-like client of the console: no redirects followed, its cookies kept by hand.
struct Browser {
    http: reqwest::Client,
    base: String,
    cookies: Vec<(String, String)>,
}

/// One answer.
struct Page {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Page {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    }

    /// The value of the hidden `csrf` field.
    fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field");
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl Browser {
    fn new(base: &str) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: base.trim_end_matches('/').to_owned(),
            cookies: Vec::new(),
        }
    }

    fn keep(&mut self, p: &Page) {
        for c in p.set_cookies() {
            let pair = c.split(';').next().unwrap_or("");
            if let Some((k, v)) = pair.split_once('=') {
                self.cookies.retain(|(n, _)| n != k);
                if !v.is_empty() {
                    self.cookies.push((k.to_owned(), v.to_owned()));
                }
            }
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn read(&mut self, r: reqwest::RequestBuilder) -> Page {
        let r = r
            .header("cookie", self.cookie_header())
            .send()
            .await
            .unwrap();
        let page = Page {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: r.text().await.unwrap(),
        };
        self.keep(&page);
        page
    }

    async fn get(&mut self, path: &str) -> Page {
        let r = self.http.get(format!("{}{path}", self.base));
        self.read(r).await
    }

    async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let body = form
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.read(r).await
    }

    /// Logs in through the form.
    async fn login(&mut self, token: &str) -> Page {
        let form = self.get("/ui/login").await;
        assert_eq!(form.status, 200, "{}", form.body);
        let csrf = form.csrf();
        self.post("/ui/login", &[("token", token), ("csrf", &csrf)])
            .await
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Login, cookie flags, CSRF, CSP, every page against the admin API, the ledger's filters, a
/// task's page, and the XSS card escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_login_pages_csrf_csp_and_escaping() {
    let s = setup().await;
    let mut b = Browser::new(&s.bin.admin);

    // Not logged in: every page sends to the login form; a POST is refused.
    for path in [
        "/ui/",
        "/ui/fleet",
        "/ui/ledger",
        "/ui/spend",
        "/ui/policies",
    ] {
        let p = b.get(path).await;
        assert_eq!(p.status, 303, "{path}");
        assert_eq!(p.header("location"), "/ui/login", "{path}");
        assert_eq!(p.header("content-security-policy"), CSP, "{path}");
    }
    assert_eq!(b.post("/ui/logout", &[("csrf", "x")]).await.status, 403);

    // A wrong token: 401 and the form again, no session cookie.
    let wrong = b.login("not-the-token").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("Wrong token"), "{}", wrong.body);
    assert!(!wrong
        .set_cookies()
        .iter()
        .any(|c| c.starts_with("ldp_console=")));
    // The login form's CSRF token is checked: without it, refused even with the right token.
    let no_csrf = b
        .post("/ui/login", &[("token", &s.token), ("csrf", "forged")])
        .await;
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.body);
    assert!(!no_csrf
        .set_cookies()
        .iter()
        .any(|c| c.starts_with("ldp_console=")));

    // The right token: a session cookie, HttpOnly and SameSite=Strict, and no token anywhere
    // in a URL.
    let ok = b.login(&s.token).await;
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert_eq!(ok.header("location"), "/ui/fleet");
    assert!(!ok.header("location").contains(&s.token));
    let session = ok
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("ldp_console="))
        .expect("a session cookie");
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(session.contains(flag), "{flag}: {session}");
    }
    assert!(!session.contains(&s.token));

    // Fleet: every delegate of the admin API, with its kind and health; the XSS card as text.
    let admin = s.admin();
    let delegates = admin.get("/admin/delegates").await.json;
    let fleet = b.get("/ui/fleet").await;
    assert_eq!(fleet.status, 200);
    assert_eq!(fleet.header("content-security-policy"), CSP);
    for d in delegates["delegates"].as_array().unwrap() {
        let name = d["name"].as_str().unwrap();
        assert!(fleet.body.contains(&format!(">{name}</a>")), "{name}");
        assert_eq!(d["health"], "healthy");
    }
    assert!(fleet.body.contains("healthy") && fleet.body.contains(">ldp<"));
    assert!(
        !fleet.body.contains(XSS),
        "the card's name must not be HTML"
    );
    assert!(fleet.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(!fleet.body.contains("<script"), "no script on any page");
    let index = b.get("/ui/").await;
    assert_eq!(index.status, 200);
    let one = b.get("/ui/fleet/d1").await;
    assert_eq!(one.status, 200);
    assert!(one.body.contains("console-evil"), "its card as JSON");
    assert!(!one.body.contains(XSS));
    assert!(one.body.contains("&lt;img src=x onerror=alert(1)&gt;"));

    // Explain: the same pick and band as the admin API's explanation.
    let x = admin.get("/admin/route?skill=summarize").await.json;
    let route = b.get("/ui/route?skill=summarize").await;
    assert_eq!(route.status, 200);
    assert!(route.body.contains(&format!(
        "policy <strong>{}</strong>",
        x["policy"].as_str().unwrap()
    )));
    for row in x["delegates"].as_array().unwrap() {
        let first = row["constraints"][0]["detail"].as_str().unwrap();
        assert!(route.body.contains(first), "{first}");
    }
    assert!(route.body.contains("in band"));

    // Ledger: the rows of the admin API; the ingress filter.
    let rows = s.rows("limit=50", 4).await;
    let ledger = b.get("/ui/ledger").await;
    assert_eq!(ledger.status, 200);
    for r in &rows {
        assert!(ledger.body.contains(r["task_id"].as_str().unwrap()));
    }
    let openai_rows = s.rows("ingress=openai", 1).await;
    let openai_id = openai_rows[0]["task_id"].as_str().unwrap();
    let only_openai = b.get("/ui/ledger?ingress=openai").await;
    assert_eq!(only_openai.status, 200);
    assert!(only_openai.body.contains(openai_id));
    for t in &s.ldp_tasks {
        assert!(
            !only_openai.body.contains(t.as_str()),
            "an LDP task under ingress=openai"
        );
    }
    let only_ldp = b
        .get("/ui/ledger?ingress=ldp&status=result&skill=summarize")
        .await;
    for t in &s.ldp_tasks {
        assert!(only_ldp.body.contains(t.as_str()));
    }
    assert!(!only_ldp.body.contains(openai_id));
    assert!(!b
        .get("/ui/ledger?status=failed")
        .await
        .body
        .contains(openai_id));
    assert_eq!(b.get("/ui/ledger?ingress=smtp").await.status, 400);
    assert_eq!(b.get("/ui/ledger?offset=many").await.status, 400);

    // A task: its delegate and cost, as the ledger has them.
    let task = &s.ldp_tasks[0];
    let row = &s.rows(&format!("task_id={task}"), 1).await[0];
    let page = b.get(&format!("/ui/ledger/{task}")).await;
    assert_eq!(page.status, 200);
    let delegate = row["delegate"].as_str().unwrap();
    assert!(
        page.body.contains(&format!(">{delegate}</a>")),
        "{}",
        page.body
    );
    if let Some(cost) = row["cost_usd"].as_f64() {
        assert!(page.body.contains(&format!("${cost:.6}")), "cost {cost}");
    }
    assert!(page.body.contains(row["session_id"].as_str().unwrap()));
    assert_eq!(b.get("/ui/ledger/no-such-task").await.status, 404);

    // Spend and policies.
    let spend = b.get("/ui/spend").await;
    assert_eq!(spend.status, 200);
    assert!(spend.body.contains("<svg") && spend.body.contains("anonymous"));
    // Per tenant, policy and delegate: every task of the ledger counted in the last hour.
    let all = s.rows("limit=50", 4).await;
    let tasks = format!("<td>anonymous</td><td class=\"num\">{}</td>", all.len());
    assert!(spend.body.contains(&tasks), "{tasks}");
    for h in ["per tenant", "per policy", "per delegate"] {
        assert!(spend.body.contains(h), "{h}");
    }
    for r in &all {
        for col in ["policy", "delegate"] {
            let v = r[col].as_str().unwrap();
            assert!(spend.body.contains(&format!("<td>{v}</td>")), "{col} {v}");
        }
    }
    let policies = admin.get("/admin/policies").await.json;
    let page = b.get("/ui/policies").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("No reload since start"));
    let reload = admin.post_with("/admin/reload", Vec::new(), &[]).await;
    assert_eq!(reload.status, 200, "{}", reload.json);
    let page = b.get("/ui/policies").await;
    let applied = format!("applied</span> ({} policies)", reload.json["policies"]);
    assert!(page.body.contains(&applied), "{applied}");
    for p in policies["policies"].as_array().unwrap() {
        assert!(page
            .body
            .contains(&format!("<h2>{}", p["name"].as_str().unwrap())));
    }

    // Any other path under /ui/: a 404 page, under the same CSP.
    let missing = b.get("/ui/nothing/here").await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("content-security-policy"), CSP);

    // The stylesheet comes from the binary, under the same CSP.
    let css = b.get("/ui/static/console.css").await;
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").starts_with("text/css"));
    assert_eq!(css.header("content-security-policy"), CSP);

    // Logout needs the session's CSRF token; after it the pages send to login again.
    let forged = b.post("/ui/logout", &[("csrf", "forged")]).await;
    assert_eq!(forged.status, 403);
    assert_eq!(b.get("/ui/fleet").await.status, 200, "still logged in");
    let csrf = b.get("/ui/fleet").await.csrf();
    let out = b.post("/ui/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(b.get("/ui/fleet").await.status, 303, "logged out");

    // A 50-row ledger page answers quickly (a figure for the report, not an assertion).
    let t = std::time::Instant::now();
    let mut again = Browser::new(&s.bin.admin);
    again.login(&s.token).await;
    let _ = again.get("/ui/ledger").await;
    eprintln!("login + /ui/ledger: {:?}", t.elapsed());
    s.stop().await;
}

/// With no admin token set, the console does what the admin API does: open on a loopback
/// listener, no login needed (and the login page sends to the fleet).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_without_a_token_is_open_on_loopback_only() {
    let s = sim(SimOptions::new(card(
        "console-open",
        "default",
        &[("summarize", 0.9)],
        &["text"],
    )))
    .await;
    let gw = TestGateway::builder().delegate(&s.url()).spawn().await;
    let mut b = Browser::new(&gw.admin_url());
    let fleet = b.get("/ui/fleet").await;
    assert_eq!(fleet.status, 200);
    assert!(fleet.body.contains("open (loopback, no token)"));
    assert!(fleet.body.contains(">d0</a>"));
    assert_eq!(fleet.header("content-security-policy"), CSP);
    let login = b.get("/ui/login").await;
    assert_eq!((login.status, login.header("location")), (303, "/ui/fleet"));
    gw.shutdown().await;
    s.shutdown().await;
}

/// `LDP_PY_SELENIUM`, or `None` (the browser test skips) unless `LDP_INTEROP_REQUIRED=1`.
fn selenium() -> Option<PathBuf> {
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    match std::env::var_os("LDP_PY_SELENIUM").filter(|v| !v.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => {
            assert!(
                !required,
                "LDP_PY_SELENIUM is not set but LDP_INTEROP_REQUIRED=1: `eval \"$(bash .ci/run venvs)\"`"
            );
            eprintln!("skipping the console browser test: LDP_PY_SELENIUM is not set");
            None
        }
    }
}

/// The whole console in headless Chromium: login through the form, every page checked
/// against values from the admin API, the ledger filtered, a task opened, the XSS card as
/// text with no alert, HttpOnly cookies, no request leaving the origin, a screenshot of each
/// page.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_in_a_real_browser() {
    let Some(python) = selenium() else { return };
    let s = setup().await;
    let admin = s.admin();
    let rows = s.rows("limit=50", 4).await;
    let openai = s.rows("ingress=openai", 1).await;
    let task = &s.ldp_tasks[0];
    let row = s.rows(&format!("task_id={task}"), 1).await[0].clone();
    let x = admin.get("/admin/route?skill=summarize").await.json;
    let policies = admin.get("/admin/policies").await.json;
    let expect = json!({
        "delegates": ["d0", "d1"],
        "xss": XSS,
        "task_id": task,
        "task_delegate": row["delegate"],
        "ldp_tasks": s.ldp_tasks,
        "openai_task": openai[0]["task_id"],
        "ledger_rows": rows.iter().map(|r| r["task_id"].clone()).collect::<Vec<_>>(),
        "policy": x["policy"],
        "policies": policies["policies"].as_array().unwrap().iter().map(|p| p["name"].clone()).collect::<Vec<_>>(),
    });
    let shots = Path::new(ROOT).join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let chromium = std::env::var("LDP_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let driver =
        std::env::var("LDP_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    let out = py_script(&python, "console_browser.py")
        .arg("--url")
        .arg(&s.bin.admin)
        .arg("--token")
        .arg(&s.token)
        .arg("--expect")
        .arg(expect.to_string())
        .arg("--screenshots")
        .arg(&shots)
        .arg("--chromium")
        .arg(&chromium)
        .arg("--chromedriver")
        .arg(&driver)
        .output()
        .await
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");
    assert!(out.status.success(), "the browser test failed:\n{said}");
    assert!(said.contains("console browser test: ok"), "{said}");
    for page in [
        "fleet", "route", "ledger", "task", "spend", "policies", "login",
    ] {
        assert!(shots.join(format!("{page}.png")).is_file(), "{page}.png");
    }
    s.stop().await;
}
