//! sim tests
