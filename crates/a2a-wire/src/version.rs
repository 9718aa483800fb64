//! Protocol versions: the `A2A-Version` header and the two wire dialects it selects.

use std::fmt;

/// The two shapes of A2A JSON this crate reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// A2A 1.0: ProtoJSON of `a2a.proto` (camelCase fields, `TASK_STATE_…` enum names,
    /// one-of wrappers such as `{"statusUpdate": …}`), PascalCase method names.
    V1,
    /// A2A 0.3: JSON Schema shapes with `kind` discriminators (`"kind": "task"`), lower-case
    /// states (`input-required`), `message/send`-style method names.
    V03,
}

/// A protocol version `Major.Minor` (the patch part is ignored: spec §3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtocolVersion {
    pub major: u32,
    pub minor: u32,
}

impl ProtocolVersion {
    pub const V1_0: ProtocolVersion = ProtocolVersion { major: 1, minor: 0 };
    pub const V0_3: ProtocolVersion = ProtocolVersion { major: 0, minor: 3 };

    /// Reads an `A2A-Version` header value. Absent, empty or blank means 0.3 (spec §3.6.2;
    /// the SDK's `validate_version` does the same). `1`, `1.0` and `1.0.2` are 1.0. `None` for
    /// anything that is not a version (`"v1"`, `"1.x"`), which the caller answers with
    /// VersionNotSupported (-32009).
    pub fn from_header(value: Option<&str>) -> Option<ProtocolVersion> {
        let v = value.map(str::trim).unwrap_or_default();
        if v.is_empty() {
            return Some(ProtocolVersion::V0_3);
        }
        ProtocolVersion::parse(v)
    }

    /// Parses `Major[.Minor[.Patch]]` (as `protocolVersion` on cards: `"1.0"`, `"0.3.0"`).
    pub fn parse(v: &str) -> Option<ProtocolVersion> {
        let mut parts = v.trim().split('.');
        let num = |p: Option<&str>| -> Option<u32> {
            match p {
                Some(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
                _ => None,
            }
        };
        let major = num(parts.next())?;
        let minor = match parts.next() {
            None => 0,
            p => num(p)?,
        };
        match parts.next() {
            None => {}
            p => {
                num(p)?;
            }
        }
        if parts.next().is_some() {
            return None;
        }
        Some(ProtocolVersion { major, minor })
    }

    /// The dialect a peer of this version speaks, as the SDK decides it: major 1 is v1.0,
    /// major 0 is v0.3 (`validate_version` compares major versions only, so a `0.2` client
    /// reaches the v0.3 handlers and a `1.1` client the v1.0 ones). `None` for any other
    /// major version. The spec asks for a `Major.Minor` match (§3.6.2); a stricter caller
    /// compares [`ProtocolVersion::minor`] too.
    pub fn dialect(self) -> Option<Dialect> {
        match self.major {
            1 => Some(Dialect::V1),
            0 => Some(Dialect::V03),
            _ => None,
        }
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values() {
        let v = ProtocolVersion::from_header;
        assert_eq!(v(None), Some(ProtocolVersion::V0_3));
        assert_eq!(v(Some("")), Some(ProtocolVersion::V0_3));
        assert_eq!(v(Some("  ")), Some(ProtocolVersion::V0_3));
        assert_eq!(v(Some("1.0")), Some(ProtocolVersion::V1_0));
        assert_eq!(v(Some(" 1.0.2 ")), Some(ProtocolVersion::V1_0));
        assert_eq!(v(Some("1")), Some(ProtocolVersion::V1_0));
        assert_eq!(v(Some("0.3.0")), Some(ProtocolVersion::V0_3));
        assert_eq!(v(Some("2.1")), Some(ProtocolVersion { major: 2, minor: 1 }));
        for bad in ["v1", "1.x", "1.", ".1", "1.0.0.0", "-1", "1,0", "١.٠"] {
            assert_eq!(v(Some(bad)), None, "{bad}");
        }
        assert_eq!(v(Some("99999999999")), None);
    }

    #[test]
    fn dialects() {
        assert_eq!(ProtocolVersion::V1_0.dialect(), Some(Dialect::V1));
        assert_eq!(ProtocolVersion::V0_3.dialect(), Some(Dialect::V03));
        assert_eq!(ProtocolVersion { major: 2, minor: 0 }.dialect(), None);
        assert_eq!(ProtocolVersion::V1_0.to_string(), "1.0");
    }
}
