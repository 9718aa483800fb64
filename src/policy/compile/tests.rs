//! Pins every policy problem message, and checks the shipped policies.

use super::*;
use std::path::PathBuf;

/// Every problem `parse_str` reports for `text` (empty when it compiles).
fn problems(text: &str) -> Vec<String> {
    match parse_str("p.toml", text) {
        Ok(_) => Vec::new(),
        Err(ps) => ps.iter().map(ToString::to_string).collect(),
    }
}

/// The single problem reported for `name = "x"` followed by `rest`.
fn one(rest: &str) -> String {
    let ps = problems(&format!("name = \"x\"\n{rest}"));
    assert_eq!(ps.len(), 1, "{ps:#?}");
    ps.into_iter().next().unwrap_or_default()
}

fn shipped_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("policies")
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn load_messages(dir: &Path, default: &str) -> Vec<String> {
    match load_dir(dir, default) {
        Ok(_) => Vec::new(),
        Err(ps) => ps.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn every_shipped_policy_compiles() {
    let set = load_dir(&shipped_dir(), "balanced").unwrap_or_else(|ps| {
        let lines: Vec<String> = ps.iter().map(ToString::to_string).collect();
        panic!("shipped policies do not compile:\n{}", lines.join("\n"))
    });
    let names: Vec<&str> = set.policies.iter().map(|p| p.name.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "balanced",
            "best-quality",
            "cheapest",
            "eu-only",
            "internal-only",
            "low-latency"
        ]
    );
    assert_eq!(set.default_policy().name.0, "balanced");
    for p in &set.policies {
        assert!(!p.description.is_empty(), "{} has no description", p.name);
        let file = p.source.file_name().and_then(|f| f.to_str());
        assert_eq!(file, Some(format!("{}.toml", p.name).as_str()));
    }
    // The default catches everything else; at most one other policy claims requests.
    let balanced = set.get("balanced").unwrap();
    assert_eq!(balanced.matcher, None);
    assert_eq!(balanced.weights, Weights::default());
    assert_eq!(balanced.tolerance, 0.05);
    assert_eq!(balanced.max_attempts, 3);
    // Verification is documented there but not enabled by any shipped policy.
    for p in &set.policies {
        assert_eq!(p.verify, None, "{} enables [verify]", p.name);
    }
    let matching = set.policies.iter().filter(|p| p.matcher.is_some()).count();
    assert!(matching <= 1, "{matching} shipped policies have [match]");
    let cheapest = set.get("cheapest").unwrap();
    assert!(cheapest.weights.cost > cheapest.weights.quality);
    let fast = set.get("low-latency").unwrap();
    assert!(fast.weights.latency > fast.weights.quality);
    let best = set.get("best-quality").unwrap();
    assert!(best.weights.quality > best.weights.cost + best.weights.latency);
}

/// The jurisdiction and trust domain of every shipped delegate card.
fn shipped_cards() -> Vec<(String, String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/delegates");
    let mut cards = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let jurisdiction = v["jurisdiction"].as_str().unwrap_or_default().to_string();
            let domain = v["trust_domain"]
                .as_str()
                .or_else(|| v["trust_domain"]["name"].as_str())
                .unwrap_or_default()
                .to_string();
            cards.push((path.display().to_string(), jurisdiction, domain));
        }
    }
    cards
}

#[test]
fn constrained_shipped_policies_match_a_shipped_card() {
    let set = load_dir(&shipped_dir(), "balanced").unwrap();
    let cards = shipped_cards();
    assert!(!cards.is_empty());
    let eu = &set.get("eu-only").unwrap().require;
    assert_eq!(eu.jurisdictions, vec![Glob("eu-*".into())]);
    let eu_cards = cards
        .iter()
        .filter(|(_, j, _)| eu.jurisdictions.iter().any(|g| g.matches(j)))
        .count();
    assert!(eu_cards >= 1, "eu-only matches no card: {cards:?}");
    let internal = &set.get("internal-only").unwrap().require;
    assert_eq!(
        internal.trust_domains,
        vec!["research.internal".to_string()]
    );
    assert!(
        cards
            .iter()
            .any(|(_, _, d)| internal.trust_domains.contains(d)),
        "internal-only matches no card: {cards:?}"
    );
}

