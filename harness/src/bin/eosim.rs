//! `eosim`: run scenarios in simulation. Build it with `cargo xtask sim`, which sets
//! `--cfg madsim`; see `eosim --help` and the README for subcommands and exit codes.

/// mimalloc instead of the system allocator: a simulated run allocates and frees small
/// objects per record, request and timer, and glibc's malloc spent a quarter of the CPU in
/// its free lists (`reports/speed-history.md`). Allocation never reaches a run's behaviour,
/// so the histories and their hashes are the same with either.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    eosim::cli::main()
}
