//! Test support: the reference model of the allocation policy, and one adapter that drives
//! either heap in the same terms.
//!
//! **Not a stable API**: it exists so that the core's property tests, the fuzz targets, the
//! trace replay (`tagalloc-tests`) and the benchmarks (`tagalloc-bench`) drive the heaps
//! through one piece of code and check them against one oracle, and it changes whenever they
//! need it to. It is compiled for the crate's own tests and with the `model` feature, and
//! hidden from the documentation.
//!
//! - `reference`: [`Model`], which predicts every address and every error of a sequence of
//!   requests.
//! - `adapter`: [`Adapter`], the heaps in terms of addresses and handles ([`Counted`] adds
//!   their statistics), with
//!   [`InlineAdapter`] (an [`crate::InlineHeap`] over [`Memory`] it carves regions from) and
//!   [`DetachedAdapter`] (a [`crate::DetachedHeap`] over any range of addresses).

mod adapter;
mod reference;

pub use crate::algo::geometry::Geometry;
pub use adapter::{Adapter, Counted, DetachedAdapter, InlineAdapter, Memory};
pub use reference::{MChunk, Model};
