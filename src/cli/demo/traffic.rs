//! Sample traffic: a fixed list of tasks across skills, sent through the gateway under one
//! policy, or straight to the top-quality delegate of each skill ("blind" routing: over LDP,
//! or as a chat completion when that delegate is OpenAI-compatible), with bounded
//! concurrency; and quiz tasks, whose input carries the `expected` answer (which only the
//! simulated delegates read: the gateway never does) so that each answer can be marked right
//! or wrong. Every task's outcome is recorded for the report.

use super::fleet::QUIZ_SKILL;
use ldp_gateway::ldp::{Body, Envelope, IdentityCard, PayloadMode, SessionConfig};
use ldp_gateway::upstream::openai::{Backend, Params};
use ldp_gateway::upstream::{UpstreamClient, UpstreamSession};
use openai_wire::Turn;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// The skills the demo asks for (`chat` only the OpenAI-compatible delegates offer).
pub const SKILLS: [&str; 5] = ["summarize", "reasoning", "translate", "code-review", "chat"];

/// Deadline of one task, end to end.
const TASK_TIMEOUT: Duration = Duration::from_secs(30);

/// One task of the sample traffic.
#[derive(Debug, Clone)]
pub struct Task {
    /// The skill.
    pub skill: &'static str,
    /// `(instruction, input)` of the semantic frame.
    pub frame: (&'static str, &'static str),
    /// The right answer, carried in the frame as `expected` (quiz tasks only).
    pub expected: Option<&'static str>,
}

impl Task {
    /// The input in `mode`: a semantic frame (with `expected`, if any), or its text rendering.
    fn input(&self, mode: PayloadMode) -> Value {
        let (instruction, input) = self.frame;
        match mode {
            PayloadMode::SemanticFrame => {
                let mut frame =
                    json!({"task_type": self.skill, "instruction": instruction, "input": input});
                if let Some(expected) = self.expected {
                    frame["expected"] = Value::String(expected.to_owned());
                }
                frame
            }
            _ => Value::String(format!("{instruction}\n\n{input}")),
        }
    }

    /// Whether `output` answers it right: its `answer` is the expected one. `None` for a task
    /// without an expected answer.
    fn judge(&self, output: &Value) -> Option<bool> {
        let expected = self.expected?;
        Some(output.get("answer").and_then(Value::as_str) == Some(expected))
    }
}

const SAMPLES: [(&str, &str, &str); 10] = [
    ("summarize", "Summarise this incident report in three bullet points.",
     "At 02:14 UTC the primary database failed over after a disk controller fault. Writes were rejected for 94 seconds; reads continued from replicas. No data was lost. The on-call engineer confirmed replication health and re-enabled the old primary as a replica at 03:02."),
    ("summarize", "Give a one-paragraph summary for an executive.",
     "Quarterly revenue grew 12% year on year, driven by the enterprise tier. Churn fell to 1.8%. Infrastructure cost per customer rose 4% because of the new EU region, expected to amortise within two quarters."),
    ("reasoning", "Decide which plan is cheaper over three years and explain why.",
     "Plan A: 1,200 USD per month, no setup fee. Plan B: 900 USD per month plus a 9,000 USD setup fee and a 5% yearly price increase."),
    ("reasoning", "Find the flaw in this argument.",
     "Every service that failed last week was deployed on Friday. Service X was deployed on Friday. Therefore service X failed last week."),
    ("translate", "Translate into Japanese, keeping the tone formal.",
     "Thank you for your patience. Your order has shipped and will arrive within three business days."),
    ("translate", "Translate into German.",
     "The maintenance window starts at 22:00 and ends at midnight; expect short interruptions."),
    ("code-review", "Review this Rust function for bugs.",
     "fn average(xs: &[f64]) -> f64 { xs.iter().sum::<f64>() / xs.len() as f64 }"),
    ("code-review", "Review this SQL for injection risks.",
     "query = \"SELECT * FROM users WHERE name = '\" + name + \"'\""),
    ("chat", "Answer the customer in two sentences.",
     "Hi, I was charged twice for my March invoice. Can you refund one of the charges?"),
    ("chat", "Suggest a name for the new internal tool.",
     "It routes requests from our applications to whichever language model fits the request best."),
];

