//! Serde helpers shared by the wire types: explicit `null`, empty-value skipping, `kind` tags.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// JSON object: metadata, `Struct` fields, fields kept for pass-through.
pub type Map = serde_json::Map<String, Value>;

/// Deserializes a field that is present as `Some`, even when it is `null`: `"data": null` is a
/// part whose data is JSON null (a `google.protobuf.Value`), not a missing field. Use with
/// `#[serde(default)]` so an absent field stays `None`.
pub(crate) fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

/// A zero-sized `kind` tag of a v0.3 object: writes its one value, reads only that value (or
/// nothing, with `#[serde(default)]`: peers that omit `kind` are read as the SDK reads them).
macro_rules! kind_tag {
    ($(#[$doc:meta])* $name:ident = $value:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name;

        impl $name {
            /// The tag's wire value.
            pub const VALUE: &'static str = $value;
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($value)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                if s == $value {
                    Ok($name)
                } else {
                    Err(serde::de::Error::invalid_value(
                        serde::de::Unexpected::Str(&s),
                        &concat!("\"", $value, "\""),
                    ))
                }
            }
        }
    };
}
pub(crate) use kind_tag;

/// A protobuf enum as ProtoJSON writes it (its value name) and reads it (the name or the
/// number). A name this version does not know is kept in `Unrecognized` so that a newer
/// peer's value passes through instead of failing the whole object; its default (value 0,
/// `…_UNSPECIFIED`) is what ProtoJSON omits.
macro_rules! proto_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = ($num:literal, $wire:literal),)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            #[default]
            $($(#[$vdoc])* $variant,)+
            /// A value name this version does not know, kept as sent.
            Unrecognized(String),
        }

        impl $name {
            /// The ProtoJSON name.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)+
                    $name::Unrecognized(s) => s,
                }
            }

            /// The value for a ProtoJSON name (`Unrecognized` for an unknown one).
            pub fn from_name(name: &str) -> $name {
                match name {
                    $($wire => $name::$variant,)+
                    other => $name::Unrecognized(other.to_owned()),
                }
            }

            /// The value for a protobuf enum number; `None` for an unknown number.
            pub fn from_number(n: i64) -> Option<$name> {
                match n {
                    $($num => Some($name::$variant),)+
                    _ => None,
                }
            }

            /// Whether this is value 0, which ProtoJSON leaves out.
            pub fn is_unspecified(&self) -> bool {
                *self == $name::default()
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match serde_json::Value::deserialize(d)? {
                    serde_json::Value::String(s) => Ok($name::from_name(&s)),
                    serde_json::Value::Number(n) => n
                        .as_i64()
                        .and_then($name::from_number)
                        .ok_or_else(|| serde::de::Error::custom(format_args!(
                            "unknown {} number {n}", stringify!($name)
                        ))),
                    _ => Err(serde::de::Error::custom(concat!(
                        stringify!($name), " must be a string or a number"
                    ))),
                }
            }
        }
    };
}
pub(crate) use proto_enum;
