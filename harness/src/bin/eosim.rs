//! `eosim`: run scenarios in simulation. Build it with `cargo xtask sim`, which sets
//! `--cfg madsim`; see `eosim --help` and the README for subcommands and exit codes.

fn main() -> std::process::ExitCode {
    eosim::cli::main()
}