/// Quiz questions and their answers.
const QUESTIONS: [(&str, &str); 10] = [
    ("What is 17 × 23?", "391"),
    ("What is the capital of Australia?", "Canberra"),
    ("How many bits are in a kibibyte?", "8192"),
    ("Which planet has the shortest year?", "Mercury"),
    ("What is the chemical symbol of tungsten?", "W"),
    ("In which year did the Berlin Wall fall?", "1989"),
    ("What is the square root of 1764?", "42"),
    ("Which HTTP status code means Too Many Requests?", "429"),
    ("Who wrote 'On the Origin of Species'?", "Charles Darwin"),
    ("How many edges does a cube have?", "12"),
];

/// `n` quiz tasks (skill [`QUIZ_SKILL`]) cycling through the questions, each carrying its
/// expected answer.
pub fn quiz_tasks(n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| {
            let (question, answer) = QUESTIONS[i % QUESTIONS.len()];
            Task {
                skill: QUIZ_SKILL,
                frame: ("Answer the question; give only the answer.", question),
                expected: Some(answer),
            }
        })
        .collect()
}

/// `n` tasks cycling through the skills (a different sample each round), the same list for
/// every policy so that the policies and blind routing serve identical traffic.
pub fn tasks(n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| {
            let skill = SKILLS[i % SKILLS.len()];
            let round = i / SKILLS.len();
            let samples: Vec<_> = SAMPLES.iter().filter(|s| s.0 == skill).collect();
            let s = samples[round % samples.len()];
            Task {
                skill,
                frame: (s.1, s.2),
                expected: None,
            }
        })
        .collect()
}

/// What happened to one task.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A delegate answered.
    Served {
        /// Registry name of the delegate.
        delegate: String,
        /// `provenance.cost_usd` (0 when absent).
        cost_usd: f64,
        /// `provenance.tokens_used` (0 when absent).
        tokens: u64,
        /// Round trip as the client saw it, ms.
        latency_ms: f64,
        /// When it was sent.
        sent: Instant,
        /// Whether the answer is the expected one (tasks that carry one).
        right: Option<bool>,
    },
    /// `NO_ELIGIBLE_DELEGATE`: the policy allows no delegate for the skill.
    Unroutable(String),
    /// Any other failure (code and message).
    Failed(String),
}

/// Where tasks go: the gateway (one policy) or, for blind routing, a delegate per skill.
#[derive(Clone)]
pub enum Target {
    /// Through the gateway at `url`, whose card is `card`, under `policy`.
    Gateway {
        /// LDP base URL.
        url: String,
        /// The gateway's card (its id and modes).
        card: Arc<IdentityCard>,
        /// Policy named in the session config.
        policy: String,
    },
    /// Straight to a delegate: skill → the delegate.
    Blind(Arc<HashMap<&'static str, Direct>>),
}

/// A delegate blind routing sends a skill's tasks to.
pub struct Direct {
    /// Registry name.
    pub name: String,
    /// Base URL.
    pub url: String,
    /// How it is spoken to.
    pub via: Via,
}

/// How a delegate is spoken to directly.
pub enum Via {
    /// LDP, with its card.
    Ldp(Box<IdentityCard>),
    /// Chat completions, as the gateway would send them.
    OpenAi(Arc<Backend>),
}

/// Where one task goes.
enum Endpoint<'a> {
    /// An LDP endpoint: base URL, card, registry name (blind only).
    Ldp(&'a str, &'a IdentityCard, Option<&'a str>),
    /// An OpenAI-compatible delegate, straight.
    OpenAi(&'a Direct, &'a Backend),
}

impl Target {
    /// Where `skill`'s tasks go.
    fn endpoint(&self, skill: &str) -> Option<Endpoint<'_>> {
        match self {
            Target::Gateway { url, card, .. } => Some(Endpoint::Ldp(url, card, None)),
            Target::Blind(map) => map.get(skill).map(|d| match &d.via {
                Via::Ldp(card) => Endpoint::Ldp(&d.url, card, Some(&d.name)),
                Via::OpenAi(backend) => Endpoint::OpenAi(d, backend),
            }),
        }
    }

