//! Why a [`Problem`](super::Problem) or a [`Layout`](super::Layout) was refused.

use core::fmt;

/// A problem the planner cannot take, or a layout that breaks a constraint. Buffers, nodes and
/// groups are named by their index; a reader of a file maps them back to ids and lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProblemError {
    /// More buffers or nodes than the planner indexes, or sizes whose sum overflows `u64`.
    TooLarge,
    /// The problem has no memory space.
    NoSpace,
    /// The lifetimes describe a different number of buffers than there are.
    WrongLength {
        /// Buffers.
        items: usize,
        /// Lifetimes given.
        lifetimes: usize,
    },
    /// The buffer's interval is empty (`start >= end`).
    EmptyLifetime {
        /// The buffer.
        buffer: usize,
    },
    /// The buffer's alignment is not a power of two.
    BadAlign {
        /// The buffer.
        buffer: usize,
    },
    /// The buffer names a node, buffer or space index that does not exist.
    OutOfRange {
        /// The buffer.
        buffer: usize,
    },
    /// An edge names a node that does not exist.
    EdgeOutOfRange {
        /// The edge's index.
        edge: usize,
    },
    /// The dependency graph has a cycle through this node.
    GraphCycle {
        /// A node on the cycle.
        node: usize,
    },
    /// The buffer is an alias of itself, directly or through other aliases.
    AliasCycle {
        /// A buffer on the cycle.
        buffer: usize,
    },
    /// The alias ends past the end of its target.
    AliasTooLarge {
        /// The alias.
        buffer: usize,
    },
    /// The alias's offset from its tree's root is not a multiple of its alignment.
    AliasMisaligned {
        /// The alias.
        buffer: usize,
    },
    /// The alias has its own pinned offset or spaces (it has its target's).
    AliasPlacedApart {
        /// The alias.
        buffer: usize,
    },
    /// A writing alias overwrites bytes that `reader` still reads after `writer` is written,
    /// or the two writes are not ordered.
    AliasUnsafe {
        /// The buffer still read.
        reader: usize,
        /// The writing alias.
        writer: usize,
    },
    /// The pinned offset is not a multiple of the buffer's alignment (or of its group's).
    PinnedMisaligned {
        /// The buffer.
        buffer: usize,
    },
    /// Two pinned buffers share bytes while live.
    PinnedOverlap {
        /// One.
        first: usize,
        /// The other.
        second: usize,
    },
    /// The buffer is in two groups, or twice in one.
    InTwoGroups {
        /// The buffer.
        buffer: usize,
    },
    /// The problem fixes the buffer's offset twice (it is an alias of another group member,
    /// its alias tree has a member in another group, or two pinned members disagree).
    FixedTwice {
        /// The buffer.
        buffer: usize,
    },
    /// Two buffers of one group (or aliases of them) share bytes as laid out while live.
    GroupOverlap {
        /// One.
        first: usize,
        /// The other.
        second: usize,
    },
    /// No space is allowed to every buffer of the buffer's alias tree or group.
    NoCommonSpace {
        /// The buffer.
        buffer: usize,
    },
    /// No allowed space has room for the buffer (with its alias tree or group) under its
    /// capacity.
    NoRoom {
        /// The buffer.
        buffer: usize,
    },
    /// The graph problem is too large for the conflict bitsets (`nodes × buffers` bits past
    /// the limit in [`SolveOptions`](super::SolveOptions)).
    GraphTooLarge,
    /// Layout: a different number of spaces or offsets than buffers, or of arenas than spaces.
    LayoutLength,
    /// Layout: the buffer is in a space it may not use.
    WrongSpace {
        /// The buffer.
        buffer: usize,
    },
    /// Layout: the buffer's offset breaks its alignment, its pin, its alias or its group.
    Misplaced {
        /// The buffer.
        buffer: usize,
    },
    /// Layout: two buffers that conflict share bytes.
    Overlap {
        /// One.
        first: usize,
        /// The other.
        second: usize,
    },
    /// Layout: a space's arena is not the end of its highest buffer, or passes its capacity.
    ArenaMismatch {
        /// The space.
        space: usize,
    },
}

impl fmt::Display for ProblemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ProblemError::*;
        match *self {
            TooLarge => f.write_str("too many buffers or nodes, or sizes overflowing u64"),
            NoSpace => f.write_str("the problem has no memory space"),
            WrongLength { items, lifetimes } => {
                write!(f, "{lifetimes} lifetimes for {items} buffers")
            }
            EmptyLifetime { buffer } => write!(f, "buffer {buffer}: empty lifetime"),
            BadAlign { buffer } => write!(f, "buffer {buffer}: alignment not a power of two"),
            OutOfRange { buffer } => {
                write!(f, "buffer {buffer}: names a node, buffer or space that does not exist")
            }
            EdgeOutOfRange { edge } => write!(f, "edge {edge}: names a node that does not exist"),
            GraphCycle { node } => write!(f, "node {node}: on a dependency cycle"),
            AliasCycle { buffer } => write!(f, "buffer {buffer}: on an alias cycle"),
            AliasTooLarge { buffer } => {
                write!(f, "buffer {buffer}: alias ends past the end of its target")
            }
            AliasMisaligned { buffer } => write!(
                f,
                "buffer {buffer}: alias offset (from its tree's root) not a multiple of its alignment"
            ),
            AliasPlacedApart { buffer } => write!(
                f,
                "buffer {buffer}: an alias cannot have its own pinned offset or spaces"
            ),
            AliasUnsafe { reader, writer } => write!(
                f,
                "buffer {writer} overwrites the bytes of buffer {reader} while they are still read \
                 (or the two writes are not ordered)"
            ),
            PinnedMisaligned { buffer } => {
                write!(f, "buffer {buffer}: pinned offset breaks its alignment")
            }
            PinnedOverlap { first, second } => write!(
                f,
                "buffers {first} and {second}: pinned where they share bytes while live"
            ),
            InTwoGroups { buffer } => {
                write!(f, "buffer {buffer}: in two contiguous groups, or twice in one")
            }
            FixedTwice { buffer } => write!(
                f,
                "buffer {buffer}: its offset is fixed twice (alias of another group member, or \
                 its alias tree is in another group, or pins disagree)"
            ),
            GroupOverlap { first, second } => write!(
                f,
                "buffers {first} and {second}: their group lays them out sharing bytes while live"
            ),
            NoCommonSpace { buffer } => write!(
                f,
                "buffer {buffer}: no space is allowed to all of its alias tree and group"
            ),
            NoRoom { buffer } => write!(f, "buffer {buffer}: no allowed space has room for it"),
            GraphTooLarge => f.write_str("graph problem too large for the conflict bitsets"),
            LayoutLength => f.write_str("layout has the wrong number of offsets or arenas"),
            WrongSpace { buffer } => write!(f, "buffer {buffer}: placed in a space it may not use"),
            Misplaced { buffer } => write!(
                f,
                "buffer {buffer}: offset breaks its alignment, pin, alias or group"
            ),
            Overlap { first, second } => {
                write!(f, "buffers {first} and {second} conflict and share bytes")
            }
            ArenaMismatch { space } => write!(
                f,
                "space {space}: arena is not the end of its highest buffer, or passes its capacity"
            ),
        }
    }
}

impl core::error::Error for ProblemError {}
