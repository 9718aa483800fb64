//! Reading blocks by type and field, the `REQ` a bridge turns into a task, and the answer
//! blocks (`OBS`, `RES`, `END`, `BLK`, NACK, WARN).

use crate::read::ParseError;
use crate::value::{field, Block, Body, Fields, Message, Value};

/// The block types of §3 (besides `HEADER`).
pub mod kind {
    /// §3.2 context.
    pub const CTX: &str = "CTX";
    /// §3.3 request.
    pub const REQ: &str = "REQ";
    /// §3.4 plan.
    pub const PLAN: &str = "PLAN";
    /// §3.5 action.
    pub const ACT: &str = "ACT";
    /// §3.6 observation.
    pub const OBS: &str = "OBS";
    /// §3.7 blocker.
    pub const BLK: &str = "BLK";
    /// §3.8 question.
    pub const ASK: &str = "ASK";
    /// §3.9 handoff.
    pub const END: &str = "END";
    /// §3.10 response.
    pub const RES: &str = "RES";
    /// Every standard type.
    pub const STANDARD: [&str; 9] = [CTX, REQ, PLAN, ACT, OBS, BLK, ASK, END, RES];
}

impl Message {
    /// The blocks of type `kind`, in order.
    pub fn blocks_of<'m>(&'m self, kind: &'m str) -> impl Iterator<Item = &'m Block> + 'm {
        self.blocks.iter().filter(move |b| b.kind == kind)
    }

    /// The first block of type `kind`.
    pub fn first(&self, kind: &str) -> Option<&Block> {
        self.blocks.iter().find(|b| b.kind == kind)
    }

    /// The blocks whose type is neither standard (§3) nor an `X_` extension (§8.1): each
    /// deserves a `RES:{o:"WARN",…}` (§7.3).
    pub fn unknown_blocks(&self) -> impl Iterator<Item = &Block> {
        self.blocks
            .iter()
            .filter(|b| !b.is_standard() && !b.is_extension())
    }
}

impl Block {
    /// A `TYPE:{…}` block.
    pub fn map(kind: impl Into<String>, fields: Fields) -> Self {
        Block {
            kind: kind.into(),
            body: Body::Map(fields),
        }
    }

    /// A `TYPE:[…]` block.
    pub fn list(kind: impl Into<String>, items: Vec<Value>) -> Self {
        Block {
            kind: kind.into(),
            body: Body::List(items),
        }
    }

    /// One of the nine types of §3.
    pub fn is_standard(&self) -> bool {
        kind::STANDARD.contains(&self.kind.as_str())
    }

    /// An `X_…` extension type (§8.1).
    pub fn is_extension(&self) -> bool {
        self.kind.starts_with("X_")
    }

    /// The fields of a map body (empty for a list body).
    pub fn fields(&self) -> &[(String, Value)] {
        match &self.body {
            Body::Map(f) => f,
            Body::List(_) => &[],
        }
    }

    /// The items of a list body (`PLAN:[…]`; empty for a map body).
    pub fn items(&self) -> &[Value] {
        match &self.body {
            Body::List(v) => v,
            Body::Map(_) => &[],
        }
    }

    /// Field `key` of a map body.
    pub fn get(&self, key: &str) -> Option<&Value> {
        field(self.fields(), key)
    }

