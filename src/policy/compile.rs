//! Compiling parsed policy files into a [`super::PolicySet`], collecting every problem.
//!
//! Phase two of two: each file is parsed ([`super::parse`]), then every value is checked
//! (ranges, glob syntax, payload modes, names) and the set as a whole (unique names, the
//! default exists). Nothing stops at the first problem: a directory with three bad files
//! reports all of their problems, each as `file:line: key: reason`.
//!
//! Only regular files named `*.toml` (not starting with `.`) are read, in byte order of
//! their file names. That order is the set's order, and so the order in which `[match]`
//! sections are tried: name files `10-….toml`, `20-….toml` to control precedence.

use super::parse::{self, At, RawPolicy};
use super::{
    Glob, Limits, Match, Policy, PolicyName, PolicyProblem, PolicySet, Require, Verify, Weights,
};
use crate::ldp::PayloadMode;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Default `[balance] tolerance`.
const DEFAULT_TOLERANCE: f64 = 0.05;
/// Default `[fallback] max_attempts`.
const DEFAULT_MAX_ATTEMPTS: u32 = 3;
/// Upper bound of `[fallback] max_attempts`.
const MAX_ATTEMPTS: i64 = 10;
/// Upper bound of `[verify] verifiers`.
const MAX_VERIFIERS: i64 = 10;
/// Upper bound of `[verify] max_rounds`.
const MAX_ROUNDS: i64 = 10;
/// Upper bound of `[verify.calibration] items`.
const MAX_CALIBRATION_ITEMS: i64 = 100;
/// Shortest `[verify.calibration] every`.
const MIN_CALIBRATION_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Parses and compiles one policy file's text; `path` is only used in problems and as the
/// policy's `source`. Every problem in the text is returned, sorted by line.
pub fn parse_str(path: &str, text: &str) -> Result<Policy, Vec<PolicyProblem>> {
    let (policy, mut problems) = compile_file(path, text);
    problems.sort_by_key(|p| p.line);
    match policy {
        Some(p) if problems.is_empty() => Ok(p),
        _ => Err(problems),
    }
}

/// Loads and compiles every `*.toml` in `dir`; `default` must name one of them.
///
/// Files are read in file-name order, which is the order of [`PolicySet::policies`] and of
/// `[match]` precedence. All problems of all files are returned together: per file in line
/// order, files in name order, set-level problems (keyed `policies.dir` and
/// `policies.default`, file = the directory, line 0) last.
pub fn load_dir(dir: &Path, default: &str) -> Result<PolicySet, Vec<PolicyProblem>> {
    let dir_name = dir.display().to_string();
    let set_problem = |key: &str, reason: String| PolicyProblem {
        file: dir_name.clone(),
        line: 0,
        key: key.to_string(),
        reason,
    };
    let files = match policy_files(dir) {
        Ok(files) => files,
        Err(e) => return Err(vec![set_problem("policies.dir", e.to_string())]),
    };
    if files.is_empty() {
        return Err(vec![set_problem(
            "policies.dir",
            "no *.toml policy files in this directory".into(),
        )]);
    }

    let mut problems = Vec::new();
    let mut policies = Vec::new();
    // Policy names in file order, and the first file defining each.
    let mut names: Vec<String> = Vec::new();
    let mut first_by_name: HashMap<String, String> = HashMap::new();
    // Whether some file could not be read far enough to know its name (the default may be
    // that file: then "does not exist" would be wrong).
    let mut unnamed = false;
    for path in files {
        let file = path.display().to_string();
        let mut file_problems = Vec::new();
        match read_text(&path, &file) {
            Err(p) => {
                unnamed = true;
                file_problems.push(p);
            }
            Ok(text) => {
                let (raw, mut found) = parse::parse(&file, &text);
                unnamed |= !raw.complete && raw.name.is_none();
                if let Some(name) = &raw.name {
                    match first_by_name.get(&name.value) {
                        Some(first) => found.push(PolicyProblem {
                            file: file.clone(),
                            line: name.line,
                            key: "name".into(),
                            reason: format!(
                                "duplicate policy name '{}' (first defined in {first})",
                                name.value
                            ),
                        }),
                        None => {
                            first_by_name.insert(name.value.clone(), file.clone());
                            names.push(name.value.clone());
                        }
                    }
                }
                let policy = compile_raw(&file, raw, &mut found);
                if found.is_empty() {
                    if let Some(p) = policy {
                        policies.push(Arc::new(p));
                    }
                }
                file_problems.append(&mut found);
            }
        }
        file_problems.sort_by_key(|p| p.line);
        problems.append(&mut file_problems);
    }

    if !first_by_name.contains_key(default) && !unnamed {
        let mut reason = format!("default policy '{default}' does not exist");
        if !names.is_empty() {
            reason.push_str(&format!(" (policies: {})", names.join(", ")));
        }
        problems.push(set_problem("policies.default", reason));
    }

    if problems.is_empty() {
        Ok(PolicySet {
            policies,
            default: PolicyName(default.to_string()),
        })
    } else {
        Err(problems)
    }
}