#[test]
fn a_full_policy_compiles_with_every_key() {
    let text = r#"
name = "eu-balanced"
description = "EU"
[match]
skills = ["Summarize", "reasoning*"]
tenants = ["acme"]
[require]
jurisdictions = ["eu-west", "eu-*"]
deny_jurisdictions = ["us-*"]
trust_domains = ["research.internal"]
min_quality = 0.7
max_cost_usd = 0.02
max_latency_ms = 4000
payload_modes = ["semantic_frame", "text", "text"]
min_context_window = 32000
model_families = ["Claude", "llama*"]
deny_model_families = ["gpt*"]
[weights]
quality = 1
cost = 0
latency = 0
[balance]
tolerance = 0
[fallback]
max_attempts = 10
[limits]
rps = 50
burst = 100
[verify]
skill = "judge.v2"
verifiers = 5
threshold = 0.6
max_rounds = 4
sample = 0.1
independent = false
min_reliability = 0.7
[verify.calibration]
reference = "calibration/qa.jsonl"
every = "5m"
items = 4
"#;
    let p = parse_str("dir/eu.toml", text).unwrap();
    let expected = Policy {
        name: PolicyName("eu-balanced".into()),
        description: "EU".into(),
        matcher: Some(Match {
            skills: vec![Glob("summarize".into()), Glob("reasoning*".into())],
            tenants: vec!["acme".into()],
        }),
        require: Require {
            jurisdictions: vec![Glob("eu-west".into()), Glob("eu-*".into())],
            deny_jurisdictions: vec![Glob("us-*".into())],
            trust_domains: vec!["research.internal".into()],
            min_quality: Some(0.7),
            max_cost_usd: Some(0.02),
            max_latency_ms: Some(4000),
            payload_modes: vec![PayloadMode::SemanticFrame, PayloadMode::Text],
            min_context_window: Some(32000),
            model_families: vec![Glob("claude".into()), Glob("llama*".into())],
            deny_model_families: vec![Glob("gpt*".into())],
        },
        weights: Weights {
            quality: 1.0,
            cost: 0.0,
            latency: 0.0,
        },
        tolerance: 0.0,
        max_attempts: 10,
        limits: Some(Limits {
            rps: 50.0,
            burst: 100,
        }),
        verify: Some(Verify {
            skill: "judge.v2".into(),
            verifiers: 5,
            threshold: 0.6,
            max_rounds: 4,
            sample: 0.1,
            independent: false,
            min_reliability: 0.7,
            calibration: Some(crate::policy::Calibration {
                reference: PathBuf::from("dir/calibration/qa.jsonl"),
                every: std::time::Duration::from_secs(300),
                items: 4,
            }),
        }),
        source: PathBuf::from("dir/eu.toml"),
    };
    assert_eq!(p, expected);
}

#[test]
fn defaults_apply_to_absent_keys() {
    let p = parse_str(
        "p.toml",
        "name = \"x\"\n[weights]\ncost = 0\n[limits]\nrps = 2.5\n",
    )
    .unwrap();
    assert_eq!(p.description, "");
    assert_eq!(p.matcher, None);
    assert_eq!(p.require, Require::default());
    assert_eq!(
        p.weights,
        Weights {
            quality: 0.5,
            cost: 0.0,
            latency: 0.2
        }
    );
    assert_eq!(p.tolerance, 0.05);
    assert_eq!(p.max_attempts, 3);
    assert_eq!(p.limits, Some(Limits { rps: 2.5, burst: 3 }));
    assert_eq!(p.verify, None);
    assert_eq!(
        parse_str("p.toml", "name = \"a.b_c-D9\"\n")
            .map(|p| p.name.0)
            .as_deref(),
        Ok("a.b_c-D9")
    );
}

// ---- one pinned message per problem kind ----

#[test]
fn syntax_error() {
    assert_eq!(
        problems("name = \"x\"\n[require\nmin_quality = 0.5\n"),
        vec!["p.toml:2: toml: syntax error: unclosed table, expected `]`"]
    );
}

