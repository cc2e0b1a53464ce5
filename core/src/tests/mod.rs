//! Unit and property tests of the core, per concept.

mod check;
mod detached;
mod inline;
#[cfg(loom)]
mod loom;
#[cfg(not(loom))]
mod misuse;
mod model;
#[cfg(not(loom))]
mod module_map;
#[cfg(feature = "alloc")]
mod plan;
#[cfg(feature = "alloc")]
mod plan_problem;
#[cfg(not(loom))]
mod pool;
#[cfg(not(loom))]
mod probe;
#[cfg(not(loom))]
mod region;
#[cfg(not(loom))]
mod shared;
#[cfg(not(loom))]
mod tcache;
