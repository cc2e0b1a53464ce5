//! What every measured program shares: the panic handler, a critical section for the
//! allocators that take one, and the entry point, which allocates through the global allocator
//! so that its static is kept.
#![no_std]

extern crate alloc;

use core::panic::PanicInfo;

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    loop {
        core::hint::spin_loop();
    }
}

/// A critical section for a single core with nothing to mask: the programs are built and
/// measured, never run.
struct NoInterrupts;
critical_section::set_impl!(NoInterrupts);

// SAFETY: the programs are never run; the measurement needs only a section that links.
unsafe impl critical_section::Impl for NoInterrupts {
    unsafe fn acquire() -> critical_section::RawRestoreState {}
    unsafe fn release(_: critical_section::RawRestoreState) {}
}

/// The work every program does: one allocation, kept alive, through the global allocator.
pub fn work() -> ! {
    let v = alloc::vec![1u8; 100];
    core::hint::black_box(&v);
    loop {
        core::hint::spin_loop();
    }
}

/// The program's entry point (the measurement needs a binary that links, nothing more).
#[macro_export]
macro_rules! entry {
    ($init:block) => {
        #[no_mangle]
        pub extern "C" fn _start() -> ! {
            $init
            $crate::work()
        }
    };
}