#[test]
fn unknown_key() {
    assert_eq!(
        one("[balance]\ntolerence = 0.1\n"),
        "p.toml:3: balance.tolerence: unknown key (expected one of: tolerance)"
    );
    assert_eq!(
        one("[fallback]\nretries = 2\n"),
        "p.toml:3: fallback.retries: unknown key (expected one of: max_attempts)"
    );
    assert_eq!(
        one("[limits]\nrps = 1\nburts = 2\n"),
        "p.toml:4: limits.burts: unknown key (expected one of: rps, burst)"
    );
    assert_eq!(
        one("[match]\nskill = [\"a\"]\ntenants = [\"t\"]\n"),
        "p.toml:3: match.skill: unknown key (expected one of: skills, tenants)"
    );
}

#[test]
fn wrong_type() {
    assert_eq!(
        one("description = 3\n"),
        "p.toml:2: description: expected a string, got an integer"
    );
    assert_eq!(
        one("[balance]\ntolerance = \"5%\"\n"),
        "p.toml:3: balance.tolerance: expected a number, got a string"
    );
    assert_eq!(
        one("[fallback]\nmax_attempts = 2.0\n"),
        "p.toml:3: fallback.max_attempts: expected an integer, got a float"
    );
    assert_eq!(
        one("weights = true\n"),
        "p.toml:2: weights: expected a table, got a boolean"
    );
    assert_eq!(
        one("[require]\nmodel_families = \"llama\"\n"),
        "p.toml:3: require.model_families: expected an array of strings, got a string"
    );
    assert_eq!(
        one("[match]\nskills = [[\"a\"]]\n"),
        "p.toml:3: match.skills: expected a string, got an array"
    );
}

#[test]
fn missing_name() {
    assert_eq!(
        problems("description = \"no name\"\n"),
        vec!["p.toml:0: name: missing (every policy needs a name)"]
    );
}

#[test]
fn bad_name_characters() {
    assert_eq!(
        problems("\nname = \"eu balanced!\"\n"),
        vec!["p.toml:2: name: must be one or more of A-Z a-z 0-9 . _ -, got 'eu balanced!'"]
    );
    assert_eq!(
        problems("name = \"\"\n"),
        vec!["p.toml:1: name: must be one or more of A-Z a-z 0-9 . _ -, got ''"]
    );
}

#[test]
fn jurisdiction_syntax() {
    assert_eq!(
        one("[require]\njurisdictions = [\"EU West\"]\n"),
        "p.toml:3: require.jurisdictions: unknown jurisdiction syntax 'EU West' \
         (use lowercase letters, digits, '-' and '*')"
    );
    assert_eq!(
        one("[require]\ndeny_jurisdictions = [\n  \"us-*\",\n  \"eu_west!\",\n]\n"),
        "p.toml:5: require.deny_jurisdictions: unknown jurisdiction syntax 'eu_west!' \
         (use lowercase letters, digits, '-' and '*')"
    );
}

#[test]
fn unknown_payload_mode() {
    assert_eq!(
        one("[require]\npayload_modes = [\"text\", \"json\"]\n"),
        "p.toml:3: require.payload_modes: unknown payload mode 'json' (known: text, \
         semantic_frame, embedding_hints, semantic_graph, latent_capsules, cache_slices)"
    );
}

#[test]
fn weights_all_zero() {
    assert_eq!(
        one("[weights]\nquality = 0\ncost = 0.0\nlatency = 0\n"),
        "p.toml:2: weights: weights are all zero (at least one of quality, cost, latency \
         must be above 0)"
    );
}

#[test]
fn weights_sum_overflows() {
    assert_eq!(
        one("[weights]\nquality = 1e308\ncost = 1e308\n"),
        "p.toml:2: weights: weights are too large (their sum must be a finite number)"
    );
}

#[test]
fn negative_weight() {
    assert_eq!(
        one("[weights]\ncost = -0.5\n"),
        "p.toml:3: weights.cost: must not be negative, got -0.5"
    );
}

#[test]
fn non_finite_numbers() {
    assert_eq!(
        one("[weights]\nquality = inf\n"),
        "p.toml:3: weights.quality: must be a finite number, got inf"
    );
    assert_eq!(
        one("[require]\nmin_quality = nan\n"),
        "p.toml:3: require.min_quality: must be a finite number, got NaN"
    );
}

