//! Blocking on a future from the runner's synchronous code (the real clients are async).

/// Runs `f` on a fresh current-thread runtime.
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    Ok(runtime.block_on(f))
}
