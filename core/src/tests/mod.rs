//! Unit and property tests of the core, per concept.

mod detached;
mod inline;
mod model;