#[test]
fn negative_cost() {
    assert_eq!(
        one("[require]\nmax_cost_usd = -1\n"),
        "p.toml:3: require.max_cost_usd: must not be negative, got -1"
    );
}

#[test]
fn min_quality_out_of_range() {
    assert_eq!(
        one("[require]\n\nmin_quality = 1.5\n"),
        "p.toml:4: require.min_quality: must be between 0 and 1, got 1.5"
    );
    assert_eq!(
        one("[require]\nmin_quality = -0.1\n"),
        "p.toml:3: require.min_quality: must be between 0 and 1, got -0.1"
    );
}

#[test]
fn tolerance_out_of_range() {
    assert_eq!(
        one("[balance]\ntolerance = 1\n"),
        "p.toml:3: balance.tolerance: must be at least 0 and less than 1, got 1"
    );
    assert_eq!(
        one("[balance]\ntolerance = -0.01\n"),
        "p.toml:3: balance.tolerance: must be at least 0 and less than 1, got -0.01"
    );
}

#[test]
fn max_attempts_out_of_range() {
    assert_eq!(
        one("[fallback]\nmax_attempts = 0\n"),
        "p.toml:3: fallback.max_attempts: must be between 1 and 10, got 0"
    );
    assert_eq!(
        one("[fallback]\nmax_attempts = 11\n"),
        "p.toml:3: fallback.max_attempts: must be between 1 and 10, got 11"
    );
}

#[test]
fn max_latency_zero() {
    assert_eq!(
        one("[require]\nmax_latency_ms = 0\n"),
        "p.toml:3: require.max_latency_ms: must be greater than 0, got 0"
    );
}

#[test]
fn negative_context_window() {
    assert_eq!(
        one("[require]\nmin_context_window = -1\n"),
        "p.toml:3: require.min_context_window: must not be negative, got -1"
    );
}

#[test]
fn bad_limits() {
    assert_eq!(
        one("[limits]\nrps = 0\nburst = 5\n"),
        "p.toml:3: limits.rps: must be between 0.000001 and 1000000000 requests per second, got 0"
    );
    // A rate so slow its period overflowed the limiter and panicked every task (hardening).
    assert_eq!(
        one("[limits]\nrps = 5.4e-11\n"),
        "p.toml:3: limits.rps: must be between 0.000001 and 1000000000 requests per second, got 0.000000000054"
    );
    assert_eq!(
        one("[limits]\nrps = 5\nburst = 0\n"),
        "p.toml:4: limits.burst: must be at least 1, got 0"
    );
    assert_eq!(
        one("[limits]\nrps = 5\nburst = 4294967296\n"),
        "p.toml:4: limits.burst: must be at most 4294967295, got 4294967296"
    );
    assert_eq!(
        one("[limits]\nburst = 5\n"),
        "p.toml:2: limits.rps: missing (required in [limits])"
    );
}

#[test]
fn empty_glob() {
    assert_eq!(
        one("[match]\nskills = [\"\"]\ntenants = [\"t\"]\n"),
        "p.toml:3: match.skills: empty glob; use '*' to match anything"
    );
    assert_eq!(
        one("[require]\njurisdictions = [\"\"]\n"),
        "p.toml:3: require.jurisdictions: empty glob; use '*' to match anything"
    );
    assert_eq!(
        one("[require]\nmodel_families = [\"\"]\n"),
        "p.toml:3: require.model_families: empty glob; use '*' to match anything"
    );
}

#[test]
fn bad_name_glob() {
    assert_eq!(
        one("[require]\ndeny_model_families = [\"gpt 4\"]\n"),
        "p.toml:3: require.deny_model_families: invalid glob 'gpt 4' \
         (no spaces or control characters)"
    );
}

#[test]
fn empty_names() {
    assert_eq!(
        one("[require]\ntrust_domains = [\"\"]\n"),
        "p.toml:3: require.trust_domains: empty trust domain"
    );
    assert_eq!(
        one("[match]\nskills = [\"a\"]\ntenants = [\"\"]\n"),
        "p.toml:4: match.tenants: empty tenant name"
    );
}