    fn session_config(&self) -> SessionConfig {
        SessionConfig {
            preferred_payload_modes: Some(vec![PayloadMode::SemanticFrame, PayloadMode::Text]),
            policy: match self {
                Target::Gateway { policy, .. } => Some(policy.clone()),
                Target::Blind(_) => None,
            },
            ..SessionConfig::default()
        }
    }
}

/// Sends `tasks` to `target` with `concurrency` clients; outcomes come back in task order.
pub async fn drive(
    client: &UpstreamClient,
    target: &Target,
    tasks: &Arc<Vec<Task>>,
    concurrency: usize,
) -> Vec<Outcome> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (client, target, tasks, next) =
            (client.clone(), target.clone(), tasks.clone(), next.clone());
        workers.spawn(async move { worker(client, target, tasks, next).await });
    }
    let mut outcomes: Vec<Option<Outcome>> = vec![None; tasks.len()];
    while let Some(done) = workers.join_next().await {
        let Ok(list) = done else { continue };
        for (i, o) in list {
            outcomes[i] = Some(o);
        }
    }
    outcomes
        .into_iter()
        .map(|o| o.unwrap_or_else(|| Outcome::Failed("client task stopped".into())))
        .collect()
}

/// One client: takes the next task and records its outcome. A session carries at most one
/// task per skill: the gateway keeps a session's tasks of one skill on the delegate that
/// served the first (it holds the conversation), so a fresh session is what lets routing
/// decide again, and what the demo wants to show.
async fn worker(
    client: UpstreamClient,
    target: Target,
    tasks: Arc<Vec<Task>>,
    next: Arc<AtomicUsize>,
) -> Vec<(usize, Outcome)> {
    let mut done = Vec::new();
    // Open sessions by base URL, with the skills each has carried.
    let mut sessions: HashMap<String, (UpstreamSession, HashSet<&'static str>)> = HashMap::new();
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(task) = tasks.get(i) else { break };
        let outcome = match target.endpoint(task.skill) {
            None => Outcome::Unroutable(format!("no delegate offers '{}'", task.skill)),
            Some(Endpoint::OpenAi(direct, backend)) => {
                complete(&client, direct, backend, task).await
            }
            Some(Endpoint::Ldp(url, card, name)) => {
                let reuse = sessions
                    .get(url)
                    .filter(|(_, used)| !used.contains(task.skill))
                    .map(|(s, _)| s.clone());
                let session = match reuse {
                    Some(s) => Ok(s),
                    None => {
                        if let Some((old, _)) = sessions.remove(url) {
                            client.close_session(url, &old).await;
                        }
                        client
                            .open_session(url, card, target.session_config())
                            .await
                            .map_err(|e| format!("opening a session: {e}"))
                    }
                };
                match session {
                    Ok(s) => {
                        let out = submit(&client, url, &s, task, name).await;
                        let mut used = sessions.remove(url).map(|(_, u)| u).unwrap_or_default();
                        used.insert(task.skill);
                        sessions.insert(url.to_owned(), (s, used));
                        out
                    }
                    Err(e) => Outcome::Failed(e),
                }
            }
        };
        done.push((i, outcome));
    }
    for (url, (s, _)) in sessions {
        client.close_session(&url, &s).await;
    }
    done
}

