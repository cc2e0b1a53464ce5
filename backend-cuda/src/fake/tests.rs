//! The fake driver keeps its books like a real one: every misuse refused with the real
//! driver's error, memory limits enforced, time moving only when told.

use std::sync::Arc;

use super::*;

const MIB: usize = 1 << 20;

fn fake() -> FakeDriver {
    FakeDriver::new(FakeConfig {
        total_memory: 64 * MIB,
        address_space: 1 << 30,
        host_memory_limit: 4 * MIB,
        ..FakeConfig::default()
    })
    .unwrap()
}

fn code_of<T: std::fmt::Debug>(r: Result<T, DriverError>) -> u32 {
    r.unwrap_err().code().expect("a driver call's error")
}

#[test]
fn config_is_validated() {
    let bad = [
        FakeConfig {
            granularity: 3 << 20,
            ..FakeConfig::default()
        },
        FakeConfig {
            granularity: 1024,
            recommended_granularity: 1024,
            ..FakeConfig::default()
        },
        FakeConfig {
            recommended_granularity: 3 << 20,
            ..FakeConfig::default()
        },
        FakeConfig {
            address_space: (2 << 20) + 4096,
            ..FakeConfig::default()
        },
        FakeConfig {
            device: 1,
            ..FakeConfig::default()
        },
    ];
    for config in bad {
        let err = FakeDriver::new(config).unwrap_err();
        assert_eq!(err.code(), Some(code::INVALID_VALUE), "{config:?}");
    }
    let two = FakeDriver::new(FakeConfig {
        device: 1,
        device_count: 2,
        ..FakeConfig::default()
    })
    .unwrap();
    assert_eq!((two.device(), two.device_count().unwrap()), (1, 2));
}

#[test]
fn plain_allocations_are_counted_against_the_device() {
    let d = fake();
    let (base, len) = d.address_space();
    let a = d.mem_alloc(1000).unwrap();
    let b = d.mem_alloc(5 * MIB).unwrap();
    for p in [a, b] {
        assert_eq!(p.0 % FAKE_ALLOC_ALIGN, 0);
        assert!(d.is_device_address(p));
        assert!(p.0 >= base.0 && p.0 < base.0 + len as u64);
    }
    assert!(d.is_accessible(b, 5 * MIB));
    assert!(!d.is_accessible(a, 1025), "past the (rounded) end of `a`");
    assert_eq!(d.outstanding().device_bytes, 1024 + 5 * MIB);
    let info = d.mem_get_info().unwrap();
    assert_eq!(info.total, 64 * MIB);
    assert_eq!(info.free, 64 * MIB - 1024 - 5 * MIB);

    assert_eq!(code_of(d.mem_alloc(0)), code::INVALID_VALUE);
    assert_eq!(code_of(d.mem_alloc(60 * MIB)), code::OUT_OF_MEMORY);
    assert_eq!(code_of(d.mem_alloc(usize::MAX)), code::INVALID_VALUE);
    d.set_external_usage(50 * MIB);
    assert_eq!(code_of(d.mem_alloc(10 * MIB)), code::OUT_OF_MEMORY);
    assert_eq!(d.mem_get_info().unwrap().free, 14 * MIB - 1024 - 5 * MIB);
    d.set_external_usage(0);

    // SAFETY: the allocations are this test's and unused.
    unsafe {
        d.mem_free(a).unwrap();
        assert_eq!(code_of(d.mem_free(a)), code::INVALID_VALUE, "double free");
        assert_eq!(
            code_of(d.mem_free(DevicePtr(b.0 + 256))),
            code::INVALID_VALUE,
            "not the start of an allocation"
        );
        d.mem_free(b).unwrap();
    }
    assert_eq!(d.outstanding(), Outstanding::default());
    // The whole device is free again, in one piece.
    let all = d.mem_alloc(64 * MIB).unwrap();
    // SAFETY: as above.
    unsafe { d.mem_free(all).unwrap() };
}

