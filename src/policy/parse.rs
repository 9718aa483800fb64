//! Parsing policy files (TOML) strictly, keeping line numbers.
