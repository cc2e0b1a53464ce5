//! The allocation algorithm, written once over the placement seam ([`tags::Tags`]): size
//! arithmetic, bins, best fit, regions, the invariant walk and the statistics.

pub(crate) mod bin_index;
pub(crate) mod bins;
pub(crate) mod check;
pub(crate) mod geometry;
pub(crate) mod heap;
pub(crate) mod region;
pub(crate) mod ring;
pub(crate) mod shape;
pub(crate) mod size_table;
pub(crate) mod stats;
pub(crate) mod tags;
