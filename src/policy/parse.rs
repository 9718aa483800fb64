//! Parsing policy files (TOML) strictly, keeping line numbers.
//!
//! Phase one of two (see `compile.rs`): the text is parsed into a spanned TOML tree
//! and walked by hand into a [`RawPolicy`]. Walking by hand rather than deriving serde
//! structs means one bad key does not hide the next: every syntax error, unknown key and
//! wrong type in the file is collected, each with its 1-based line and dotted key. Values
//! are only type-checked here; ranges, globs and names are checked when compiling.
//!
//! When the file has syntax errors only those are reported (a half-parsed document would
//! produce misleading follow-on problems such as "missing name"), but the name is still
//! read from the recovered document when possible so set-level checks stay accurate.

use super::PolicyProblem;
use std::ops::Range;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// A value with the 1-based line it was written on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct At<T> {
    /// The value.
    pub value: T,
    /// Its line.
    pub line: usize,
}

/// A policy file after phase one: only keys that were present and of the right type.
#[derive(Debug, Default)]
pub(crate) struct RawPolicy {
    /// False when syntax errors stopped the walk: only `name` was read, and the problems
    /// are syntax errors only, so compiling would add misleading ones.
    pub complete: bool,
    pub name: Option<At<String>>,
    pub description: Option<At<String>>,
    /// `[match]`, with the line of its header.
    pub matcher: Option<At<RawMatch>>,
    pub require: RawRequire,
    /// `[weights]`, with the line of its header.
    pub weights: Option<At<RawWeights>>,
    pub tolerance: Option<At<f64>>,
    pub max_attempts: Option<At<i64>>,
    /// `[limits]`, with the line of its header.
    pub limits: Option<At<RawLimits>>,
    /// `[verify]`, with the line of its header.
    pub verify: Option<At<RawVerify>>,
}

/// `[match]` as written.
#[derive(Debug, Default)]
pub(crate) struct RawMatch {
    /// How many values were written under `skills` and `tenants`, of any type: zero means
    /// the section matches everything, not that its values were rejected.
    pub written: usize,
    pub skills: Vec<At<String>>,
    pub tenants: Vec<At<String>>,
}

/// `[require]` as written.
#[derive(Debug, Default)]
pub(crate) struct RawRequire {
    pub jurisdictions: Vec<At<String>>,
    pub deny_jurisdictions: Vec<At<String>>,
    pub trust_domains: Vec<At<String>>,
    pub min_quality: Option<At<f64>>,
    pub max_cost_usd: Option<At<f64>>,
    pub max_latency_ms: Option<At<i64>>,
    pub payload_modes: Vec<At<String>>,
    pub min_context_window: Option<At<i64>>,
    pub model_families: Vec<At<String>>,
    pub deny_model_families: Vec<At<String>>,
}

/// `[weights]` as written.
#[derive(Debug, Default)]
pub(crate) struct RawWeights {
    pub quality: Option<At<f64>>,
    pub cost: Option<At<f64>>,
    pub latency: Option<At<f64>>,
}

/// `[limits]` as written.
#[derive(Debug, Default)]
pub(crate) struct RawLimits {
    pub rps: Option<At<f64>>,
    pub burst: Option<At<i64>>,
}

/// `[verify]` as written.
#[derive(Debug, Default)]
pub(crate) struct RawVerify {
    pub skill: Option<At<String>>,
    pub verifiers: Option<At<i64>>,
    pub threshold: Option<At<f64>>,
    pub max_rounds: Option<At<i64>>,
    pub sample: Option<At<f64>>,
    pub independent: Option<At<bool>>,
    pub min_reliability: Option<At<f64>>,
    /// `[verify.calibration]`, with the line of its header.
    pub calibration: Option<At<RawCalibration>>,
}

/// `[verify.calibration]` as written.
#[derive(Debug, Default)]
pub(crate) struct RawCalibration {
    pub reference: Option<At<String>>,
    pub every: Option<At<String>>,
    pub items: Option<At<i64>>,
}