#[test]
fn virtual_memory_bookkeeping() {
    let d = fake();
    let g = d.allocation_granularity(Granularity::Minimum).unwrap();
    assert_eq!(g, 2 * MIB);
    assert_eq!(
        d.allocation_granularity(Granularity::Recommended).unwrap(),
        2 * MIB
    );
    assert_eq!(
        code_of(d.mem_address_reserve(g + 1, 0)),
        code::INVALID_VALUE
    );
    assert_eq!(code_of(d.mem_address_reserve(0, 0)), code::INVALID_VALUE);
    assert_eq!(code_of(d.mem_address_reserve(g, 3)), code::INVALID_VALUE);
    // Reserving costs no memory: far more than the device holds.
    let big = d.mem_address_reserve(256 * MIB, 0).unwrap();
    let base = d.mem_address_reserve(8 * g, 4 * g).unwrap();
    assert_eq!(base.0 % (4 * g) as u64, 0);
    assert_eq!(d.outstanding().device_bytes, 0);

    assert_eq!(code_of(d.mem_create(g / 2)), code::INVALID_VALUE);
    assert_eq!(code_of(d.mem_create(128 * MIB)), code::OUT_OF_MEMORY);
    let p1 = d.mem_create(2 * g).unwrap();
    let p2 = d.mem_create(g).unwrap();
    assert_eq!(d.outstanding().device_bytes, 3 * g);
    let at = |i: usize| DevicePtr(base.0 + (i * g) as u64);

    // SAFETY: the reservations and handles are this test's; misuse is refused, not obeyed.
    unsafe {
        assert_eq!(
            code_of(d.mem_map(at(0), 3 * g, p1)),
            code::INVALID_VALUE,
            "too big"
        );
        assert_eq!(
            code_of(d.mem_map(DevicePtr(at(0).0 + 4096), g, p1)),
            code::INVALID_VALUE,
            "unaligned"
        );
        assert_eq!(
            code_of(d.mem_map(at(7), 2 * g, p1)),
            code::INVALID_VALUE,
            "runs past the reservation"
        );
        let (space, space_len) = d.address_space();
        let last_granule = DevicePtr(space.0 + (space_len - g) as u64);
        assert_eq!(
            code_of(d.mem_map(last_granule, g, p2)),
            code::INVALID_VALUE,
            "outside any reservation"
        );
        d.mem_map(at(1), 2 * g, p1).unwrap();
        for overlapping in [at(0), at(1), at(2)] {
            let len = if overlapping == at(0) { 2 * g } else { g };
            assert_eq!(
                code_of(d.mem_map(overlapping, len, p2)),
                code::INVALID_VALUE,
                "overlaps the mapping at 1..3"
            );
        }
        d.mem_map(at(3), g, p2).unwrap();
        assert!(!d.is_accessible(at(1), 3 * g), "no access granted yet");
        assert_eq!(
            code_of(d.mem_set_access(at(0), 2 * g)),
            code::INVALID_VALUE,
            "granule 0 is not mapped"
        );
        d.mem_set_access(at(1), 3 * g).unwrap();
        assert!(d.is_accessible(at(1), 3 * g));
        assert!(!d.is_accessible(at(0), 2 * g));

        assert_eq!(
            code_of(d.mem_address_free(base, 8 * g)),
            code::INVALID_VALUE,
            "still mapped"
        );
        assert_eq!(
            code_of(d.mem_unmap(at(1), g)),
            code::INVALID_VALUE,
            "half of a mapping"
        );
        assert_eq!(
            code_of(d.mem_unmap(at(2), 2 * g)),
            code::INVALID_VALUE,
            "starts inside a mapping"
        );
        assert_eq!(
            code_of(d.mem_unmap(at(4), g)),
            code::INVALID_VALUE,
            "not mapped"
        );

        // Released while mapped: the memory stays until the mapping goes.
        d.mem_release(p1).unwrap();
        assert_eq!(
            code_of(d.mem_release(p1)),
            code::INVALID_VALUE,
            "released twice"
        );
        assert_eq!(
            code_of(d.mem_map(at(5), g, p1)),
            code::INVALID_VALUE,
            "released"
        );
        assert_eq!(d.outstanding().device_bytes, 3 * g);
        // Both mappings at once, as one contiguous range.
        d.mem_unmap(at(1), 3 * g).unwrap();
        assert_eq!(d.outstanding().device_bytes, g, "p1 gone, p2 still held");
        assert_eq!(d.outstanding().mappings, 0);
        d.mem_release(p2).unwrap();

        assert_eq!(
            code_of(d.mem_address_free(base, 4 * g)),
            code::INVALID_VALUE,
            "wrong size"
        );
        d.mem_address_free(base, 8 * g).unwrap();
        assert_eq!(
            code_of(d.mem_address_free(base, 8 * g)),
            code::INVALID_VALUE,
            "twice"
        );
        d.mem_address_free(big, 256 * MIB).unwrap();
    }
    assert_eq!(d.outstanding(), Outstanding::default());
}

