//! The inline placement: tags inside the host memory a heap manages, and its public heap.

pub(crate) mod granule;
pub(crate) mod heap;
mod probe;
pub use probe::LiveMarks;
pub(crate) mod tags;
