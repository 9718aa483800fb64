//! LADP (LLM Autonomous Dialogue Protocol, seed `004_…`, v1.9) s-expressions.
//!
//! - [`read`]: a strict reader, iterative (no recursion), bounded by [`Limits`]: at most
//!   [`MAX_INPUT_BYTES`] of input (§14), [`MAX_DEPTH`] nested lists, [`MAX_NODES`] atoms and
//!   lists. Errors carry a 1-based line and column ([`ParseError`]). Never panics.
//! - [`Sexp`]: the tree; [`Sexp::write`] writes one line that reads back equal.
//! - [`Msg`], [`Meta`], [`TaskInit`]: the `(msg …)` envelope (§3), `(meta …)` forms, the
//!   `task-init` fields (§8); [`Reply`] builds the gateway's answers.
//!
//! # Lexical syntax
//!
//! - Whitespace is Unicode whitespace; `;` starts a comment to the end of the line.
//! - Strings: `"…"`, escapes `\" \\ \n \r \t \u{1–6 hex}`; raw newlines and tabs allowed;
//!   other raw control characters and unknown escapes are errors.
//! - Numbers: a token shaped as an integer (`[+-]digits`, must fit `i64`), a rational
//!   (`[+-]digits/digits`, non-zero denominator, kept as written, not reduced) or a decimal
//!   (`1.5`, `2e-3`, `-1.5E+7`: a digit on each side of `.`, must be finite) is a number, and
//!   an error if out of range.
//! - Every other token is a symbol: any run of characters other than whitespace, control
//!   characters, `(`, `)`, `"` and `;` — so `∀ ∃ ∧ ∨ → ¬ ΔI β* ∂/∂ <msg-id> passed|failed
//!   reason? … >=0.9 2025-05-01T12:00:00Z` are all symbols.
//!
//! # Where the seed is ambiguous, and what this crate chose
//!
//! 1. **"64 kB"** (§14): read as 64 KiB = 65 536 bytes of UTF-8, counted before decoding.
//! 2. **Identifiers** (§4 `ASCII+Unicode symbol string`): any non-delimiter characters, as
//!    above; no `|…|` quoting and no `'` reader macro (the seed writes `passed|failed`
//!    meaning "one of", which reads here as one symbol). A string next to a token needs no
//!    space (`"low"|"high"` reads as three atoms).
//! 3. **Numbers** (§4 `integer | float | rational`): no syntax given. Only tokens wholly
//!    shaped as a number are numbers; `0.0–1.0` (the v1.9 meta template), `1.2.3` and an
//!    unquoted `2025-05-01T12:00:00Z` (§3 writes `deadline <ISO-8601-timestamp>` unquoted) are
//!    symbols, so a typo'd number is caught by the typed getter, naming its field. `3/4` is a
//!    rational, `∂/∂` a symbol; `1/0`, integers beyond `i64` and `1e999` are errors.
//! 4. **Templates vs messages**: the seed mixes placeholders (`<msg-id>`, `…`, `...`) into its
//!    examples; they read as symbols. The §3 envelope's `[optional fields: …]` and the §4 BNF
//!    are prose, not s-expressions.
//! 5. **Optional fields** (§3: `deadline <ISO>, quorum <0–1>, timeout <s>` in brackets): read
//!    as `(deadline …)`, `(quorum …)`, `(timeout …)` lists inside `(data …)`, like every other
//!    field; a field given twice is an error; unknown fields are ignored.
//! 6. **The envelope**: §3 has five parts; §6 and §13.4 show shorter ones (no `<epoch-ms>`, no
//!    recipient). [`Msg`] requires all five, `epoch-ms` a non-negative integer, `(data …)` last.
//!    Sender and recipient may be symbols or strings.
//! 7. **Message ids**: `<msg-id>` is referenced (`target-msg`, `reference`) but the envelope
//!    has no id field. The gateway's `synthesis` carries `(msg-id <id>)` in its data; the
//!    answers that follow reference it.
//! 8. **`deadline`**: RFC 3339; without an offset, or a date alone, taken as UTC.
//! 9. **`quorum`** (§3 `0.0–1.0`, §9 default 0.75): any number (integer, decimal, rational)
//!    in `0..=1`. **`timeout`**: seconds, any number, 0.001 to 86 400.
//! 10. **`meta`**: `(meta abort …)` / `(meta halt …)` have a kind symbol after `meta`,
//!     `(meta (uncertainty 0.2))` has none; [`Meta::kind`] is `None` then.
//! 11. **Answers the seed does not spell**: the status answer is `(msg status …
//!     (data (task-id "…") (phase <phase>)))`, the error answer `(msg error … (data (reason
//!     "…") (at "L:C")))`, `verify` and `vote` carry an extra `(agent <id>)` (the verifier),
//!     `reject-proposal` an `(attempt n)`, `integration-verified` its `support-rate` and
//!     `quorum`, `meta halt` a `(cancelled n)`.
//! 12. **Written size**: the cap is on what is read. Writing can lengthen a form (a raw
//!     newline in a string becomes `\n`, `1e15` becomes `1000000000000000.0`), so text written
//!     from a 64 KiB input may exceed 64 KiB; re-read it with a larger [`Limits::max_bytes`].
//! 13. **Line and column**: 1-based; columns count Unicode scalar values; only `\n` ends a line.
//!     An unclosed `(` is reported where it opens; an oversized input at 1:1.

#![forbid(unsafe_code)]

pub mod msg;
pub mod read;
pub mod sexp;

pub use msg::{
    Decision, Meta, Msg, MsgError, Outcome, Reply, TaskInit, DEFAULT_QUORUM, MAX_TIMEOUT_SECS,
    MIN_TIMEOUT_SECS,
};
pub use read::{
    parse_all, parse_bytes, parse_one, parse_with, Limits, ParseError, MAX_DEPTH,
    MAX_DEPTH_CEILING, MAX_INPUT_BYTES, MAX_NODES,
};
pub use sexp::{Decimal, Sexp, Sym};
