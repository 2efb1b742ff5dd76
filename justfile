# eosim's recipes: each is one `cargo xtask` call (the scripts themselves are Rust, in xtask/).

# The scenario catalogue in simulation, ending in a report (reports/latest/).
sim *args:
    cargo xtask sim {{args}}

# Ordinary tests, then the simulation tests under --cfg madsim.
test:
    cargo xtask test

# Criterion benches under --cfg madsim.
bench *args:
    cargo xtask bench {{args}}

# Print the latest report's summary.
report:
    cargo xtask report

# The whole catalogue over many seeds, in release mode.
chaos *args:
    cargo xtask chaos {{args}}
