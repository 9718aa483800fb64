//! The message model: [`Message`] = [`Header`] + [`Block`]s, each block a map or a list of
//! [`Value`]s.

/// Ordered `key:value` pairs of a map or a tuple (source order kept; keys unique).
pub type Fields = Vec<(String, Value)>;

/// One LLMX value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `"text"` (escapes decoded).
    Str(String),
    /// `42`, `-1.5`: kept as its source text, so the writer gives back exactly what was read.
    Number(Number),
    /// `true` / `false`.
    Bool(bool),
    /// A bare word: `Claude`, `OK`, `B1`, `SECURITY-EXPERT`, `src/api.ts`.
    Symbol(String),
    /// `P|I|C|X`: two or more bare words joined by `|`.
    Enum(Vec<String>),
    /// `[a,b,c]`.
    List(Vec<Value>),
    /// `(i:1,t:"task",s:C)`: the step tuples of `PLAN`.
    Tuple(Fields),
    /// `{k:v,…}`.
    Map(Fields),
}

impl Value {
    /// A quoted string value.
    pub fn str(s: impl Into<String>) -> Self {
        Value::Str(s.into())
    }

    /// An integer value.
    pub fn int(n: i64) -> Self {
        Value::Number(Number::from(n))
    }

    /// A list of quoted strings.
    pub fn strs<S: Into<String>>(items: impl IntoIterator<Item = S>) -> Self {
        Value::List(items.into_iter().map(|s| Value::Str(s.into())).collect())
    }

    /// The text of a string, a bare word or a number (`f:Claude` and `f:"Claude"` read alike).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Symbol(s) => Some(s),
            Value::Number(n) => Some(n.as_str()),
            _ => None,
        }
    }

    /// An integer number (no fraction), or an integer written as a string or bare word.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Number(n) => n.as_i64(),
            Value::Str(s) | Value::Symbol(s) => Number::parse(s).and_then(|n| n.as_i64()),
            _ => None,
        }
    }

    /// The members of a list.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(v) => Some(v),
            _ => None,
        }
    }

    /// The fields of a map or a tuple.
    pub fn as_fields(&self) -> Option<&[(String, Value)]> {
        match self {
            Value::Map(f) | Value::Tuple(f) => Some(f),
            _ => None,
        }
    }

    /// A field of a map or tuple by key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_fields().and_then(|f| field(f, key))
    }

    /// The value as JSON, for handing to code that speaks JSON: strings and bare words become
    /// strings, an enum its `A|B` text, tuples and maps objects, numbers JSON numbers (a
    /// number JSON cannot hold, e.g. 400 digits, becomes its text).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Str(s) | Value::Symbol(s) => J::String(s.clone()),
            Value::Number(n) => serde_json::from_str::<serde_json::Number>(n.as_str())
                .ok()
                .filter(|j| j.as_f64().is_some_and(f64::is_finite))
                .map_or_else(|| J::String(n.as_str().to_owned()), J::Number),
            Value::Bool(b) => J::Bool(*b),
            Value::Enum(v) => J::String(v.join("|")),
            Value::List(v) => J::Array(v.iter().map(Value::to_json).collect()),
            Value::Tuple(f) | Value::Map(f) => J::Object(
                f.iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect::<serde_json::Map<_, _>>(),
            ),
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::int(n)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

/// The first field named `key`.
pub(crate) fn field<'v>(fields: &'v [(String, Value)], key: &str) -> Option<&'v Value> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A number in the grammar's form `-?digit+(.digit+)?`, kept as text (no precision lost, no
/// exponent, never NaN or infinite).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Number(String);

impl Number {
    /// Checks `text` against the grammar's number form.
    pub fn parse(text: &str) -> Option<Number> {
        is_number(text.as_bytes()).then(|| Number(text.to_owned()))
    }

    /// A finite float, written without exponent (`None` for NaN and infinities).
    pub fn from_f64(x: f64) -> Option<Number> {
        if !x.is_finite() {
            return None;
        }
        let text = format!("{x}");
        Number::parse(&text)
    }

    /// The number's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The number as an `i64`, if it has no fraction and fits.
    pub fn as_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }

    /// The number as a `u64`, if it has no fraction, no sign and fits.
    pub fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }

    /// The number as an `f64` (nearest; may be infinite for 400-digit numbers).
    pub fn as_f64(&self) -> Option<f64> {
        self.0.parse().ok()
    }
}

impl From<i64> for Number {
    fn from(n: i64) -> Self {
        Number(n.to_string())
    }
}

impl From<u64> for Number {
    fn from(n: u64) -> Self {
        Number(n.to_string())
    }
}

impl std::fmt::Display for Number {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `-?digit+(.digit+)?`
pub(crate) fn is_number(b: &[u8]) -> bool {
    let b = b.strip_prefix(b"-").unwrap_or(b);
    let (int, frac) = match b.iter().position(|&c| c == b'.') {
        Some(p) => (&b[..p], Some(&b[p + 1..])),
        None => (b, None),
    };
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    digits(int) && frac.is_none_or(digits)
}

/// A key or block type: `letter { letter | digit | "_" }` (ASCII).
pub fn is_ident(s: &str) -> bool {
    let b = s.as_bytes();
    b.first().is_some_and(u8::is_ascii_alphabetic)
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// Whether `c` may continue a bare word.
pub(crate) fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'/')
}

/// A bare word the reader reads back as a [`Value::Symbol`]: starts with an ASCII letter or
/// `_`, goes on with letters, digits, `_ - . /`, and is not `true` or `false`.
pub fn is_symbol(s: &str) -> bool {
    is_word(s) && s != "true" && s != "false"
}

/// A bare word, `true`/`false` included (the members of an enum).
pub(crate) fn is_word(s: &str) -> bool {
    let b = s.as_bytes();
    b.first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && b.iter().all(|&c| is_word_byte(c))
}

/// A block's body: the grammar allows a map or a list (`PLAN:[…]`).
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// `TYPE:{k:v,…}`
    Map(Fields),
    /// `TYPE:[v,…]`
    List(Vec<Value>),
}

/// One block: `TYPE:{…}` or `TYPE:[…]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Block {
    /// The block type as written (`REQ`, `PLAN`, `X_TRACE`, …).
    pub kind: String,
    /// Its body.
    pub body: Body,
}

/// `HEADER:{f:…,t:…,s:…[,b:…]}` with its `x_` fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// `f`: the sender.
    pub from: String,
    /// `t`: the target, or `ALL`.
    pub to: String,
    /// `s`: the sender's sequence number.
    pub seq: u64,
    /// `b`: the batch id, if any.
    pub batch: Option<String>,
    /// `x_…` fields, in source order.
    pub extra: Fields,
}

impl Header {
    /// A header without batch or extra fields.
    pub fn new(from: impl Into<String>, to: impl Into<String>, seq: u64) -> Self {
        Header {
            from: from.into(),
            to: to.into(),
            seq,
            batch: None,
            extra: Vec::new(),
        }
    }

    /// The header of an answer to this one: from `from` (the gateway) to this sender, with
    /// the answerer's own sequence number `seq`, in the same batch.
    pub fn reply(&self, from: impl Into<String>, seq: u64) -> Header {
        Header::new(from, self.from.clone(), seq).with_batch(self.batch.clone())
    }

    /// The same header with batch id `b`.
    pub fn with_batch(mut self, batch: Option<String>) -> Self {
        self.batch = batch;
        self
    }
}

/// A whole message: the header, then the blocks in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The required first block.
    pub header: Header,
    /// The other blocks, in order (`X_` and unknown types included).
    pub blocks: Vec<Block>,
}