#[test]
fn match_everything() {
    assert_eq!(
        one("[match]\nskills = []\n"),
        "p.toml:2: match: matches every request; list skills or tenants, or remove [match] \
         (the default policy already applies when nothing matches)"
    );
}

#[test]
fn verify_defaults_when_empty_and_absent_means_off() {
    let on = |text: &str| parse_str("p.toml", text).map(|p| p.verify);
    assert_eq!(on("name = \"x\"\n"), Ok(None));
    assert_eq!(on("name = \"x\"\n[verify]\n"), Ok(Some(Verify::default())));
    assert_eq!(
        on("name = \"x\"\nverify = {}\n"),
        Ok(Some(Verify::default()))
    );
    assert_eq!(
        Verify::default(),
        Verify {
            skill: "verify".into(),
            verifiers: 2,
            threshold: 0.75,
            max_rounds: 3,
            sample: 1.0,
            independent: true,
            min_reliability: 0.6,
            calibration: None,
        }
    );
    // Each key alone changes only itself.
    let d = Verify::default();
    let one_key = |line: &str| on(&format!("name = \"x\"\n[verify]\n{line}\n"));
    assert_eq!(
        one_key("skill = \"fact-check\""),
        Ok(Some(Verify {
            skill: "fact-check".into(),
            ..d.clone()
        }))
    );
    assert_eq!(
        one_key("verifiers = 10"),
        Ok(Some(Verify {
            verifiers: 10,
            ..d.clone()
        }))
    );
    assert_eq!(
        one_key("threshold = 1"),
        Ok(Some(Verify {
            threshold: 1.0,
            ..d.clone()
        }))
    );
    assert_eq!(
        one_key("max_rounds = 1"),
        Ok(Some(Verify {
            max_rounds: 1,
            ..d.clone()
        }))
    );
    assert_eq!(
        one_key("sample = 0"),
        Ok(Some(Verify {
            sample: 0.0,
            ..d.clone()
        }))
    );
    assert_eq!(
        one_key("independent = false"),
        Ok(Some(Verify {
            independent: false,
            ..d.clone()
        }))
    );
    assert_eq!(
        on("name = \"x\"\nverify.verifiers = 1\n"),
        Ok(Some(Verify { verifiers: 1, ..d }))
    );
}

#[test]
fn verify_bad_skill() {
    assert_eq!(
        one("[verify]\nskill = \"\"\n"),
        "p.toml:3: verify.skill: empty skill name"
    );
    assert_eq!(
        one("[verify]\nskill = \"fact check\"\n"),
        "p.toml:3: verify.skill: invalid skill name 'fact check' \
         (no spaces, control characters or '@')"
    );
    assert_eq!(
        one("[verify]\nskill = \"verify\\t\"\n"),
        "p.toml:3: verify.skill: invalid skill name 'verify\\t' \
         (no spaces, control characters or '@')"
    );
    assert_eq!(
        one("[verify]\n\nskill = \"verify@2\"\n"),
        "p.toml:4: verify.skill: invalid skill name 'verify@2' \
         (no spaces, control characters or '@')"
    );
}

#[test]
fn verify_verifiers_out_of_range() {
    assert_eq!(
        one("[verify]\nverifiers = 0\n"),
        "p.toml:3: verify.verifiers: must be between 1 and 10, got 0"
    );
    assert_eq!(
        one("[verify]\nverifiers = 11\n"),
        "p.toml:3: verify.verifiers: must be between 1 and 10, got 11"
    );
    assert_eq!(
        one("[verify]\nverifiers = -9223372036854775808\n"),
        "p.toml:3: verify.verifiers: must be between 1 and 10, got -9223372036854775808"
    );
}

#[test]
fn verify_threshold_out_of_range() {
    assert_eq!(
        one("[verify]\nthreshold = 0\n"),
        "p.toml:3: verify.threshold: must be above 0 and at most 1, got 0"
    );
    assert_eq!(
        one("[verify]\nthreshold = 1.01\n"),
        "p.toml:3: verify.threshold: must be above 0 and at most 1, got 1.01"
    );
    assert_eq!(
        one("[verify]\nthreshold = -0.5\n"),
        "p.toml:3: verify.threshold: must be above 0 and at most 1, got -0.5"
    );
    assert_eq!(
        one("[verify]\nthreshold = nan\n"),
        "p.toml:3: verify.threshold: must be a finite number, got NaN"
    );
}

