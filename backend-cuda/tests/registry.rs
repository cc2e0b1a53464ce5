//! One pool per device, and typed buffers freed to it on drop, on the fake driver.

use std::sync::Arc;

use tagalloc::Error;
use tagalloc_cuda::fake::{FakeConfig, FakeDriver, Outstanding};
use tagalloc_cuda::{DeviceConfig, DeviceError, Driver, DriverError, PoolRegistry};

fn registry(count: u32) -> (PoolRegistry<Arc<FakeDriver>>, Vec<Arc<FakeDriver>>) {
    let drivers: Vec<Arc<FakeDriver>> = (0..count)
        .map(|device| {
            Arc::new(
                FakeDriver::new(FakeConfig {
                    device,
                    device_count: count,
                    ..FakeConfig::default()
                })
                .unwrap(),
            )
        })
        .collect();
    let open = drivers.clone();
    let reg = PoolRegistry::new(count, DeviceConfig::VMM, move |d| {
        Ok(open[d as usize].clone())
    });
    (reg, drivers)
}

#[test]
fn one_pool_per_device_created_on_first_use() {
    let (reg, gpus) = registry(2);
    assert!(
        reg.created().is_empty(),
        "nothing opened before it is asked for"
    );
    let a = reg.get(1).unwrap();
    assert!(Arc::ptr_eq(&a, &reg.get(1).unwrap()));
    assert_eq!(a.device(), 1);
    assert_eq!(reg.created().len(), 1);
    match reg.get(2) {
        Err(DeviceError::Driver(DriverError::NoDevice {
            ordinal: 2,
            count: 2,
        })) => {}
        other => panic!("{other:?}"),
    }
    let b = reg.get(0).unwrap();
    let s = gpus[0].default_stream();
    let x = b.alloc(1 << 20, s).unwrap();
    assert!(gpus[0].is_device_address(x.ptr()));
    assert!(
        !gpus[1].is_device_address(x.ptr()),
        "device 0's pool uses device 0"
    );
    b.free(x).unwrap();
}

#[test]
fn a_failing_open_is_an_error_and_is_tried_again() {
    let reg: PoolRegistry<std::sync::Arc<FakeDriver>> =
        PoolRegistry::new(1, DeviceConfig::PLAIN, |_| Err(DriverError::NoDriver));
    assert_eq!(
        reg.get(0).unwrap_err(),
        DeviceError::Driver(DriverError::NoDriver)
    );
    assert!(reg.created().is_empty());
}

#[test]
fn buffers_are_freed_to_their_pool_on_drop_from_many_threads() {
    let (reg, gpus) = registry(2);
    let reg = Arc::new(reg);
    let streams: Vec<_> = gpus
        .iter()
        .map(|g| (g.stream_create().unwrap(), g.stream_create().unwrap()))
        .collect();
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            let reg = Arc::clone(&reg);
            let streams = &streams;
            scope.spawn(move || {
                let device = t % 2;
                let pool = reg.get(device).unwrap();
                let (s0, s1) = streams[device as usize];
                let mut keep = Vec::new();
                for i in 0..200usize {
                    let stream = if (i + t as usize).is_multiple_of(3) {
                        s1
                    } else {
                        s0
                    };
                    let buf = pool.buffer::<f32>(1000 + i * 37, stream).unwrap();
                    assert_eq!(buf.num_bytes(), (1000 + i * 37) * 4);
                    if i % 5 == 0 {
                        buf.record_stream(s1).unwrap();
                    }
                    if i % 2 == 0 {
                        keep.push(buf);
                    }
                    if keep.len() > 20 {
                        keep.remove(0);
                    }
                }
                pool.with(|p| p.check()).unwrap();
            });
        }
    });
    for (i, pool) in reg.created().iter().enumerate() {
        assert_eq!(pool.stats().pool.heap.live, pool.stats().pending_blocks);
        gpus[i].complete_all();
        pool.trim().unwrap();
        pool.with(|p| p.check()).unwrap();
        let st = pool.stats();
        assert_eq!((st.pool.heap.live, st.pool.reserved), (0, 0), "{st:?}");
    }
    drop(reg);
    for (g, (s0, s1)) in gpus.iter().zip(streams) {
        // SAFETY: the test's streams, unused from now on (the pools are gone).
        unsafe {
            g.stream_destroy(s0).unwrap();
            g.stream_destroy(s1).unwrap();
        }
        assert_eq!(g.outstanding(), Outstanding::default());
    }
}

#[test]
fn bad_buffers_are_refused() {
    let (reg, gpus) = registry(1);
    let pool = reg.get(0).unwrap();
    let s = gpus[0].default_stream();
    let zero = |e: DeviceError| matches!(e, DeviceError::Pool { error, .. } if error.error == Error::ZeroSize);
    assert!(zero(pool.buffer::<f32>(0, s).unwrap_err()));
    assert!(zero(pool.buffer::<()>(10, s).unwrap_err()));
    let over = pool.buffer::<u64>(usize::MAX / 4, s).unwrap_err();
    assert!(matches!(over, DeviceError::Pool { error, .. } if error.error == Error::SizeOverflow));
    #[repr(align(4096))]
    struct Page(#[allow(dead_code)] [u8; 4096]);
    let align = pool.buffer::<Page>(1, s).unwrap_err();
    assert!(matches!(align, DeviceError::Pool { error, .. } if error.error == Error::BadAlign));
    let huge = pool.buffer::<u8>(1 << 40, s).unwrap_err();
    assert!(
        matches!(huge, DeviceError::Pool { error, .. } if error.is_exhaustion()),
        "{huge}"
    );
    pool.with(|p| p.check()).unwrap();
}

#[test]
fn a_device_without_virtual_memory_gets_plain_regions() {
    let gpu = Arc::new(FakeDriver::new(FakeConfig::default()).unwrap());
    gpu.fail_nth(
        tagalloc_cuda::fake::Call::AllocationGranularity,
        1,
        tagalloc_cuda::code::NOT_SUPPORTED,
    );
    let open = gpu.clone();
    let reg = PoolRegistry::new(1, DeviceConfig::VMM, move |_| Ok(open.clone()));
    let pool = reg.get(0).unwrap();
    assert_eq!(
        pool.with(|p| p.pool().source().regions()),
        tagalloc_cuda::Regions::PLAIN
    );
    let b = pool.alloc(1 << 20, gpu.default_stream()).unwrap();
    assert_eq!(gpu.outstanding().allocations, 1, "a cuMemAlloc region");
    pool.free(b).unwrap();
}

#[test]
fn values_are_kept_once_per_key() {
    let (reg, _gpus) = registry(1);
    let pool = reg.get(0).unwrap();
    for _ in 0..3 {
        pool.keep_alive(7, Box::new(Arc::new(1u8)));
    }
    pool.keep_alive(8, Box::new(()));
    assert_eq!(pool.kept(), 2);
}
