//! Child processes: the real `ldp-gateway` binary (`check`, `serve`, `demo`, `delegate`,
//! `provenance`) and the reference SDK's Python interpreters and scripts.
//!
//! Every child is killed on drop, its stdout is read line by line in the background (so it
//! never blocks on a full pipe) and its stdout and stderr are kept for failure messages.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The real binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_ldp-gateway");
/// The crate root: shipped configs, policies, fixtures, scripts.
pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// How long a one-shot run of the binary may take (generous: a loaded 2-core machine).
const RUN_WITHIN: Duration = Duration::from_secs(60);
/// How long `serve` may take to print its URLs.
const SERVE_WITHIN: Duration = Duration::from_secs(60);

/// A command with this harness's hygiene: stdin closed, killed on drop, quiet logs, and none
/// of the developer's `LDP_GATEWAY_…` overrides or admin token leaking in.
fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    c.current_dir(ROOT)
        .env_remove("LDP_ADMIN_TOKEN")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("LDP_GATEWAY_") {
            c.env_remove(k);
        }
    }
    c
}

/// The real binary, run from the crate root (see [`command`]).
pub fn bin() -> Command {
    command(BIN)
}

/// Runs the binary with `args` and `env` to its end; panics after a minute.
pub async fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = bin();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    output_within(c, RUN_WITHIN).await
}

/// Runs `cmd` to its end with stdout and stderr captured; panics after `within`.
pub async fn output_within(mut cmd: Command, within: Duration) -> Output {
    tokio::time::timeout(within, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{cmd:?} still running after {within:?}"))
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// Runs `cmd` to its end with `input` on its stdin; panics after `within`.
pub async fn output_with_input(mut cmd: Command, input: Vec<u8>, within: Duration) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let mut stdin = child.stdin.take().expect("piped stdin");
    // Written while the output is read, so that neither side waits on a full pipe.
    let writer = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
    });
    let out = tokio::time::timeout(within, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{cmd:?} still running after {within:?}"))
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let _ = writer.await;
    out
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Sends `sig` (`-TERM`, `-HUP`, `-STOP`…) to `pid`, a process this test started.
pub fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(ok.success(), "kill {sig} {pid}");
}

/// A running child: its stdout lines as they come, its stderr kept. Dropped, it is killed
/// and reaped before anything dropped after it (such as the directory its files are in).
pub struct Running {
    child: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

impl Running {
    /// Spawns `cmd` with stdout and stderr piped (stdin as `cmd` says).
    pub fn spawn(mut cmd: Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        let stdout: Arc<Mutex<Vec<String>>> = Arc::default();
        let stderr: Arc<Mutex<String>> = Arc::default();
        let (tx, lines) = mpsc::unbounded_channel();
        let out = child.stdout.take().expect("piped stdout");
        let seen = stdout.clone();
        let read_out = tokio::spawn(async move {
            let mut lines = BufReader::new(out).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                seen.lock().expect("stdout").push(line.clone());
                let _ = tx.send(line);
            }
        });
        let mut err = child.stderr.take().expect("piped stderr");
        let kept = stderr.clone();
        let read_err = tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                kept.lock()
                    .expect("stderr")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Running {
            child,
            lines,
            stdout,
            stderr,
            readers: vec![read_out, read_err],
        }
    }