#[test]
fn verify_max_rounds_out_of_range() {
    assert_eq!(
        one("[verify]\nmax_rounds = 0\n"),
        "p.toml:3: verify.max_rounds: must be between 1 and 10, got 0"
    );
    assert_eq!(
        one("[verify]\nmax_rounds = 11\n"),
        "p.toml:3: verify.max_rounds: must be between 1 and 10, got 11"
    );
}

#[test]
fn verify_sample_out_of_range() {
    assert_eq!(
        one("[verify]\nsample = 1.5\n"),
        "p.toml:3: verify.sample: must be between 0 and 1, got 1.5"
    );
    assert_eq!(
        one("[verify]\nsample = -0.1\n"),
        "p.toml:3: verify.sample: must be between 0 and 1, got -0.1"
    );
    assert_eq!(
        one("[verify]\nsample = inf\n"),
        "p.toml:3: verify.sample: must be a finite number, got inf"
    );
}

#[test]
fn verify_wrong_types() {
    assert_eq!(
        one("[verify]\nindependent = \"yes\"\n"),
        "p.toml:3: verify.independent: expected a boolean, got a string"
    );
    assert_eq!(
        one("[verify]\nverifiers = 2.0\n"),
        "p.toml:3: verify.verifiers: expected an integer, got a float"
    );
    assert_eq!(
        one("[verify]\nthreshold = \"75%\"\n"),
        "p.toml:3: verify.threshold: expected a number, got a string"
    );
    assert_eq!(
        one("[verify]\nskill = [\"verify\"]\n"),
        "p.toml:3: verify.skill: expected a string, got an array"
    );
    assert_eq!(
        one("verify = true\n"),
        "p.toml:2: verify: expected a table, got a boolean"
    );
    assert_eq!(
        one("[[verify]]\nverifiers = 2\n"),
        "p.toml:2: verify: expected a table, got an array"
    );
}

#[test]
fn verify_unknown_key() {
    assert_eq!(
        one("[verify]\nverifiers = 2\nquorum = 0.5\n"),
        "p.toml:4: verify.quorum: unknown key (expected one of: skill, verifiers, threshold, \
         max_rounds, sample, independent, min_reliability, calibration)"
    );
}

#[test]
fn every_verify_problem_is_reported() {
    let text = "\
name = \"x\"
[verify]
skill = \"a b\"
verifiers = 0
threshold = 2
max_rounds = 11
sample = -1
independent = 1
extra = true
";
    assert_eq!(
        problems(text),
        vec![
            "p.toml:3: verify.skill: invalid skill name 'a b' (no spaces, control characters \
             or '@')",
            "p.toml:4: verify.verifiers: must be between 1 and 10, got 0",
            "p.toml:5: verify.threshold: must be above 0 and at most 1, got 2",
            "p.toml:6: verify.max_rounds: must be between 1 and 10, got 11",
            "p.toml:7: verify.sample: must be between 0 and 1, got -1",
            "p.toml:8: verify.independent: expected a boolean, got an integer",
            "p.toml:9: verify.extra: unknown key (expected one of: skill, verifiers, threshold, \
             max_rounds, sample, independent, min_reliability, calibration)",
        ]
    );
}

// ---- collecting ----