/// Why the policy directory cannot be listed.
#[derive(Debug, thiserror::Error)]
enum DirError {
    #[error("directory does not exist")]
    Missing,
    #[error("cannot read directory: {0}")]
    Unreadable(std::io::Error),
}

/// The policy files in `dir`, sorted by file name, or why the directory cannot be read.
fn policy_files(dir: &Path) -> Result<Vec<PathBuf>, DirError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(DirError::Missing),
        Err(e) => return Err(DirError::Unreadable(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(DirError::Unreadable)?;
        let name = entry.file_name();
        let path = entry.path();
        let is_toml = path.extension().is_some_and(|e| e == "toml");
        let hidden = name.to_string_lossy().starts_with('.');
        if is_toml && !hidden && path.is_file() {
            files.push((name, path));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// The file's text, or a problem (unreadable, or not UTF-8: with the line of the first bad
/// byte).
fn read_text(path: &Path, file: &str) -> Result<String, PolicyProblem> {
    let problem = |line: usize, reason: String| PolicyProblem {
        file: file.to_string(),
        line,
        key: "file".into(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|e| problem(0, format!("cannot read: {e}")))?;
    String::from_utf8(bytes).map_err(|e| {
        let line = parse::line_of(e.as_bytes(), e.utf8_error().valid_up_to());
        problem(line, "not valid UTF-8".into())
    })
}

/// Parses and compiles one file; the policy is only meaningful when no problem was found.
fn compile_file(file: &str, text: &str) -> (Option<Policy>, Vec<PolicyProblem>) {
    let (raw, mut problems) = parse::parse(file, text);
    let policy = compile_raw(file, raw, &mut problems);
    (policy, problems)
}

/// Checks every value of a parsed file, appending problems. `None` when the file did not
/// parse (its syntax errors are already in `problems`).
fn compile_raw(file: &str, raw: RawPolicy, problems: &mut Vec<PolicyProblem>) -> Option<Policy> {
    if !raw.complete {
        return None;
    }
    let mut c = Checker { file, problems };

    let name = match raw.name {
        None => {
            c.problem(0, "name", "missing (every policy needs a name)".into());
            String::new()
        }
        Some(n) => {
            let ok = !n.value.is_empty()
                && n.value
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !ok {
                c.problem(
                    n.line,
                    "name",
                    format!(
                        "must be one or more of A-Z a-z 0-9 . _ -, got {}",
                        quote(&n.value)
                    ),
                );
            }
            n.value
        }
    };

    let matcher = raw.matcher.map(|m| {
        let skills = c.name_globs("match.skills", m.value.skills);
        let tenants = c.names("match.tenants", "tenant name", m.value.tenants);
        if m.value.written == 0 {
            c.problem(
                m.line,
                "match",
                "matches every request; list skills or tenants, or remove [match] \
                 (the default policy already applies when nothing matches)"
                    .into(),
            );
        }
        Match { skills, tenants }
    });

    let r = raw.require;
    let require = Require {
        jurisdictions: c.jurisdictions("require.jurisdictions", r.jurisdictions),
        deny_jurisdictions: c.jurisdictions("require.deny_jurisdictions", r.deny_jurisdictions),
        trust_domains: c.names("require.trust_domains", "trust domain", r.trust_domains),
        min_quality: r.min_quality.and_then(|q| {
            let key = "require.min_quality";
            let q = c.finite(key, q)?;
            let ok = (0.0..=1.0).contains(&q.value);
            c.check(key, q, ok, "must be between 0 and 1")
        }),
        max_cost_usd: r
            .max_cost_usd
            .and_then(|x| c.non_negative("require.max_cost_usd", x)),
        max_latency_ms: r.max_latency_ms.and_then(|x| {
            let ok = x.value > 0;
            c.check("require.max_latency_ms", x, ok, "must be greater than 0")
                .and_then(|x| u64::try_from(x).ok())
        }),
        payload_modes: c.payload_modes("require.payload_modes", r.payload_modes),
        min_context_window: r.min_context_window.and_then(|x| {
            let ok = x.value >= 0;
            c.check("require.min_context_window", x, ok, "must not be negative")
                .and_then(|x| u64::try_from(x).ok())
        }),
        model_families: c.name_globs("require.model_families", r.model_families),
        deny_model_families: c.name_globs("require.deny_model_families", r.deny_model_families),
    };

    let weights = match raw.weights {
        None => Weights::default(),
        Some(w) => {
            let d = Weights::default();
            let mut one = |key: &str, x: Option<At<f64>>, default: f64| match x {
                None => Some(default),
                Some(x) => c.non_negative(key, x),
            };
            let quality = one("weights.quality", w.value.quality, d.quality);
            let cost = one("weights.cost", w.value.cost, d.cost);
            let latency = one("weights.latency", w.value.latency, d.latency);
            match (quality, cost, latency) {
                (Some(quality), Some(cost), Some(latency)) => {
                    let sum = quality + cost + latency;
                    if sum <= 0.0 {
                        c.problem(
                            w.line,
                            "weights",
                            "weights are all zero (at least one of quality, cost, latency \
                             must be above 0)"
                                .into(),
                        );
                    } else if !sum.is_finite() {
                        // Routing divides by the sum: an infinite one makes every score NaN.
                        c.problem(
                            w.line,
                            "weights",
                            "weights are too large (their sum must be a finite number)".into(),
                        );
                    }
                    Weights {
                        quality,
                        cost,
                        latency,
                    }
                }
                _ => d,
            }
        }
    };

    let tolerance = match raw.tolerance {
        None => DEFAULT_TOLERANCE,
        Some(t) => {
            let key = "balance.tolerance";
            c.finite(key, t)
                .and_then(|t| {
                    let ok = (0.0..1.0).contains(&t.value);
                    c.check(key, t, ok, "must be at least 0 and less than 1")
                })
                .unwrap_or(DEFAULT_TOLERANCE)
        }
    };

    let max_attempts = match raw.max_attempts {
        None => DEFAULT_MAX_ATTEMPTS,
        Some(m) => {
            let ok = (1..=MAX_ATTEMPTS).contains(&m.value);
            c.check("fallback.max_attempts", m, ok, "must be between 1 and 10")
                .and_then(|m| u32::try_from(m).ok())
                .unwrap_or(DEFAULT_MAX_ATTEMPTS)
        }
    };

    let limits = raw.limits.and_then(|l| {
        let rps = match l.value.rps {
            None => {
                c.problem(
                    l.line,
                    "limits.rps",
                    "missing (required in [limits])".into(),
                );
                None
            }
            Some(rps) => c.finite("limits.rps", rps).and_then(|rps| {
                let ok = super::rate_ok(rps.value);
                c.check("limits.rps", rps, ok, super::RATE_RANGE)
            }),
        };
        let burst = match l.value.burst {
            // ceil of a positive finite f64, clamped: the cast saturates, never panics.
            None => rps.map(|r| (r.ceil() as u32).max(1)),
            Some(b) => {
                let checked = if b.value < 1 {
                    c.check("limits.burst", b, false, "must be at least 1")
                } else if b.value > i64::from(u32::MAX) {
                    c.check("limits.burst", b, false, "must be at most 4294967295")
                } else {
                    Some(b.value)
                };
                checked.and_then(|b| u32::try_from(b).ok())
            }
        };
        Some(Limits {
            rps: rps?,
            burst: burst?,
        })
    });

    // Present (even empty) means verification is on; absent keys keep their defaults. A bad
    // value is reported and replaced by its default: the policy fails anyway.
    let verify = raw.verify.map(|v| {
        let d = Verify::default();
        let v = v.value;
        let skill = v
            .skill
            .and_then(|s| c.skill("verify.skill", s))
            .unwrap_or(d.skill);
        let verifiers = v.verifiers.map_or(d.verifiers, |n| {
            let ok = (1..=MAX_VERIFIERS).contains(&n.value);
            c.check("verify.verifiers", n, ok, "must be between 1 and 10")
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(d.verifiers)
        });
        let threshold = v.threshold.map_or(d.threshold, |t| {
            let key = "verify.threshold";
            c.finite(key, t)
                .and_then(|t| {
                    let ok = t.value > 0.0 && t.value <= 1.0;
                    c.check(key, t, ok, "must be above 0 and at most 1")
                })
                .unwrap_or(d.threshold)
        });
        let max_rounds = v.max_rounds.map_or(d.max_rounds, |n| {
            let ok = (1..=MAX_ROUNDS).contains(&n.value);
            c.check("verify.max_rounds", n, ok, "must be between 1 and 10")
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(d.max_rounds)
        });
        // A share in 0..=1 (`sample`, `min_reliability`), else the default.
        let mut share = |key: &'static str, value, default: f64| {
            Option::map_or(value, default, |s| {
                c.finite(key, s)
                    .and_then(|s| {
                        let ok = (0.0..=1.0).contains(&s.value);
                        c.check(key, s, ok, "must be between 0 and 1")
                    })
                    .unwrap_or(default)
            })
        };
        let sample = share("verify.sample", v.sample, d.sample);
        let min_reliability = share(
            "verify.min_reliability",
            v.min_reliability,
            d.min_reliability,
        );
        let calibration = v.calibration.and_then(|cal| calibration(&mut c, file, cal));
        Verify {
            skill,
            verifiers,
            threshold,
            max_rounds,
            sample,
            independent: v.independent.map_or(d.independent, |i| i.value),
            min_reliability,
            calibration,
        }
    });

    Some(Policy {
        name: PolicyName(name),
        description: raw.description.map(|d| d.value).unwrap_or_default(),
        matcher,
        require,
        weights,
        tolerance,
        max_attempts,
        limits,
        verify,
        source: PathBuf::from(file),
    })
}

/// `[verify.calibration]`: `reference` is required (resolved against the policy file's
/// folder; its content is read at each round, not here: compiling reads no other file).
fn calibration(
    c: &mut Checker<'_>,
    file: &str,
    cal: At<parse::RawCalibration>,
) -> Option<super::Calibration> {
    let (line, cal) = (cal.line, cal.value);
    let key = "verify.calibration.every";
    let every = match cal.every {
        None => Some(std::time::Duration::from_secs(600)),
        Some(e) => match humantime::parse_duration(&e.value) {
            Ok(d) if (MIN_CALIBRATION_EVERY..=MAX_EVERY).contains(&d) => Some(d),
            Ok(_) => {
                let why = format!("must be between 1s and 30days, got {}", quote(&e.value));
                c.problem(e.line, key, why);
                None
            }
            Err(err) => {
                let why = format!("not a duration ({err}), got {}", quote(&e.value));
                c.problem(e.line, key, why);
                None
            }
        },
    };
    let items = match cal.items {
        None => Some(10),
        Some(n) => {
            let ok = (1..=MAX_CALIBRATION_ITEMS).contains(&n.value);
            c.check(
                "verify.calibration.items",
                n,
                ok,
                "must be between 1 and 100",
            )
            .and_then(|n| u32::try_from(n).ok())
        }
    };
    let reference = cal.reference.filter(|r| !r.value.trim().is_empty());
    if reference.is_none() {
        let why = "a reference file is required (JSON Lines of {skill, input, output, correct})";
        c.problem(line, "verify.calibration.reference", why.into());
    }
    let (reference, every, items) = (reference?, every?, items?);
    let path = PathBuf::from(&reference.value);
    let reference = if path.is_absolute() {
        path
    } else {
        Path::new(file)
            .parent()
            .map_or_else(|| path.clone(), |dir| dir.join(&path))
    };
    Some(super::Calibration {
        reference,
        every,
        items,
    })
}

/// Longest `[verify.calibration] every`.
const MAX_EVERY: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// `'value'`, with control characters and quotes escaped.
fn quote(s: &str) -> String {
    format!("'{}'", s.escape_debug())
}

/// Collects problems for one file.
struct Checker<'a> {
    file: &'a str,
    problems: &'a mut Vec<PolicyProblem>,
}

impl Checker<'_> {
    fn problem(&mut self, line: usize, key: &str, reason: String) {
        self.problems.push(PolicyProblem {
            file: self.file.to_string(),
            line,
            key: key.to_string(),
            reason,
        });
    }

    /// The number if finite, else a problem.
    fn finite(&mut self, key: &str, x: At<f64>) -> Option<At<f64>> {
        if x.value.is_finite() {
            Some(x)
        } else {
            self.problem(
                x.line,
                key,
                format!("must be a finite number, got {}", x.value),
            );
            None
        }
    }

    /// The value if `ok`, else a problem `reason, got value`.
    fn check<T: std::fmt::Display>(
        &mut self,
        key: &str,
        x: At<T>,
        ok: bool,
        reason: &str,
    ) -> Option<T> {
        if ok {
            Some(x.value)
        } else {
            self.problem(x.line, key, format!("{reason}, got {}", x.value));
            None
        }
    }

    /// A finite number at least 0.
    fn non_negative(&mut self, key: &str, x: At<f64>) -> Option<f64> {
        let x = self.finite(key, x)?;
        let ok = x.value >= 0.0;
        self.check(key, x, ok, "must not be negative")
    }

    /// Reports an empty pattern; true when `s` is not empty.
    fn not_empty_glob(&mut self, key: &str, s: &At<String>) -> bool {
        if s.value.is_empty() {
            self.problem(s.line, key, "empty glob; use '*' to match anything".into());
        }
        !s.value.is_empty()
    }

    /// Jurisdiction globs: lowercase letters, digits, `-` and `*`.
    fn jurisdictions(&mut self, key: &str, list: Vec<At<String>>) -> Vec<Glob> {
        let mut out = Vec::new();
        for j in list {
            if !self.not_empty_glob(key, &j) {
                continue;
            }
            let ok = j
                .value
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'*'));
            if ok {
                out.push(Glob(j.value));
            } else {
                self.problem(
                    j.line,
                    key,
                    format!(
                        "unknown jurisdiction syntax {} (use lowercase letters, digits, '-' and '*')",
                        quote(&j.value)
                    ),
                );
            }
        }
        out
    }

    /// Globs over skill or model-family names: any characters but whitespace and controls;
    /// stored lowercase (matching is case-insensitive).
    fn name_globs(&mut self, key: &str, list: Vec<At<String>>) -> Vec<Glob> {
        let mut out = Vec::new();
        for g in list {
            if !self.not_empty_glob(key, &g) {
                continue;
            }
            if g.value.chars().any(|c| c.is_whitespace() || c.is_control()) {
                self.problem(
                    g.line,
                    key,
                    format!(
                        "invalid glob {} (no spaces or control characters)",
                        quote(&g.value)
                    ),
                );
            } else {
                out.push(Glob(g.value.to_lowercase()));
            }
        }
        out
    }

    /// A skill name (`[verify] skill`): not empty, no whitespace, control characters or `@`;
    /// kept as written.
    fn skill(&mut self, key: &str, s: At<String>) -> Option<String> {
        if s.value.is_empty() {
            self.problem(s.line, key, "empty skill name".into());
            None
        } else if s
            .value
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '@')
        {
            self.problem(
                s.line,
                key,
                format!(
                    "invalid skill name {} (no spaces, control characters or '@')",
                    quote(&s.value)
                ),
            );
            None
        } else {
            Some(s.value)
        }
    }

    /// Exact names (tenants, trust domains): any non-empty string, kept as written.
    fn names(&mut self, key: &str, what: &str, list: Vec<At<String>>) -> Vec<String> {
        let mut out = Vec::new();
        for n in list {
            if n.value.is_empty() {
                self.problem(n.line, key, format!("empty {what}"));
            } else {
                out.push(n.value);
            }
        }
        out
    }

    fn payload_modes(&mut self, key: &str, list: Vec<At<String>>) -> Vec<PayloadMode> {
        let mut out = Vec::new();
        for m in list {
            match PayloadMode::parse(&m.value) {
                Some(mode) => {
                    if !out.contains(&mode) {
                        out.push(mode);
                    }
                }
                None => {
                    let known: Vec<&str> = PayloadMode::ALL.iter().map(|m| m.as_str()).collect();
                    self.problem(
                        m.line,
                        key,
                        format!(
                            "unknown payload mode {} (known: {})",
                            quote(&m.value),
                            known.join(", ")
                        ),
                    );
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
