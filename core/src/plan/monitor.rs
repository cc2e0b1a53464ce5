//! The caller's say in a running search: when to stop, and each better plan as it is found.

/// What the search reports to, and asks of, its caller while it runs. The core has no clock,
/// so a time budget is the caller's: a closure `FnMut() -> bool` is a monitor that answers
/// [`Monitor::stop`].
///
/// ```
/// use std::time::{Duration, Instant};
/// use tagalloc::plan::{search, Buffer, Monitor, SearchOptions};
///
/// /// Stops at a deadline and keeps every improvement.
/// struct Log {
///     deadline: Instant,
///     arenas: Vec<u64>,
/// }
///
/// impl Monitor for Log {
///     fn stop(&mut self) -> bool {
///         Instant::now() >= self.deadline
///     }
///     fn improved(&mut self, arena: u64, _lower_bound: u64) {
///         self.arenas.push(arena);
///     }
/// }
///
/// let buffers = [Buffer::new(0, 3, 0, 2), Buffer::new(1, 4, 1, 3), Buffer::new(2, 3, 2, 4)];
/// let mut log = Log { deadline: Instant::now() + Duration::from_secs(1), arenas: Vec::new() };
/// let found = search(&buffers, &SearchOptions::default(), &mut log)?;
/// assert_eq!(log.arenas.last(), Some(&found.plan.arena));
/// # Ok::<(), tagalloc::plan::PlanError>(())
/// ```
pub trait Monitor {
    /// Whether to stop now and return the best plan found. Asked every few hundred nodes.
    fn stop(&mut self) -> bool;

    /// A better plan was found: its arena, and the proven lower bound at that point.
    fn improved(&mut self, arena: u64, lower_bound: u64) {
        let _ = (arena, lower_bound);
    }
}

impl<F: FnMut() -> bool> Monitor for F {
    fn stop(&mut self) -> bool {
        self()
    }
}