    /// The next stdout line (from here on) matching `want`, within `within`; panics with
    /// everything the child said if it ends or goes quiet first.
    pub async fn line(&mut self, within: Duration, want: impl Fn(&str) -> bool) -> String {
        let lines = &mut self.lines;
        let found = tokio::time::timeout(within, async {
            while let Some(line) = lines.recv().await {
                if want(&line) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match found {
            Ok(Some(line)) => line,
            Ok(None) => {
                // Let stderr finish before showing it.
                let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
                panic!("the child ended first; it said:\n{}", self.output())
            }
            Err(_) => panic!("not seen within {within:?}; so far:\n{}", self.output()),
        }
    }

    /// Every stdout line so far.
    pub fn stdout(&self) -> Vec<String> {
        self.stdout.lock().expect("stdout").clone()
    }

    /// Stdout so far, then stderr so far.
    pub fn output(&self) -> String {
        format!(
            "{}\n{}",
            self.stdout().join("\n"),
            self.stderr.lock().expect("stderr")
        )
    }

    /// Stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("still running")
    }

    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    pub fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits (at most `within`) for it to exit.
    pub async fn exit_within(&mut self, within: Duration) -> ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running after {within:?}:\n{}", self.output()))
            .expect("wait")
    }

    /// Waits for its pipes to close after it exited, then returns stdout and stderr.
    async fn finish(&mut self) -> String {
        for r in std::mem::take(&mut self.readers) {
            let _ = tokio::time::timeout(Duration::from_secs(10), r).await;
        }
        format!(
            "{}\n{}",
            self.stdout.lock().expect("stdout").join("\n"),
            self.stderr.lock().expect("stderr")
        )
    }

    /// SIGKILL (no handler, no drain); how it ended and all it said.
    pub async fn kill(mut self) -> (ExitStatus, String) {
        self.child.start_kill().expect("kill");
        let status = self.child.wait().await.expect("wait");
        (status, self.finish().await)
    }

    /// SIGTERM, then SIGKILL if it has not exited within 30 s; all it said.
    pub async fn stop(mut self) -> String {
        if let Some(pid) = self.child.id() {
            signal(pid, "-TERM");
        }
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        self.finish().await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.start_kill();
            // Reaped within moments of SIGKILL; bounded so a drop never hangs.
            for _ in 0..500 {
                if !matches!(self.child.try_wait(), Ok(None)) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// `ldp-gateway serve --config FILE`, to be started.
pub struct Serve {
    cmd: Command,
}

impl Serve {
    pub fn new(config: &Path) -> Serve {
        let mut cmd = bin();
        cmd.args(["serve", "--config"]).arg(config);
        Serve { cmd }
    }

    /// The same, its files limited to `kib` KiB (soft `ulimit -f`, SIGXFSZ ignored so a
    /// write past the limit fails with EFBIG as on a full disk instead of killing it).
    pub fn with_file_limit(config: &Path, kib: u64) -> Serve {
        // bash counts `ulimit -f` in KiB (512-byte blocks only in POSIX mode).
        let mut cmd = command("bash");
        cmd.arg("-c")
            .arg(r#"trap "" XFSZ; ulimit -S -f "$2" && exec "$0" serve --config "$1""#)
            .arg(BIN)
            .arg(config)
            .arg(kib.to_string());
        Serve { cmd }
    }

    /// An environment variable of this process only.
    pub fn env(mut self, key: &str, value: &str) -> Serve {
        self.cmd.env(key, value);
        self
    }

    /// `RUST_LOG` (default `warn`).
    pub fn log(self, filter: &str) -> Serve {
        self.env("RUST_LOG", filter)
    }

    /// Starts it without waiting for its listeners.
    pub fn spawn(self) -> Running {
        Running::spawn(self.cmd)
    }

    /// Starts it and waits until it printed both URLs (its readiness signal).
    pub async fn start(self) -> Served {
        Served::ready(self.spawn()).await
    }
}

/// A `serve` child that printed its URLs.
pub struct Served {
    pub process: Running,
    /// Base URL of the LDP listener.
    pub ldp: String,
    /// Base URL of the admin listener.
    pub admin: String,
    /// Its config and ledger, when the harness made them (removed after the child).
    pub(super) dir: Option<tempfile::TempDir>,
}

impl Served {
    /// Waits for `LDP endpoint: URL` and `admin: URL` on its stdout.
    pub async fn ready(mut process: Running) -> Served {
        let deadline = tokio::time::Instant::now() + SERVE_WITHIN;
        let (mut ldp, mut admin) = (None, None);
        while ldp.is_none() || admin.is_none() {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = process
                .line(left, |l| {
                    l.starts_with("LDP endpoint:") || l.starts_with("admin:")
                })
                .await;
            let (name, url) = line.split_once(':').expect("a URL line");
            let url = Some(url.trim().to_owned());
            if name == "admin" {
                admin = url;
            } else {
                ldp = url;
            }
        }
        Served {
            ldp: ldp.expect("LDP URL"),
            admin: admin.expect("admin URL"),
            process,
            dir: None,
        }
    }

    /// An LDP client of this gateway.
    pub fn client(&self) -> super::Client {
        super::Client::new(&self.ldp)
    }

    /// A client of its admin listener.
    pub fn admin(&self) -> super::Client {
        super::Client::new(&self.admin)
    }

    /// SIGKILL: how it ended and all it said.
    pub async fn kill(self) -> (ExitStatus, String) {
        self.process.kill().await
    }

    /// SIGTERM (as from a service manager): all it said.
    pub async fn stop(self) -> String {
        self.process.stop().await
    }
}

// ---- the reference SDK's Python ----

/// The two forms of the reference Python SDK the interop tests use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sdk {
    /// PyPI `ldp-protocol==0.2.0`.
    Wheel,
    /// `sdk/python` from the `ldp-protocol` crate's source.
    Bundled,
}

impl Sdk {
    pub const BOTH: [Sdk; 2] = [Sdk::Bundled, Sdk::Wheel];

    /// The variable `.ci/run venvs` exports for its interpreter.
    pub fn var(self) -> &'static str {
        match self {
            Sdk::Wheel => "LDP_PY_WHEEL",
            Sdk::Bundled => "LDP_PY_SDK",
        }
    }

    fn venv(self) -> &'static str {
        match self {
            Sdk::Wheel => "venv-wheel",
            Sdk::Bundled => "venv-sdk",
        }
    }

    /// What the scripts report as `sdk`.
    pub fn label(self) -> &'static str {
        match self {
            Sdk::Wheel => "wheel",
            Sdk::Bundled => "bundled",
        }
    }
}

/// The interpreter of `sdk`'s venv: `$LDP_PY_WHEEL` / `$LDP_PY_SDK`, else the venv
/// `.ci/run venvs` builds (under `$LDP_CI_CACHE`, default `~/.cache/ldp-gateway-ci`) if it
/// exists. Neither: `None` after a note that `what` is skipped, or a failure when
/// `LDP_INTEROP_REQUIRED=1` (CI).
pub fn python(sdk: Sdk, what: &str) -> Option<PathBuf> {
    let var = sdk.var();
    if let Some(p) = std::env::var_os(var).filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "{var}={} does not exist; rebuild the venvs with `bash .ci/run venvs`",
            p.display()
        );
        return Some(p);
    }
    let cache = std::env::var_os("LDP_CI_CACHE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/ldp-gateway-ci")));
    if let Some(p) = cache.map(|c| c.join(sdk.venv()).join("bin/python")) {
        if p.exists() {
            return Some(p);
        }
    }
    let required = std::env::var("LDP_INTEROP_REQUIRED").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "{var} is not set and no {} venv exists, but LDP_INTEROP_REQUIRED=1: build them with \
         `eval \"$(bash .ci/run venvs)\"`",
        sdk.venv()
    );
    eprintln!(
        "skipping {what} ({}): {var} is not set and no {} venv exists; \
         `eval \"$(bash .ci/run venvs)\"` enables it",
        sdk.label(),
        sdk.venv()
    );
    None
}

/// Every SDK form whose interpreter is available (see [`python`]).
pub fn pythons(what: &str) -> Vec<(Sdk, PathBuf)> {
    Sdk::BOTH
        .into_iter()
        .filter_map(|sdk| python(sdk, what).map(|p| (sdk, p)))
        .collect()
}

/// `python tests/interop/<name>`.
pub fn py_script(python: &Path, name: &str) -> Command {
    let mut c = command(python);
    c.arg(Path::new(ROOT).join("tests/interop").join(name))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    c
}

/// `python -c <code>`.
pub fn py_code(python: &Path, code: &str) -> Command {
    let mut c = command(python);
    c.args(["-c", code]).env("PYTHONDONTWRITEBYTECODE", "1");
    c
}
