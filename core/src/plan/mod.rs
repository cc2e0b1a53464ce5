//! Static memory planning: offsets in one arena for buffers whose lifetimes are known in
//! advance (the tensors of a compiled graph, the allocations of a recorded trace), so that
//! buffers live at the same time never share a byte and the arena is as small as possible.
//!
//! This is the planning that MindSpore's SOMAS, Paddle's liveness-based reuse and NNTrainer's
//! shared tensors do before a graph runs; the exact search is after MiniMalloc (Moffitt, ASPLOS
//! 2023). Everything here is `no_std` with `alloc`, and has no clock: time budgets come from
//! the caller through a [`Monitor`].
//!
//! - [`Buffer`] (size, lifetime `[start, end)`, alignment) in, [`Plan`] (offsets, arena) out.
//! - [`lower_bound`]: the most bytes live at one moment; no arena is smaller.
//! - [`validate`]: checks any plan (alignment, no overlap between buffers live together, the
//!   arena), sharing no code with the solvers.
//! - Solvers: [`greedy_by_size`] (TensorFlow Lite's), [`greedy_by_breadth`] (the crowded
//!   moments first), [`greedy_by_peak`] (the peak moment's buffers stacked first), and [`search`], a branch and bound over canonical placements that proves
//!   optimality when it can and otherwise returns the best plan found in its budget.
//!
//! ```
//! use tagalloc::plan::{self, Buffer, SearchOptions};
//!
//! // Three steps of a graph: a feeds b, b feeds c, and a stays live for a skip connection.
//! let buffers = [
//!     Buffer::new(0, 64, 0, 3), // a
//!     Buffer::new(1, 32, 1, 2), // b
//!     Buffer::new(2, 32, 2, 3), // c
//! ];
//! let greedy = plan::greedy_by_size(&buffers)?;
//! plan::validate(&buffers, &greedy)?;
//! let best = plan::search(&buffers, &SearchOptions::default(), &mut || false)?;
//! plan::validate(&buffers, &best.plan)?;
//! assert_eq!(best.plan.arena, 96); // b and c share the bytes above a
//! assert!(best.optimal);
//! # Ok::<(), plan::PlanError>(())
//! ```

mod bound;
mod buffer;
mod error;
mod greedy;
mod monitor;
pub(crate) mod place;
mod problem;
mod search;
mod sweep;
mod validate;

pub use bound::lower_bound;
pub use buffer::{Buffer, Plan};
pub use error::PlanError;
pub use greedy::{greedy_by_breadth, greedy_by_peak, greedy_by_size};
pub use monitor::Monitor;
pub use problem::{
    arrange, check_layout, problem_lower_bound, solve, Alias, ArenaError, Fit, Graph, Group, Item,
    Layout, Lifetimes, Method, Objects, PlannedArena, Problem, ProblemError, Rectangles,
    SolveOptions, Solved, Space, Strategy, StrategyOrder, Uses,
};
pub use search::{search, SearchOptions, Solution};
pub use validate::validate;
