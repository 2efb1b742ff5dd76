//! Simulated clients.
