//! talc's `TalcLock` over a claimed array, as its README shows it.
#![no_std]
#![no_main]

use tagalloc_embedded::entry;
use talc::{source::Claim, TalcLock};

static mut ARENA: [u8; 4096] = [0; 4096];

#[global_allocator]
static HEAP: TalcLock<spinning_top::RawSpinlock, Claim> =
    // SAFETY: the array is used by nothing but the allocator.
    TalcLock::new(unsafe { Claim::array(&raw mut ARENA) });

/// The bytes of talc's state kept inside the memory it manages (its bins' list heads, in the
/// first heap it claims), read from the ELF by `.ci/embedded_sizes.py`.
#[no_mangle]
#[used]
pub static IN_HEAP_STATE: usize = <talc::DefaultBinning as talc::base::binning::Binning>::BIN_COUNT
    as usize
    * core::mem::size_of::<*mut u8>();

entry!({});
