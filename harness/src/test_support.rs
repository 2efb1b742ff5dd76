//! Helpers of the crate's unit tests.

/// Runs `f` to completion: on madsim's runtime under `--cfg madsim` (where a Tokio runtime
/// cannot be built), on a current-thread Tokio runtime otherwise.
pub(crate) fn block_on<F: std::future::Future>(f: F) -> F::Output {
    #[cfg(madsim)]
    {
        madsim::runtime::Runtime::new().block_on(f)
    }
    #[cfg(not(madsim))]
    {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
            .block_on(f)
    }
}