    /// Field `key` as text (a string, bare word or number).
    pub fn str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// Field `key` as an integer.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.get(key).and_then(Value::as_i64)
    }

    /// Field `key` as a list of texts (`exp:["A","B"]`); a single text is a list of one.
    pub fn strs(&self, key: &str) -> Option<Vec<&str>> {
        match self.get(key)? {
            Value::List(items) => items.iter().map(Value::as_str).collect(),
            v => v.as_str().map(|s| vec![s]),
        }
    }

    /// The `x_…` fields (§8.2).
    pub fn extensions(&self) -> impl Iterator<Item = &(String, Value)> {
        self.fields().iter().filter(|(k, _)| k.starts_with("x_"))
    }

    /// `OBS:{[ai:…,]s:OK|ERR,c:{…}[,e:"…"]}` (§3.6); `s` is `ERR` when `error` is given.
    pub fn obs(ai: Option<&str>, content: Fields, error: Option<&str>) -> Self {
        let mut f = Vec::with_capacity(4);
        if let Some(ai) = ai {
            f.push(("ai".to_owned(), Value::str(ai)));
        }
        let status = if error.is_some() { "ERR" } else { "OK" };
        f.push(("s".to_owned(), Value::Symbol(status.to_owned())));
        f.push(("c".to_owned(), Value::Map(content)));
        if let Some(e) = error {
            f.push(("e".to_owned(), Value::str(e)));
        }
        Block::map(kind::OBS, f)
    }

    /// `RES:{o:"…"[,msg:"…"]}` (§3.10).
    pub fn res(o: &str, msg: Option<&str>) -> Self {
        let mut f = vec![("o".to_owned(), Value::str(o))];
        if let Some(m) = msg {
            f.push(("msg".to_owned(), Value::str(m)));
        }
        Block::map(kind::RES, f)
    }

    /// `RES:{o:"NACK",msg:"parse error at L:C: …"}` (§7.2).
    pub fn nack(error: &ParseError) -> Self {
        Block::res("NACK", Some(&error.to_string()))
    }

    /// `RES:{o:"WARN",msg:"…"}` (§7.3).
    pub fn warn(msg: &str) -> Self {
        Block::res("WARN", Some(msg))
    }

    /// The §7.3 warning for a block of unknown type: `unknown message type: CUSTOM ignored`.
    pub fn warn_unknown(kind: &str) -> Self {
        Block::warn(&format!("unknown message type: {kind} ignored"))
    }

    /// `END:{n:"…"[,t:[…]][,r:[…]],del:[…]}` (§3.9).
    pub fn end(next: &str, tests: &[&str], risks: &[&str], deliverables: &[&str]) -> Self {
        let mut f = vec![("n".to_owned(), Value::str(next))];
        if !tests.is_empty() {
            f.push(("t".to_owned(), Value::strs(tests.iter().copied())));
        }
        if !risks.is_empty() {
            f.push(("r".to_owned(), Value::strs(risks.iter().copied())));
        }
        f.push(("del".to_owned(), Value::strs(deliverables.iter().copied())));
        Block::map(kind::END, f)
    }

    /// `BLK:{w:"…",a:[…][,esc:true|false]}` (§3.7): why, and what would qualify instead.
    pub fn blk<S: AsRef<str>>(why: &str, alternatives: &[S], escalate: Option<bool>) -> Self {
        let mut f = vec![
            ("w".to_owned(), Value::str(why)),
            (
                "a".to_owned(),
                Value::strs(alternatives.iter().map(|s| s.as_ref())),
            ),
        ];
        if let Some(e) = escalate {
            f.push(("esc".to_owned(), Value::Bool(e)));
        }
        Block::map(kind::BLK, f)
    }

    /// The same block with `key:value` appended (an `x_` provenance field, an `ai` id).
    pub fn with(mut self, key: &str, value: Value) -> Self {
        if let Body::Map(f) = &mut self.body {
            f.push((key.to_owned(), value));
        }
        self
    }
}

/// A `REQ` block's fields as a bridge reads them (§3.3).
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `i`: an id the answer refers back to (not in §3.3; taken when present, as ACT's `i`).
    pub id: Option<String>,
    /// `o`: the objective.
    pub objective: String,
    /// `pr`: 1 (critical) to 5 (low).
    pub priority: u8,
    /// `d`: dependency ids.
    pub deps: Vec<String>,
    /// `exp`: required experts (a bridge reads these as skills or delegate ids).
    pub experts: Vec<String>,
}

/// Why a `REQ` block cannot be read as a [`Request`]; its Display is the §7.2 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A required field is absent.
    #[error("missing required field '{0}' in REQ")]
    Missing(&'static str),
    /// A field has the wrong type or range.
    #[error("field '{field}' in REQ {problem}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong, e.g. "must be an integer from 1 to 5".
        problem: &'static str,
    },
    /// The body is a list, not a map.
    #[error("REQ must be a map")]
    NotAMap,
}

impl RequestError {
    /// The error at the block's position, for `RES:{o:"NACK",…}`.
    pub fn at(&self, line: usize, column: usize) -> ParseError {
        ParseError::at(line, column, self.to_string())
    }
}

impl Request {
    /// Reads a `REQ` block: `o` a non-empty text, `pr` an integer 1–5, `d` and `exp` lists
    /// of texts (or one text) when present.
    pub fn from_block(b: &Block) -> Result<Request, RequestError> {
        if matches!(b.body, Body::List(_)) {
            return Err(RequestError::NotAMap);
        }
        let objective = match b.get("o") {
            None => return Err(RequestError::Missing("o")),
            Some(v) => v
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or(RequestError::Invalid {
                    field: "o",
                    problem: "must be a non-empty string",
                })?,
        };
        let priority = match b.get("pr") {
            None => return Err(RequestError::Missing("pr")),
            Some(v) => v
                .as_i64()
                .filter(|p| (1..=5).contains(p))
                .and_then(|p| u8::try_from(p).ok())
                .ok_or(RequestError::Invalid {
                    field: "pr",
                    problem: "must be an integer from 1 to 5",
                })?,
        };
        let list = |key: &'static str| -> Result<Vec<String>, RequestError> {
            match b.get(key) {
                None => Ok(Vec::new()),
                Some(_) => b
                    .strs(key)
                    .map(|v| v.into_iter().map(str::to_owned).collect())
                    .ok_or(RequestError::Invalid {
                        field: key,
                        problem: "must be a list of strings",
                    }),
            }
        };
        let id = match b.get("i") {
            None => None,
            Some(v) => Some(v.as_str().map(str::to_owned).ok_or(RequestError::Invalid {
                field: "i",
                problem: "must be a string or number",
            })?),
        };
        Ok(Request {
            id,
            objective: objective.to_owned(),
            priority,
            deps: list("d")?,
            experts: list("exp")?,
        })
    }
}
