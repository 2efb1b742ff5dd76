//! Benches live in benches/.