#[test]
fn pinned_host_memory_is_real_memory() {
    let d = fake();
    let p = d.host_alloc(MIB, PinFlags::PORTABLE).unwrap();
    assert_eq!(p.as_ptr() as usize % 4096, 0);
    // SAFETY: `p` is 1 MiB of host memory this test owns until it frees it.
    let bytes = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), MIB) };
    assert!(bytes.iter().all(|&b| b == 0));
    bytes.fill(0xa5);
    assert!(bytes.iter().all(|&b| b == 0xa5));
    assert_eq!(
        code_of(d.host_alloc(4 * MIB, PinFlags::DEFAULT)),
        code::OUT_OF_MEMORY
    );
    assert_eq!(
        code_of(d.host_alloc(0, PinFlags::DEFAULT)),
        code::INVALID_VALUE
    );
    // SAFETY: no reference into the memory is used after the free.
    unsafe {
        d.host_free(p).unwrap();
        assert_eq!(code_of(d.host_free(p)), code::INVALID_VALUE);
    }

    let mut buffer = vec![0u8; 3 * 4096];
    let start = NonNull::new(buffer.as_mut_ptr()).unwrap();
    let inside = NonNull::new(buffer[4096..].as_mut_ptr()).unwrap();
    // SAFETY: `buffer` outlives the registrations, which end below.
    unsafe {
        d.host_register(inside, 4096, PinFlags::DEFAULT).unwrap();
        for (ptr, len) in [(start, 3 * 4096), (start, 4097), (inside, 1)] {
            assert_eq!(
                code_of(d.host_register(ptr, len, PinFlags::DEFAULT)),
                code::HOST_MEMORY_ALREADY_REGISTERED
            );
        }
        d.host_register(start, 4096, PinFlags::DEFAULT).unwrap(); // adjacent, not overlapping
        assert_eq!(
            code_of(d.host_register(start, 0, PinFlags::DEFAULT)),
            code::INVALID_VALUE
        );
        d.host_unregister(inside).unwrap();
        assert_eq!(
            code_of(d.host_unregister(inside)),
            code::HOST_MEMORY_NOT_REGISTERED
        );
        d.host_unregister(start).unwrap();
    }
    assert_eq!(d.outstanding(), Outstanding::default());
}

#[test]
fn events_complete_when_the_test_says_so() {
    let d = fake();
    let s = d.stream_create().unwrap();
    let (e1, e2, e3) = (
        d.event_create().unwrap(),
        d.event_create().unwrap(),
        d.event_create().unwrap(),
    );
    // SAFETY: the streams and events are this test's and live until destroyed below.
    unsafe {
        assert!(d.event_query(e1).unwrap(), "never recorded");
        d.event_record(e1, s).unwrap();
        d.event_record(e2, s).unwrap();
        d.event_record(e3, d.default_stream()).unwrap();
        assert!(!d.event_query(e1).unwrap() && !d.event_query(e3).unwrap());
        assert_eq!(d.pending_events(), 3);

        d.complete(e1).unwrap();
        assert!(d.event_query(e1).unwrap());
        assert!(!d.event_query(e2).unwrap(), "recorded after e1");
        d.stream_synchronize(s).unwrap();
        assert!(d.event_query(e2).unwrap());
        assert!(!d.event_query(e3).unwrap(), "another stream");
        d.event_synchronize(e3).unwrap();
        assert!(d.event_query(e3).unwrap());

        let mark = d.mark();
        d.event_record(e1, s).unwrap();
        d.complete_until(mark);
        assert!(!d.event_query(e1).unwrap(), "recorded after the mark");
        d.ctx_synchronize().unwrap();
        assert!(d.event_query(e1).unwrap());

        // cudaFree waits for the device.
        d.event_record(e2, s).unwrap();
        let p = d.mem_alloc(4096).unwrap();
        d.mem_free(p).unwrap();
        assert!(d.event_query(e2).unwrap());
        // Unmapping does not.
        d.event_record(e2, s).unwrap();
        let g = d.config().granularity;
        let (va, h) = (
            d.mem_address_reserve(g, 0).unwrap(),
            d.mem_create(g).unwrap(),
        );
        d.mem_map(va, g, h).unwrap();
        d.mem_unmap(va, g).unwrap();
        assert!(!d.event_query(e2).unwrap());
        d.mem_release(h).unwrap();
        d.mem_address_free(va, g).unwrap();

        d.stream_destroy(s).unwrap();
        assert!(
            !d.event_query(e2).unwrap(),
            "work on a destroyed stream is still pending"
        );
        d.complete_stream(s).unwrap();
        assert!(d.event_query(e2).unwrap());
        assert_eq!(code_of(d.stream_destroy(s)), code::INVALID_HANDLE);
        assert_eq!(code_of(d.stream_synchronize(s)), code::INVALID_HANDLE);
        assert_eq!(code_of(d.event_record(e1, s)), code::INVALID_HANDLE);
        assert_eq!(
            code_of(d.stream_destroy(d.default_stream())),
            code::INVALID_HANDLE
        );
        for e in [e1, e2, e3] {
            d.event_destroy(e).unwrap();
        }
        assert_eq!(code_of(d.event_query(e1)), code::INVALID_HANDLE);
        assert_eq!(code_of(d.event_synchronize(e1)), code::INVALID_HANDLE);
        assert_eq!(code_of(d.event_destroy(e1)), code::INVALID_HANDLE);
        assert_eq!(code_of(d.complete(e1)), code::INVALID_HANDLE);
    }
    assert_eq!(d.outstanding(), Outstanding::default());
}

