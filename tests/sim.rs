//! Integration tests for the simulated delegate.
