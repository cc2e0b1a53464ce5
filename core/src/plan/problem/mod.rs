//! Planning problems as real model graphs pose them: aliases (views, in-place writes,
//! sub-buffers), contiguous groups, lifetimes from a dependency graph with parallel streams,
//! pinned offsets, and memory spaces with capacities.
//!
//! The [`Buffer`](super::Buffer) problem is the interval problem MiniMalloc takes; a
//! [`Problem`] is a superset of it. [`solve`] turns it into a [`Layout`] (a space and an offset
//! for every buffer, an arena for every space); [`check_layout`] checks any layout against
//! every constraint, sharing no code with the solver; [`problem_lower_bound`] is a bound valid
//! for every constraint kind. The file format these come from is in `docs/plan-format.md`.
//!
//! ```
//! use tagalloc::plan::{check_layout, solve, Alias, Item, Lifetimes, Problem, SolveOptions};
//!
//! // conv writes y; relu overwrites y in place (z); flatten views z (f).
//! let problem = Problem {
//!     items: vec![
//!         Item::new(64),                                   // x, the input
//!         Item::new(256),                                  // y = conv(x)
//!         Item::new(256).with_alias(Alias::write(1, 0)),   // z = relu(y), in place
//!         Item::new(256).with_alias(Alias::view(2, 0)),    // f = flatten(z)
//!         Item::new(32),                                   // g = gemm(f)
//!     ],
//!     lifetimes: Lifetimes::Intervals(vec![(0, 1), (0, 2), (1, 3), (2, 4), (3, 4)]),
//!     ..Problem::default()
//! };
//! let solved = solve(&problem, &SolveOptions::default(), &mut || false)?;
//! check_layout(&problem, &solved.layout)?;
//! assert_eq!(solved.layout.offsets[2], solved.layout.offsets[1]); // z is y's memory
//! assert_eq!(solved.layout.arenas, vec![256 + 64]);
//! assert!(solved.optimal);
//! # Ok::<(), tagalloc::plan::ProblemError>(())
//! ```

mod arena;
mod arrange;
mod bound;
mod check;
mod error;
mod improve;
mod reach;
mod rectangles;
mod solve;
mod units;

use alloc::vec::Vec;

pub use arena::{ArenaError, PlannedArena};
pub use arrange::{arrange, Fit, Objects, Strategy, StrategyOrder};
pub use bound::problem_lower_bound;
pub use check::check_layout;
pub use error::ProblemError;
pub use rectangles::Rectangles;
pub use solve::{solve, Method, SolveOptions, Solved};

/// A planning problem: the buffers (`items`), when each is live, and the constraints on where
/// each may go. Plain data; every function that takes one checks it first and refuses it with
/// a [`ProblemError`] naming the buffer, node or group at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The buffers; their indices name them everywhere else.
    pub items: Vec<Item>,
    /// When each buffer is live.
    pub lifetimes: Lifetimes,
    /// Contiguous groups.
    pub groups: Vec<Group>,
    /// Memory spaces in order of preference; at least one.
    pub spaces: Vec<Space>,
}

impl Default for Problem {
    /// No buffers, interval lifetimes, one space without a capacity.
    fn default() -> Self {
        Problem {
            items: Vec::new(),
            lifetimes: Lifetimes::Intervals(Vec::new()),
            groups: Vec::new(),
            spaces: alloc::vec![Space::default()],
        }
    }
}

/// One buffer: its bytes, and where it may go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// Bytes.
    pub size: u64,
    /// Its offset is a multiple of this power of two.
    pub align: u64,
    /// A fixed offset in its space (`None`: the planner chooses).
    pub pinned: Option<u64>,
    /// The spaces it may go in (indices into [`Problem::spaces`]), in order of preference;
    /// `None`: all, in the problem's order.
    pub spaces: Option<Vec<u32>>,
    /// It is another buffer's memory.
    pub alias: Option<Alias>,
}

impl Item {
    /// A buffer of `size` bytes, alignment 1, placed freely in any space.
    pub const fn new(size: u64) -> Item {
        Item {
            size,
            align: 1,
            pinned: None,
            spaces: None,
            alias: None,
        }
    }