const TOP_KEYS: &[&str] = &[
    "name",
    "description",
    "match",
    "require",
    "weights",
    "balance",
    "fallback",
    "limits",
    "verify",
];
const MATCH_KEYS: &[&str] = &["skills", "tenants"];
const REQUIRE_KEYS: &[&str] = &[
    "jurisdictions",
    "deny_jurisdictions",
    "trust_domains",
    "min_quality",
    "max_cost_usd",
    "max_latency_ms",
    "payload_modes",
    "min_context_window",
    "model_families",
    "deny_model_families",
];
const WEIGHTS_KEYS: &[&str] = &["quality", "cost", "latency"];
const BALANCE_KEYS: &[&str] = &["tolerance"];
const FALLBACK_KEYS: &[&str] = &["max_attempts"];
const LIMITS_KEYS: &[&str] = &["rps", "burst"];
const VERIFY_KEYS: &[&str] = &[
    "skill",
    "verifiers",
    "threshold",
    "max_rounds",
    "sample",
    "independent",
    "min_reliability",
    "calibration",
];
const CALIBRATION_KEYS: &[&str] = &["reference", "every", "items"];

/// The 1-based line holding byte `offset` of `bytes` (offsets past the end count as the
/// last line).
pub(crate) fn line_of(bytes: &[u8], offset: usize) -> usize {
    let end = offset.min(bytes.len());
    bytes[..end].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Parses one policy file. Never panics; every problem found is returned alongside what
/// could be read.
pub(crate) fn parse(file: &str, text: &str) -> (RawPolicy, Vec<PolicyProblem>) {
    let mut w = Walker {
        file,
        text,
        problems: Vec::new(),
    };
    let (doc, errors) = DeTable::parse_recoverable(text);
    if !errors.is_empty() {
        for e in &errors {
            let line = e.span().map_or(0, |s| line_of(text.as_bytes(), s.start));
            w.problem(line, "toml", format!("syntax error: {}", e.message()));
        }
        let name = doc.get_ref().iter().find_map(|(k, v)| match v.get_ref() {
            DeValue::String(s) if k.get_ref() == "name" => Some(At {
                value: s.to_string(),
                line: w.line(v.span()),
            }),
            _ => None,
        });
        let raw = RawPolicy {
            name,
            ..RawPolicy::default()
        };
        return (raw, w.problems);
    }
    let mut raw = w.policy(doc.get_ref());
    raw.complete = true;
    (raw, w.problems)
}

/// Renders one key segment as TOML would need it written (bare when possible).
fn key_part(k: &str) -> String {
    if !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        k.to_string()
    } else {
        format!("{k:?}")
    }
}

