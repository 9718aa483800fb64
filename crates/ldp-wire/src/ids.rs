//! Protocol ids as their own types, so a session id cannot be passed where a task id or a
//! delegate id belongs. Each is a `String` on the wire (`#[serde(transparent)]`) and reads as
//! a `&str` (`Deref`), so logging, hashing and comparing stay as they were.

use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The text, taken out.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_owned())
            }
        }

        impl From<&String> for $name {
            fn from(s: &String) -> Self {
                $name(s.clone())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }
    };
}

id!(
    /// A session id: the gateway's (issued to a client) or a delegate's (an upstream session).
    SessionId
);
id!(
    /// A task id (chosen by the client; the gateway forwards it unchanged).
    TaskId
);
id!(
    /// A delegate's protocol id (its card's `delegate_id`; not the registry name an operator
    /// gives it).
    DelegateId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_plain_strings_on_the_wire() {
        let s = SessionId::from("s-1");
        assert_eq!(serde_json::to_string(&s).ok().as_deref(), Some("\"s-1\""));
        let t: TaskId = serde_json::from_str("\"t-1\"").unwrap_or_default();
        assert_eq!(t, "t-1");
        assert_eq!(&*t, "t-1");
    }
}
