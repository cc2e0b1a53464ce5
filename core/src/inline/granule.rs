//! The inline heap's granule, known at compile time when it is the host granule.
//!
//! Every allocation and free divides sizes by the granule, rounds them up to it and turns
//! granule counts back into bytes. With the granule read from the heap at run time, each of
//! those is a load and a shift by a register; with the granule known to the compiler they are
//! shifts by a constant, and the padding, the size limit and the minimum chunk fold into
//! immediates, a few instructions fewer per call (figures:
//! `docs/measurements.md#granulers-the-host-granule-as-a-constant`).
//!
//! So [`crate::InlineHeap`] is generic over a [`Granule`]: [`HostGranule`] (the default, from
//! `InlineHeap::new`) answers the layout with a constant, [`AnyGranule`] (from
//! `InlineHeap::with_granule`) with the one stored beside the regions. The algorithm is written
//! once; only its monomorphic copies differ.

use crate::algo::geometry::Geometry;

/// The default granule of a host heap.
pub const HOST_GRANULE: usize = 16;

mod sealed {
    pub trait Sealed {}
}

/// Where an inline heap's granule comes from: [`HostGranule`] or [`AnyGranule`]. Sealed: the
/// heap relies on the answer matching the layout it was built with.
pub trait Granule: sealed::Sealed {
    /// What the heap stores to know its layout: nothing for [`HostGranule`], whose layout is
    /// a constant (so an empty heap is all zeros and a `static` of one lands in `.bss`), the
    /// layout itself for [`AnyGranule`].
    #[doc(hidden)]
    type Stored: Copy;
    /// The layout to compute with, given what the heap stores.
    #[doc(hidden)]
    fn geometry(stored: &Self::Stored) -> &Geometry;
}

/// The host granule, 16 bytes ([`HOST_GRANULE`]), as a compile-time constant: the granule of
/// `InlineHeap::new()` and of every shared host heap built on it.
#[derive(Debug)]
pub enum HostGranule {}

/// A granule chosen at run time (`InlineHeap::with_granule`), read from the heap.
#[derive(Debug)]
pub enum AnyGranule {}

/// The layout of an inline heap with the host granule.
pub(crate) const HOST_GEOMETRY: Geometry = match Geometry::inline(HOST_GRANULE) {
    Ok(l) => l,
    Err(_) => panic!("the host granule is a valid granule"),
};

impl sealed::Sealed for HostGranule {}
impl sealed::Sealed for AnyGranule {}

impl Granule for HostGranule {
    type Stored = ();

    /// The constant: a heap of this kind stores nothing and computes with [`HOST_GEOMETRY`].
    #[inline(always)]
    fn geometry(_stored: &()) -> &Geometry {
        &HOST_GEOMETRY
    }
}

impl Granule for AnyGranule {
    type Stored = Geometry;

    #[inline(always)]
    fn geometry(stored: &Geometry) -> &Geometry {
        stored
    }
}
