//! LLMX v1.0 (seed `003_…`, "LLMX Protocol Specification v1.0"): a strict, bounded reader,
//! a writer that round-trips, the blocks a bridge reads and answers with, and a per-sender
//! sequence checker.
//!
//! - [`parse`] / [`parse_with`]: text → [`Message`] `{ header, blocks }`, or a [`ParseError`]
//!   at a 1-based line:column (`parse error at L:C: message`). Bounded by [`Limits`]: input
//!   bytes, blocks, nesting depth, string length, values per message; a bound crossed is a
//!   `ParseError`, never a panic; recursion is at most [`MAX_DEPTH`] deep.
//! - [`write()`]: [`Message`] → text; `parse(&write(&m)) == Ok(m)` for every parsed message.
//! - [`Block`] helpers: by type ([`Message::blocks_of`], [`kind`]), fields as text or integer,
//!   the answer blocks ([`Block::obs`], [`Block::res`], [`Block::end`], [`Block::blk`],
//!   [`Block::nack`], [`Block::warn_unknown`]) and [`Request`] for `REQ`.
//! - [`SeqChecker`]: strictly increasing `s` per `f`, capacity-bounded, least recently seen
//!   sender evicted.
//!
//! # Where the seed is ambiguous, and what this crate reads
//!
//! 1. **Bare values.** Appendix A's `value` has no bare words, yet every example uses them
//!    (`f:Claude`, `s:OK`, `op:edit`, `ai:A1`). Read as [`Value::Symbol`]: an ASCII letter or
//!    `_`, then letters, digits, `_ - . /`. `p:src/api.ts` (§4.1) contains `:` and must be
//!    quoted, as all the examples do; `^/src`, `#L42` likewise.
//! 2. **Enums.** §2.3 lists `A|B|C` as a value type: read as [`Value::Enum`], two or more bare
//!    words joined by `|` with no spaces. `s:C` (one member) is a plain symbol.
//! 3. **Tuples.** `PLAN:[(i:1,t:"…",s:C),…]` is outside Appendix A: `(…)` is read as
//!    [`Value::Tuple`], `key:value` pairs like a map, allowed wherever a value is.
//! 4. **Whitespace.** §2.2 allows it between blocks; the grammar has none inside. Spaces, tabs,
//!    CR and LF are skipped between any two tokens (LLMs pretty-print), but not inside a bare
//!    word, number or enum. No comments.
//! 5. **Strings.** No escapes are defined: JSON's are read (`\" \\ \/ \b \f \n \r \t \uXXXX`,
//!    surrogate pairs joined, lone surrogates refused), raw control characters (below U+0020)
//!    refused. The writer escapes `"`, `\` and control characters.
//! 6. **Numbers** follow Appendix A exactly (`-?digit+(.digit+)?`: no exponent, no `+`, `1.`
//!    refused; leading zeros allowed as the grammar allows them) and are kept as text
//!    ([`Number`]), so no precision is lost and the writer gives back the same digits.
//! 7. **Keys and block types** follow Appendix A (`letter {letter | digit | _}`), upper case
//!    included although §2.2 says field names are lower case. A key repeated in one map or
//!    tuple is refused. Any block type is read; [`Message::unknown_blocks`] lists those
//!    neither standard nor `X_` (the §7.3 WARN is the caller's).
//! 8. **HEADER.** Required, first, and only first (a second `HEADER` is refused); a map with
//!    `f`, `t`, `s` required and `b` optional (§3.1). `f`, `t`, `b` may be a string, a bare
//!    word or a number (read as its text) but not empty; `s` must be an integer ≥ 0 fitting
//!    `u64`; other fields must be `x_…` (kept in [`Header::extra`]), anything else is refused.
//!    The schema lines of §3 (`b?:BATCH_ID`) are notation, not messages, and do not parse.
//! 9. **Blocks after the header.** §2.1 says "one or more", the grammar `{ block }` zero or
//!    more: the reader takes zero (a bridge refuses a message with nothing to do).
//! 10. **Required fields per block** (§3 tables) are not checked by the reader: the seed's
//!     own `OBS:{ai:A2,s:ERR,e:"…"}` lacks the "required" `c`. [`Request::from_block`] checks
//!     `REQ` (`o`; `pr` 1–5) and gives the §7.2 message `missing required field 'o' in REQ`.
//! 11. **Sequence monotonicity** (§3.1 "monotonic"): strictly increasing per sender; a repeat
//!     is refused as a replay.
//! 12. **Line:column**: lines split at LF only; columns count Unicode characters from 1.
//!
//! Depends on nothing of the workspace (serde_json only for [`Value::to_json`]).

mod blocks;
mod read;
mod seq;
mod value;
mod write;

pub use blocks::{kind, Request, RequestError};
pub use read::{
    parse, parse_with, Limits, ParseError, Parsed, Position, MAX_BLOCKS, MAX_DEPTH,
    MAX_INPUT_BYTES, MAX_STRING_BYTES, MAX_VALUES,
};
pub use seq::{SeqChecker, SeqError, MAX_SENDER_BYTES};
pub use value::{is_ident, is_symbol, Block, Body, Fields, Header, Message, Number, Value};
pub use write::{string as write_string, write, write_block};