#[test]
fn calls_are_counted_and_failures_injected() {
    let d = fake();
    d.fail_nth(Call::MemAlloc, 2, code::OUT_OF_MEMORY);
    d.fail_nth(Call::EventCreate, 1, code::UNKNOWN);
    let a = d.mem_alloc(4096).unwrap();
    let err = d.mem_alloc(4096).unwrap_err();
    assert_eq!(err, DriverError::cuda("cuMemAlloc", code::OUT_OF_MEMORY));
    assert_eq!(
        d.outstanding().allocations,
        1,
        "the failed call did nothing"
    );
    let b = d.mem_alloc(4096).unwrap();
    assert_eq!(code_of(d.event_create()), code::UNKNOWN);
    let e = d.event_create().unwrap();
    // SAFETY: the allocations and the event are this test's.
    unsafe {
        d.mem_free(a).unwrap();
        d.mem_free(b).unwrap();
        d.event_synchronize(e).unwrap();
        d.event_destroy(e).unwrap();
    }
    let calls = d.calls();
    assert_eq!(calls.get(Call::MemAlloc), 3, "failed calls count too");
    assert_eq!(calls.get(Call::MemFree), 2);
    assert_eq!(calls.get(Call::EventCreate), 2);
    assert_eq!(
        (calls.allocations(), calls.frees(), calls.synchronizations()),
        (3, 2, 1)
    );
    assert_eq!(calls.total(), 9);

    d.reset_calls();
    d.fail_nth(Call::MemCreate, 1, code::OUT_OF_MEMORY);
    d.clear_failures();
    let h = d.mem_create(2 * MIB).unwrap();
    // SAFETY: the handle is this test's.
    unsafe { d.mem_release(h).unwrap() };
    assert_eq!(d.calls().to_string(), "cuMemCreate 1, cuMemRelease 1");
}

/// A pool holds the driver by reference, by `Arc` or as a trait object.
#[test]
fn borrowed_shared_and_dynamic_drivers() {
    fn alloc_free<D: Driver>(d: D) {
        let p = d.mem_alloc(512).unwrap();
        // SAFETY: the allocation is this function's.
        unsafe { d.mem_free(p).unwrap() };
    }
    let d = Arc::new(fake());
    alloc_free(&*d);
    alloc_free(Arc::clone(&d));
    let dynamic: &dyn Driver<Stream = FakeStream, Event = FakeEvent, Physical = FakePhysical> = &*d;
    alloc_free(dynamic);
    assert_eq!(d.calls().get(Call::MemAlloc), 3);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| alloc_free(&*d));
        }
    });
    assert_eq!(d.calls().get(Call::MemFree), 7);
    assert_eq!(d.outstanding(), Outstanding::default());
}

#[test]
fn leftover_pinned_memory_is_freed_with_the_driver() {
    let d = fake();
    let _leaked = d.host_alloc(MIB, PinFlags::DEFAULT).unwrap();
    assert_eq!(d.outstanding().host_allocations, 1);
    drop(d); // would leak 1 MiB (a leak checker would say so) if the fake did not free it
}