/// "a string", "an integer", … for a found value.
fn type_name(v: &DeValue<'_>) -> &'static str {
    match v {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a datetime",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

struct Walker<'a> {
    file: &'a str,
    text: &'a str,
    problems: Vec<PolicyProblem>,
}

type Entry<'t, 'i> = (String, &'t Spanned<DeValue<'i>>);

impl Walker<'_> {
    fn line(&self, span: Range<usize>) -> usize {
        line_of(self.text.as_bytes(), span.start)
    }

    fn problem(&mut self, line: usize, key: impl Into<String>, reason: impl Into<String>) {
        self.problems.push(PolicyProblem {
            file: self.file.to_string(),
            line,
            key: key.into(),
            reason: reason.into(),
        });
    }

    fn wrong_type(&mut self, key: &str, expected: &str, v: &Spanned<DeValue<'_>>) {
        let line = self.line(v.span());
        let got = type_name(v.get_ref());
        self.problem(line, key, format!("expected {expected}, got {got}"));
    }

    /// The entries of `table` whose keys are in `known` (with their dotted keys, in source
    /// order); reports the others as unknown.
    fn entries<'t, 'i>(
        &mut self,
        prefix: &str,
        table: &'t DeTable<'i>,
        known: &[&'static str],
    ) -> Vec<(&'static str, Entry<'t, 'i>)> {
        let mut out = Vec::new();
        for (k, v) in table.iter() {
            let dotted = if prefix.is_empty() {
                key_part(k.get_ref())
            } else {
                format!("{prefix}.{}", key_part(k.get_ref()))
            };
            match known.iter().find(|n| **n == k.get_ref().as_ref()) {
                Some(n) => out.push((*n, (dotted, v))),
                None => {
                    let line = self.line(k.span());
                    self.problem(
                        line,
                        dotted,
                        format!("unknown key (expected one of: {})", known.join(", ")),
                    );
                }
            }
        }
        out.sort_by_key(|(_, (_, v))| v.span().start);
        out
    }

    /// The table under `key`, or a type problem. The line is that of the key.
    fn table<'t, 'i>(&mut self, key: &str, v: &'t Spanned<DeValue<'i>>) -> Option<&'t DeTable<'i>> {
        match v.get_ref() {
            DeValue::Table(t) => Some(t),
            _ => {
                self.wrong_type(key, "a table", v);
                None
            }
        }
    }

    fn string(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Option<At<String>> {
        match v.get_ref() {
            DeValue::String(s) => Some(At {
                value: s.to_string(),
                line: self.line(v.span()),
            }),
            _ => {
                self.wrong_type(key, "a string", v);
                None
            }
        }
    }

    /// A number: an integer or a float, as `f64`.
    fn number(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Option<At<f64>> {
        let line = self.line(v.span());
        let value = match v.get_ref() {
            DeValue::Float(f) => match f.as_str().parse::<f64>() {
                Ok(x) => x,
                Err(_) => {
                    self.problem(line, key, format!("invalid float '{}'", f.as_str()));
                    return None;
                }
            },
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(x) => x as f64,
                Err(_) => {
                    self.problem(line, key, "integer does not fit in 64 bits");
                    return None;
                }
            },
            _ => {
                self.wrong_type(key, "a number", v);
                return None;
            }
        };
        Some(At { value, line })
    }

    fn integer(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Option<At<i64>> {
        let line = self.line(v.span());
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(value) => Some(At { value, line }),
                Err(_) => {
                    self.problem(line, key, "integer does not fit in 64 bits");
                    None
                }
            },
            _ => {
                self.wrong_type(key, "an integer", v);
                None
            }
        }
    }

    fn boolean(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Option<At<bool>> {
        match v.get_ref() {
            DeValue::Boolean(value) => Some(At {
                value: *value,
                line: self.line(v.span()),
            }),
            _ => {
                self.wrong_type(key, "a boolean", v);
                None
            }
        }
    }

    /// An array of strings; each element of another type is reported.
    fn strings(&mut self, key: &str, v: &Spanned<DeValue<'_>>) -> Vec<At<String>> {
        match v.get_ref() {
            DeValue::Array(items) => items
                .iter()
                .filter_map(|item| self.string(key, item))
                .collect(),
            _ => {
                self.wrong_type(key, "an array of strings", v);
                Vec::new()
            }
        }
    }

    fn policy(&mut self, doc: &DeTable<'_>) -> RawPolicy {
        let mut raw = RawPolicy::default();
        for (k, (key, v)) in self.entries("", doc, TOP_KEYS) {
            let header = self.header_line(doc, k);
            match k {
                "name" => raw.name = self.string(&key, v),
                "description" => raw.description = self.string(&key, v),
                "match" => {
                    if let Some(t) = self.table(&key, v) {
                        let value = self.matcher(&key, t);
                        raw.matcher = Some(At {
                            value,
                            line: header,
                        });
                    }
                }
                "require" => {
                    if let Some(t) = self.table(&key, v) {
                        raw.require = self.require(&key, t);
                    }
                }
                "weights" => {
                    if let Some(t) = self.table(&key, v) {
                        let value = self.weights(&key, t);
                        raw.weights = Some(At {
                            value,
                            line: header,
                        });
                    }
                }
                "balance" => {
                    if let Some(t) = self.table(&key, v) {
                        for (_, (key, v)) in self.entries(&key, t, BALANCE_KEYS) {
                            raw.tolerance = self.number(&key, v);
                        }
                    }
                }
                "fallback" => {
                    if let Some(t) = self.table(&key, v) {
                        for (_, (key, v)) in self.entries(&key, t, FALLBACK_KEYS) {
                            raw.max_attempts = self.integer(&key, v);
                        }
                    }
                }
                "limits" => {
                    if let Some(t) = self.table(&key, v) {
                        let value = self.limits(&key, t);
                        raw.limits = Some(At {
                            value,
                            line: header,
                        });
                    }
                }
                "verify" => {
                    if let Some(t) = self.table(&key, v) {
                        let value = self.verify(&key, t);
                        raw.verify = Some(At {
                            value,
                            line: header,
                        });
                    }
                }
                _ => {}
            }
        }
        raw
    }

    /// The line of the key `k` in `table` (for a section, its `[header]`).
    fn header_line(&self, table: &DeTable<'_>, k: &str) -> usize {
        table
            .iter()
            .find(|(key, _)| key.get_ref() == k)
            .map_or(0, |(key, _)| self.line(key.span()))
    }

    fn matcher(&mut self, prefix: &str, t: &DeTable<'_>) -> RawMatch {
        let mut m = RawMatch::default();
        for (k, (key, v)) in self.entries(prefix, t, MATCH_KEYS) {
            m.written += match v.get_ref() {
                DeValue::Array(items) => items.len(),
                _ => 1,
            };
            let list = self.strings(&key, v);
            match k {
                "skills" => m.skills = list,
                _ => m.tenants = list,
            }
        }
        m
    }

    fn require(&mut self, prefix: &str, t: &DeTable<'_>) -> RawRequire {
        let mut r = RawRequire::default();
        for (k, (key, v)) in self.entries(prefix, t, REQUIRE_KEYS) {
            match k {
                "jurisdictions" => r.jurisdictions = self.strings(&key, v),
                "deny_jurisdictions" => r.deny_jurisdictions = self.strings(&key, v),
                "trust_domains" => r.trust_domains = self.strings(&key, v),
                "min_quality" => r.min_quality = self.number(&key, v),
                "max_cost_usd" => r.max_cost_usd = self.number(&key, v),
                "max_latency_ms" => r.max_latency_ms = self.integer(&key, v),
                "payload_modes" => r.payload_modes = self.strings(&key, v),
                "min_context_window" => r.min_context_window = self.integer(&key, v),
                "model_families" => r.model_families = self.strings(&key, v),
                _ => r.deny_model_families = self.strings(&key, v),
            }
        }
        r
    }

    fn weights(&mut self, prefix: &str, t: &DeTable<'_>) -> RawWeights {
        let mut w = RawWeights::default();
        for (k, (key, v)) in self.entries(prefix, t, WEIGHTS_KEYS) {
            let n = self.number(&key, v);
            match k {
                "quality" => w.quality = n,
                "cost" => w.cost = n,
                _ => w.latency = n,
            }
        }
        w
    }

    fn limits(&mut self, prefix: &str, t: &DeTable<'_>) -> RawLimits {
        let mut l = RawLimits::default();
        for (k, (key, v)) in self.entries(prefix, t, LIMITS_KEYS) {
            match k {
                "rps" => l.rps = self.number(&key, v),
                _ => l.burst = self.integer(&key, v),
            }
        }
        l
    }

    fn verify(&mut self, prefix: &str, t: &DeTable<'_>) -> RawVerify {
        let mut r = RawVerify::default();
        let calibration_line = self.header_line(t, "calibration");
        for (k, (key, v)) in self.entries(prefix, t, VERIFY_KEYS) {
            match k {
                "skill" => r.skill = self.string(&key, v),
                "verifiers" => r.verifiers = self.integer(&key, v),
                "threshold" => r.threshold = self.number(&key, v),
                "max_rounds" => r.max_rounds = self.integer(&key, v),
                "sample" => r.sample = self.number(&key, v),
                "independent" => r.independent = self.boolean(&key, v),
                "min_reliability" => r.min_reliability = self.number(&key, v),
                _ => {
                    if let Some(t) = self.table(&key, v) {
                        let mut c = RawCalibration::default();
                        for (k, (key, v)) in self.entries(&key, t, CALIBRATION_KEYS) {
                            match k {
                                "reference" => c.reference = self.string(&key, v),
                                "every" => c.every = self.string(&key, v),
                                _ => c.items = self.integer(&key, v),
                            }
                        }
                        r.calibration = Some(At {
                            value: c,
                            line: calibration_line,
                        });
                    }
                }
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(text: &str) -> Vec<String> {
        parse("p.toml", text)
            .1
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn lines_from_offsets() {
        assert_eq!(line_of(b"a\nb\nc", 0), 1);
        assert_eq!(line_of(b"a\nb\nc", 2), 2);
        assert_eq!(line_of(b"a\nb\nc", 4), 3);
        assert_eq!(line_of(b"a\nb\nc", 999), 3);
        assert_eq!(line_of(b"", 0), 1);
    }

    #[test]
    fn key_parts_are_quoted_when_not_bare() {
        assert_eq!(key_part("min_quality"), "min_quality");
        assert_eq!(key_part("a.b"), "\"a.b\"");
        assert_eq!(key_part(""), "\"\"");
    }

    #[test]
    fn reads_every_key() {
        let text = r#"
name = "x"
description = "d"
[match]
skills = ["a*"]
tenants = ["t"]
[require]
jurisdictions = ["eu-*"]
deny_jurisdictions = ["us-*"]
trust_domains = ["r"]
min_quality = 1
max_cost_usd = 0.5
max_latency_ms = 0x10
payload_modes = ["text"]
min_context_window = 1_000
model_families = ["m"]
deny_model_families = ["g*"]
[weights]
quality = 1.0
cost = 2
latency = 3e0
[balance]
tolerance = 0.1
[fallback]
max_attempts = 2
[limits]
rps = 1.5
burst = 4
[verify]
skill = "check"
verifiers = 3
threshold = 1
max_rounds = 5
sample = 0.1
independent = false
"#;
        let (raw, problems) = parse("p.toml", text);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(raw.name.as_ref().map(|n| n.line), Some(2));
        assert_eq!(raw.matcher.as_ref().map(|m| m.line), Some(4));
        let r = &raw.require;
        assert_eq!(r.min_quality.as_ref().map(|x| x.value), Some(1.0));
        assert_eq!(r.max_latency_ms.as_ref().map(|x| x.value), Some(16));
        assert_eq!(r.min_context_window.as_ref().map(|x| x.value), Some(1000));
        assert_eq!(r.deny_model_families.len(), 1);
        let w = raw.weights.as_ref().map(|w| &w.value);
        assert_eq!(
            w.and_then(|w| w.latency.as_ref()).map(|x| x.value),
            Some(3.0)
        );
        assert_eq!(raw.tolerance.map(|t| (t.value, t.line)), Some((0.1, 23)));
        assert_eq!(raw.max_attempts.map(|t| t.value), Some(2));
        assert_eq!(
            raw.limits.as_ref().and_then(|l| l.value.burst.clone()),
            Some(At { value: 4, line: 28 })
        );
        let v = raw.verify.as_ref().expect("[verify] read");
        assert_eq!(v.line, 29);
        let v = &v.value;
        assert_eq!(
            v.skill,
            Some(At {
                value: "check".to_string(),
                line: 30
            })
        );
        assert_eq!(v.verifiers, Some(At { value: 3, line: 31 }));
        assert_eq!(
            v.threshold,
            Some(At {
                value: 1.0,
                line: 32
            })
        );
        assert_eq!(v.max_rounds, Some(At { value: 5, line: 33 }));
        assert_eq!(
            v.sample,
            Some(At {
                value: 0.1,
                line: 34
            })
        );
        assert_eq!(
            v.independent,
            Some(At {
                value: false,
                line: 35
            })
        );
    }

    #[test]
    fn verify_is_read_even_when_empty_and_absent_otherwise() {
        let (raw, problems) = parse("p.toml", "name = \"x\"\n\n[verify]\n");
        assert!(problems.is_empty(), "{problems:?}");
        let v = raw.verify.expect("an empty [verify] is still a section");
        assert_eq!(v.line, 3);
        assert!(v.value.skill.is_none() && v.value.independent.is_none());
        let (raw, problems) = parse("p.toml", "name = \"x\"\n");
        assert!(problems.is_empty(), "{problems:?}");
        assert!(raw.verify.is_none());
        // Dotted and inline forms are the same section.
        let (raw, problems) = parse("p.toml", "name = \"x\"\nverify = { verifiers = 4 }\n");
        assert!(problems.is_empty(), "{problems:?}");
        let v = raw.verify.and_then(|v| v.value.verifiers);
        assert_eq!(v, Some(At { value: 4, line: 2 }));
    }

    #[test]
    fn syntax_errors_are_reported_with_their_line() {
        assert_eq!(
            messages("name = \"x\"\n\nweights = [1,\n"),
            vec!["p.toml:3: toml: syntax error: unclosed array, expected `]`"]
        );
        let (raw, _) = parse("p.toml", "name = \"x\"\n[require\n");
        assert_eq!(raw.name.map(|n| n.value), Some("x".to_string()));
    }

    #[test]
    fn duplicate_keys_are_syntax_errors() {
        let m = messages("name = \"x\"\nname = \"y\"\n");
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with("p.toml:2: toml: syntax error: "), "{m:?}");
    }

    #[test]
    fn unknown_keys_are_named() {
        assert_eq!(
            messages("name = \"x\"\ncolour = 1\n[require]\nmin_qualty = 0.5\n"),
            vec![
                "p.toml:2: colour: unknown key (expected one of: name, description, match, \
                 require, weights, balance, fallback, limits, verify)",
                "p.toml:4: require.min_qualty: unknown key (expected one of: jurisdictions, \
                 deny_jurisdictions, trust_domains, min_quality, max_cost_usd, max_latency_ms, \
                 payload_modes, min_context_window, model_families, deny_model_families)",
            ]
        );
        assert_eq!(
            messages("[weights]\n\"a.b\" = 1\n"),
            vec![
                "p.toml:2: weights.\"a.b\": unknown key (expected one of: quality, cost, latency)"
            ]
        );
        assert_eq!(
            messages("[verify]\nverifiers = 2\nrounds = 3\n"),
            vec![
                "p.toml:3: verify.rounds: unknown key (expected one of: skill, verifiers, \
                 threshold, max_rounds, sample, independent, min_reliability, calibration)"
            ]
        );
    }

    #[test]
    fn wrong_types_are_reported() {
        assert_eq!(
            messages(
                "name = 5\nmatch = \"x\"\n[require]\nmin_quality = \"high\"\n\
                 max_latency_ms = 1.5\npayload_modes = [\"text\", 3]\ntrust_domains = \"r\"\n\
                 [[limits]]\nrps = 1\n"
            ),
            vec![
                "p.toml:1: name: expected a string, got an integer",
                "p.toml:2: match: expected a table, got a string",
                "p.toml:4: require.min_quality: expected a number, got a string",
                "p.toml:5: require.max_latency_ms: expected an integer, got a float",
                "p.toml:6: require.payload_modes: expected a string, got an integer",
                "p.toml:7: require.trust_domains: expected an array of strings, got a string",
                "p.toml:8: limits: expected a table, got an array",
            ]
        );
        assert_eq!(
            messages(
                "[verify]\nskill = 1\nverifiers = 2.0\nthreshold = \"high\"\nmax_rounds = true\n\
                 sample = [1]\nindependent = \"yes\"\n"
            ),
            vec![
                "p.toml:2: verify.skill: expected a string, got an integer",
                "p.toml:3: verify.verifiers: expected an integer, got a float",
                "p.toml:4: verify.threshold: expected a number, got a string",
                "p.toml:5: verify.max_rounds: expected an integer, got a boolean",
                "p.toml:6: verify.sample: expected a number, got an array",
                "p.toml:7: verify.independent: expected a boolean, got a string",
            ]
        );
        assert_eq!(
            messages("name = \"x\"\nverify = true\n"),
            vec!["p.toml:2: verify: expected a table, got a boolean"]
        );
        assert_eq!(
            messages("[verify]\nindependent = 1\n"),
            vec!["p.toml:2: verify.independent: expected a boolean, got an integer"]
        );
    }

    #[test]
    fn huge_integers_are_reported() {
        assert_eq!(
            messages("[fallback]\nmax_attempts = 0x7fffffffffffffffff\n"),
            vec!["p.toml:2: fallback.max_attempts: integer does not fit in 64 bits"]
        );
    }
}
