//! The detached placement: tags in a host-side table of records, apart from the memory.

pub(crate) mod heap;
pub(crate) mod records;
pub(crate) mod tags;