#[test]
fn several_problems_in_one_file_are_all_reported_in_line_order() {
    let text = "\
name = \"bad name\"
colour = \"blue\"
[require]
min_quality = 2
payload_modes = [\"telepathy\"]
jurisdictions = [\"EU\"]
[weights]
quality = -1
[fallback]
max_attempts = 0
";
    assert_eq!(
        problems(text),
        vec![
            "p.toml:1: name: must be one or more of A-Z a-z 0-9 . _ -, got 'bad name'",
            "p.toml:2: colour: unknown key (expected one of: name, description, match, \
             require, weights, balance, fallback, limits, verify)",
            "p.toml:4: require.min_quality: must be between 0 and 1, got 2",
            "p.toml:5: require.payload_modes: unknown payload mode 'telepathy' (known: text, \
             semantic_frame, embedding_hints, semantic_graph, latent_capsules, cache_slices)",
            "p.toml:6: require.jurisdictions: unknown jurisdiction syntax 'EU' (use lowercase \
             letters, digits, '-' and '*')",
            "p.toml:8: weights.quality: must not be negative, got -1",
            "p.toml:10: fallback.max_attempts: must be between 1 and 10, got 0",
        ]
    );
}

#[test]
fn problems_across_files_are_all_reported() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "a.toml",
        "name = \"a\"\n[require]\nmin_quality = 5\n",
    );
    write(dir.path(), "b.toml", "name = \"b\"\n[weights]\ncost = -1\n");
    write(dir.path(), "c.toml", "name = \"c\"\n[broken\n");
    write(dir.path(), "d.toml", "name = \"d\"\n");
    let d = dir.path().display().to_string();
    assert_eq!(
        load_messages(dir.path(), "d"),
        vec![
            format!("{d}/a.toml:3: require.min_quality: must be between 0 and 1, got 5"),
            format!("{d}/b.toml:3: weights.cost: must not be negative, got -1"),
            format!("{d}/c.toml:2: toml: syntax error: unclosed table, expected `]`"),
        ]
    );
}

#[test]
fn duplicate_names_report_the_second_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.toml", "name = \"same\"\n");
    write(dir.path(), "b.toml", "# again\nname = \"same\"\n");
    let d = dir.path().display().to_string();
    assert_eq!(
        load_messages(dir.path(), "same"),
        vec![format!(
            "{d}/b.toml:2: name: duplicate policy name 'same' (first defined in {d}/a.toml)"
        )]
    );
}

#[test]
fn missing_default() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.toml", "name = \"a\"\n");
    write(dir.path(), "b.toml", "name = \"b\"\n");
    let d = dir.path().display().to_string();
    assert_eq!(
        load_messages(dir.path(), "x"),
        vec![format!(
            "{d}:0: policies.default: default policy 'x' does not exist (policies: a, b)"
        )]
    );
    // A default whose file has other problems still exists: no extra problem.
    write(
        dir.path(),
        "c.toml",
        "name = \"c\"\n[fallback]\nmax_attempts = 0\n",
    );
    assert_eq!(load_messages(dir.path(), "c").len(), 1);
}

#[test]
fn empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "README.md", "not a policy");
    write(dir.path(), ".hidden.toml", "name = \"hidden\"\n");
    let d = dir.path().display().to_string();
    assert_eq!(
        load_messages(dir.path(), "balanced"),
        vec![format!(
            "{d}:0: policies.dir: no *.toml policy files in this directory"
        )]
    );
}

#[test]
fn missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("nope");
    let d = gone.display().to_string();
    assert_eq!(
        load_messages(&gone, "balanced"),
        vec![format!("{d}:0: policies.dir: directory does not exist")]
    );
}

#[test]
fn not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), b"name = \"a\"\n# \xff\n").unwrap();
    let d = dir.path().display().to_string();
    assert_eq!(
        load_messages(dir.path(), "a"),
        vec![format!("{d}/a.toml:2: file: not valid UTF-8")]
    );
}

#[test]
fn files_load_in_name_order_and_others_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "20-b.toml", "name = \"b\"\n");
    write(dir.path(), "10-z.toml", "name = \"z\"\n");
    write(dir.path(), "notes.txt", "name = 1");
    write(dir.path(), "old.toml.bak", "garbage [");
    std::fs::create_dir(dir.path().join("sub.toml")).unwrap();
    let set = load_dir(dir.path(), "b").unwrap();
    let names: Vec<&str> = set.policies.iter().map(|p| p.name.0.as_str()).collect();
    assert_eq!(names, ["z", "b"]);
    assert_eq!(set.default.0, "b");
    assert_eq!(set.policies[0].source, dir.path().join("10-z.toml"));
}