/// One TASK_SUBMIT and its answer.
async fn submit(
    client: &UpstreamClient,
    url: &str,
    session: &UpstreamSession,
    task: &Task,
    blind_name: Option<&str>,
) -> Outcome {
    let mode = session.payload.mode;
    let env = Envelope::new(
        session.session_id.as_str(),
        client.from_id(),
        session.delegate_id.as_str(),
        Body::TaskSubmit {
            task_id: ldp_gateway::ldp::new_id().into(),
            skill: task.skill.to_owned(),
            input: task.input(mode).into(),
            contract: None,
        },
        mode,
    );
    let started = Instant::now();
    let answer = client.send(url, &env, TASK_TIMEOUT).await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    match answer.map(|a| a.body) {
        Ok(Body::TaskResult {
            output, provenance, ..
        }) => {
            let right = output
                .to_value()
                .map_or(task.expected.map(|_| false), |o| task.judge(&o));
            let cost_usd = provenance.as_ref().and_then(|p| p.cost_usd).unwrap_or(0.0);
            let tokens = provenance.as_ref().and_then(|p| p.tokens_used).unwrap_or(0);
            // The gateway's `route` step names the delegate (a `verify` step, newer, names
            // the verifiers).
            let delegate = blind_name.map(str::to_owned).or_else(|| {
                let lineage = &provenance.as_ref()?.lineage;
                lineage
                    .iter()
                    .find(|l| l.step == "route")
                    .or_else(|| lineage.first())
                    .and_then(|l| l.routed_to.clone())
            });
            let delegate = delegate.unwrap_or_else(|| {
                provenance.map_or_else(|| "(unknown)".to_owned(), |p| p.produced_by)
            });
            Outcome::Served {
                delegate,
                cost_usd,
                tokens,
                latency_ms,
                sent: started,
                right,
            }
        }
        Ok(Body::TaskFailed { error, .. }) if error.code == "NO_ELIGIBLE_DELEGATE" => {
            Outcome::Unroutable(error.message)
        }
        Ok(Body::TaskFailed { error, .. }) => {
            Outcome::Failed(format!("{}: {}", error.code, error.message))
        }
        Ok(other) => Outcome::Failed(format!(
            "unexpected answer {}",
            other.message_type().as_str()
        )),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// One chat completion straight to an OpenAI-compatible delegate: the task's text as the user
/// message; its cost is the usage at the declared prices, as the gateway charges it.
async fn complete(
    client: &UpstreamClient,
    direct: &Direct,
    backend: &Backend,
    task: &Task,
) -> Outcome {
    let text = task.input(PayloadMode::Text);
    let messages = [Turn {
        role: "user",
        content: text.as_str().unwrap_or_default(),
    }];
    let started = Instant::now();
    let answer = backend
        .complete(
            client,
            &direct.url,
            &messages,
            Params::default(),
            TASK_TIMEOUT,
        )
        .await;
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    match answer {
        Ok(reply) => {
            let usage = reply.usage.unwrap_or_default();
            Outcome::Served {
                delegate: direct.name.clone(),
                cost_usd: backend
                    .prices
                    .cost(usage.prompt_tokens, usage.completion_tokens),
                tokens: usage.total_tokens,
                latency_ms,
                sent: started,
                right: None,
            }
        }
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_cycle_through_every_skill_with_varied_inputs() {
        let t = tasks(11);
        assert_eq!(
            t.iter().map(|t| t.skill).collect::<Vec<_>>()[..6],
            [
                "summarize",
                "reasoning",
                "translate",
                "code-review",
                "chat",
                "summarize"
            ]
        );
        assert_ne!(
            t[0].frame, t[5].frame,
            "the second round uses another sample"
        );
        assert_eq!(t[0].frame, t[10].frame, "and the third the first again");
        for skill in SKILLS {
            assert_eq!(
                SAMPLES.iter().filter(|s| s.0 == skill).count(),
                2,
                "{skill}"
            );
        }
    }

    #[test]
    fn quiz_tasks_carry_their_answer_in_the_frame_and_are_judged_by_it() {
        let t = quiz_tasks(12);
        assert!(t
            .iter()
            .all(|t| t.skill == QUIZ_SKILL && t.expected.is_some()));
        assert_eq!(t[0].frame, t[10].frame);
        let frame = t[0].input(PayloadMode::SemanticFrame);
        assert_eq!(frame["expected"], "391");
        assert_eq!(frame["task_type"], QUIZ_SKILL);
        assert_eq!(t[0].judge(&json!({"answer": "391"})), Some(true));
        assert_eq!(
            t[0].judge(&json!({"answer": {"wrong": "391"}})),
            Some(false)
        );
        assert_eq!(t[0].judge(&json!({"text": "391"})), Some(false));
        assert_eq!(tasks(1)[0].judge(&json!({"answer": "x"})), None);
        assert!(tasks(1)[0]
            .input(PayloadMode::SemanticFrame)
            .get("expected")
            .is_none());
    }

    #[test]
    fn input_follows_the_negotiated_mode() {
        let t = &tasks(1)[0];
        let frame = t.input(PayloadMode::SemanticFrame);
        assert_eq!(frame["task_type"], "summarize");
        assert!(frame["instruction"].is_string() && frame["input"].is_string());
        let text = t.input(PayloadMode::Text);
        assert!(text.as_str().unwrap().starts_with("Summarise"));
    }
}