    /// The same with its offset a multiple of `align`.
    pub fn with_align(self, align: u64) -> Item {
        Item { align, ..self }
    }

    /// The same pinned at `offset`.
    pub fn pinned_at(self, offset: u64) -> Item {
        Item {
            pinned: Some(offset),
            ..self
        }
    }

    /// The same, allowed only in `spaces`, in that order of preference.
    pub fn in_spaces(self, spaces: Vec<u32>) -> Item {
        Item {
            spaces: Some(spaces),
            ..self
        }
    }

    /// The same as an alias.
    pub fn with_alias(self, alias: Alias) -> Item {
        Item {
            alias: Some(alias),
            ..self
        }
    }
}

/// A buffer that is the bytes `[offset, offset + size)` of buffer `of`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The buffer it is part of.
    pub of: usize,
    /// Where in it.
    pub offset: u64,
    /// `true`: its producer writes nothing, its bytes hold `of`'s data (a reshape). `false`:
    /// its producer overwrites those bytes (an in-place operation), which must then no longer
    /// be read as `of`'s data.
    pub view: bool,
}

impl Alias {
    /// An in-place write over `of` at `offset`.
    pub const fn write(of: usize, offset: u64) -> Alias {
        Alias {
            of,
            offset,
            view: false,
        }
    }

    /// A view of `of` at `offset`.
    pub const fn view(of: usize, offset: u64) -> Alias {
        Alias {
            of,
            offset,
            view: true,
        }
    }
}

/// When buffers are live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lifetimes {
    /// Buffer `i` is live over `[start, end)` of one sequential order of steps.
    Intervals(Vec<(u64, u64)>),
    /// Lifetimes from a dependency graph: two buffers may share bytes only when a path orders
    /// one's last use before the other's write.
    Graph(Graph),
}

/// A dependency graph of nodes on streams, and each buffer's producer and consumers.
///
/// Paths: a buffer's producer to each of its consumers, `edges`, and each stream's nodes in
/// index order. Buffer `a` is *finished before* buffer `b` when `b` has a producer `p`, `a`
/// is not an output, and every consumer of `a` (its producer when it has none; nothing for a
/// graph input without consumers) reaches `p` by a non-empty path. Two buffers conflict when
/// neither is finished before the other.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Graph {
    /// The stream of each node.
    pub streams: Vec<u32>,
    /// Extra dependencies `(before, after)`.
    pub edges: Vec<(usize, usize)>,
    /// Each buffer's producer and consumers.
    pub uses: Vec<Uses>,
}

/// Who writes and reads one buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Uses {
    /// The node writing it; `None`: a graph input, live from the start.
    pub producer: Option<usize>,
    /// The nodes reading it.
    pub consumers: Vec<usize>,
    /// Live to the end.
    pub output: bool,
}

/// Buffers laid out back to back in `members`' order, each at its first aligned offset at
/// least `gap` bytes past the end of the one before; each keeps its own lifetime.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Group {
    /// The members, in layout order.
    pub members: Vec<usize>,
    /// Bytes left free between two members.
    pub gap: u64,
}

/// A memory space: its own arena from offset 0, with an optional capacity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Space {
    /// The most bytes its arena may take (`None`: no limit).
    pub capacity: Option<u64>,
}

/// Where every buffer went.
///
/// Invariant (of the layouts [`solve`] returns; [`check_layout`] checks any): `spaces[i]` and
/// `offsets[i]` are buffer `i`'s space and offset, and `arenas[s]` is the end of the highest
/// buffer in space `s` (0 if none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Each buffer's space.
    pub spaces: Vec<u32>,
    /// Each buffer's offset in its space.
    pub offsets: Vec<u64>,
    /// Each space's arena: the end of its highest buffer.
    pub arenas: Vec<u64>,
}

impl Layout {
    /// The sum of the arenas, saturating: arenas in several spaces may each fit a `u64` and
    /// their sum not (no memory is that large; such a total reads as `u64::MAX`).
    pub fn total(&self) -> u64 {
        self.arenas.iter().fold(0, |t, &a| t.saturating_add(a))
    }
}