#[test]
fn garbage_never_panics() {
    let shipped = std::fs::read_to_string(shipped_dir().join("balanced.toml")).unwrap();
    let mut inputs: Vec<String> = vec![
        String::new(),
        "\u{0}".into(),
        "[[[[".into(),
        "a = [".repeat(200),
        "x = {".repeat(200),
        "name = \"\u{1F600}\"\n[require]\nmin_quality = 1e999\n".into(),
        "name = 'x'\nrequire.min_quality = 0x10\nweights.cost = -0.0\n".into(),
        "name = 'x'\n[limits]\nrps = 1e300\n".into(),
        "name = 'x'\n[limits]\nrps = 5e-324\n".into(),
        "name = 1979-05-27T07:32:00Z\n".into(),
    ];
    // Every prefix and a few byte-level corruptions of a real policy.
    let mut cut = 0;
    while cut < shipped.len() {
        if shipped.is_char_boundary(cut) {
            inputs.push(shipped[..cut].to_string());
        }
        cut += 7;
    }
    for (i, c) in ["]", "[", "\"", "=", "\n", "'", "{"].iter().enumerate() {
        let at = (i * 97) % shipped.len();
        if shipped.is_char_boundary(at) {
            inputs.push(format!("{}{c}{}", &shipped[..at], &shipped[at..]));
        }
    }
    for input in inputs {
        let _ = parse_str("p.toml", &input);
    }
}

#[test]
fn dotted_top_level_keys_are_checked_too() {
    assert_eq!(
        one("require.min_quality = 3\n"),
        "p.toml:2: require.min_quality: must be between 0 and 1, got 3"
    );
}

#[test]
fn bom_and_crlf_are_accepted() {
    let p = parse_str(
        "p.toml",
        "\u{feff}name = \"x\"\r\n[fallback]\r\nmax_attempts = 2\r\n",
    );
    assert_eq!(p.map(|p| p.max_attempts), Ok(2));
    assert_eq!(
        problems("name = \"x\"\r\n[fallback]\r\nmax_attempts = 0\r\n"),
        vec!["p.toml:3: fallback.max_attempts: must be between 1 and 10, got 0"]
    );
}

#[test]
fn missing_default_without_any_named_policy() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.toml", "description = \"anonymous\"\n");
    let d = dir.path().display().to_string();
    assert_eq!(
        load_messages(dir.path(), "balanced"),
        vec![
            format!("{d}/a.toml:0: name: missing (every policy needs a name)"),
            format!("{d}:0: policies.default: default policy 'balanced' does not exist"),
        ]
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_text_never_panics(text in "(?s).{0,200}") {
        let _ = parse_str("p.toml", &text);
    }

    #[test]
    fn toml_like_text_never_panics(
        text in "([a-z_.\\[\\]\"'={}, \\n0-9+-]|inf|nan|name|require|weights|limits|match){0,80}"
    ) {
        if let Err(ps) = parse_str("p.toml", &text) {
            proptest::prop_assert!(!ps.is_empty());
            for p in ps {
                proptest::prop_assert!(p.line <= text.lines().count() + 1);
            }
        }
    }
}

#[test]
fn calibration_keys_are_checked_with_their_lines() {
    let text = "name = \"x\"\n[verify]\nmin_reliability = 1.5\n[verify.calibration]\nevery = \"soon\"\nitems = 0\n";
    let problems: Vec<String> = parse_str("p.toml", text)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        problems,
        [
            "p.toml:3: verify.min_reliability: must be between 0 and 1, got 1.5",
            "p.toml:4: verify.calibration.reference: a reference file is required (JSON Lines of {skill, input, output, correct})",
            "p.toml:5: verify.calibration.every: not a duration (expected number at 0), got 'soon'",
            "p.toml:6: verify.calibration.items: must be between 1 and 100, got 0",
        ]
    );
    let text = "name = \"x\"\n[verify.calibration]\nitems = 500\nbogus = 1\n";
    let problems: Vec<String> = parse_str("p.toml", text)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        problems,
        [
            "p.toml:2: verify.calibration.reference: a reference file is required (JSON Lines of {skill, input, output, correct})",
            "p.toml:3: verify.calibration.items: must be between 1 and 100, got 500",
            "p.toml:4: verify.calibration.bogus: unknown key (expected one of: reference, every, items)",
        ]
    );
}
