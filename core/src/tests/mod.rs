//! Unit and property tests of the core, per concept.

mod detached;
mod inline;
#[cfg(loom)]
mod loom;
mod model;
#[cfg(feature = "alloc")]
mod plan;
#[cfg(not(loom))]
mod shared;
