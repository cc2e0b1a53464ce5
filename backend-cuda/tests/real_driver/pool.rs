//! The device pool on a real GPU: both kinds of regions, two streams, trimming, and typed
//! buffers that cudarc copies into and out of. Built everywhere (which also checks, at compile
//! time, that cudarc's copies and kernel launches accept a [`CudaBuffer`]) and ignored unless
//! asked for, with the driver's tests (see `real_driver.rs` for the command).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream, LaunchArgs, PushKernelArg};
use tagalloc_cuda::{
    CuStream, CudaBuffer, CudaDriver, DeviceConfig, DevicePool, Driver, PoolRegistry,
};

/// What `stream.launch_builder(&f).arg(&buf)` needs: this compiles only if a `CudaBuffer` is
/// accepted as a kernel argument, shared and mutable.
#[allow(dead_code)]
fn launch_takes_buffers<'a>(
    args: &mut LaunchArgs<'a>,
    input: &'a CudaBuffer<f32>,
    output: &'a mut CudaBuffer<f32>,
    n: &'a u32,
) {
    args.arg(input).arg(output).arg(n);
}

/// cudarc's copies and memset, through the device-pointer traits; used by the GPU test.
fn round_trip(
    stream: &Arc<CudaStream>,
    a: &mut CudaBuffer<f32>,
    b: &mut CudaBuffer<f32>,
) -> Result<Vec<f32>, cudarc::driver::DriverError> {
    let host: Vec<f32> = (0..a.buffer().len()).map(|i| i as f32).collect();
    stream.memcpy_htod(&host, a)?;
    stream.memcpy_dtod(a, b)?;
    stream.memset_zeros(a)?;
    let mut zeros = vec![1.0f32; host.len()];
    stream.memcpy_dtoh(a, &mut zeros)?;
    assert!(zeros.iter().all(|&z| z == 0.0));
    let mut out = vec![0.0f32; host.len()];
    stream.memcpy_dtoh(b, &mut out)?;
    stream.synchronize()?;
    assert_eq!(out, host);
    Ok(out)
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn the_pool_on_a_gpu_with_both_kinds_of_regions() {
    for config in [DeviceConfig::PLAIN, DeviceConfig::VMM] {
        let gpu = CudaDriver::new(0).expect("a CUDA device");
        let free_before = gpu.mem_get_info().unwrap().free;
        let (s0, s1) = (gpu.stream_create().unwrap(), gpu.stream_create().unwrap());
        let mut pool = DevicePool::new(&gpu, config).unwrap();
        let mut blocks = Vec::new();
        for i in 0..500usize {
            let stream = if i % 3 == 0 { s1 } else { s0 };
            blocks.push(pool.alloc(1000 + i * 4099, stream).unwrap());
            if i % 4 == 0 {
                let b = blocks.swap_remove(i % blocks.len());
                pool.free(b).unwrap();
            }
        }
        pool.check().unwrap();
        let st = pool.stats();
        println!("{config:?}: {st:?}");
        assert!(st.multi_stream);
        if matches!(config.regions, tagalloc_cuda::Regions::Vmm { .. }) {
            assert_eq!(st.pool.heap.regions, 1, "one region");
        }
        for b in blocks {
            pool.free(b).unwrap();
        }
        pool.trim().unwrap();
        pool.check().unwrap();
        assert_eq!(pool.stats().pool.reserved, 0);
        drop(pool);
        // SAFETY: the streams are this test's, unused from now on.
        unsafe {
            gpu.stream_destroy(s0).unwrap();
            gpu.stream_destroy(s1).unwrap();
        }
        let free_after = gpu.mem_get_info().unwrap().free;
        // Other processes may allocate meanwhile; the pool's own memory is back.
        assert!(
            free_after + (64 << 20) >= free_before,
            "{free_before} → {free_after}"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: run with cargo test -p tagalloc-cuda --test real_driver -- --ignored"]
fn cudarc_copies_into_and_out_of_pool_buffers() {
    let ctx = CudaContext::new(0).expect("a CUDA device");
    let stream = ctx.default_stream();
    let other = ctx.new_stream().unwrap();
    let registry = PoolRegistry::cuda(DeviceConfig::VMM).unwrap();
    let pool = registry.get(0).unwrap();
    for n in [1usize, 1000, 1 << 20] {
        let mut a = pool.cuda_buffer::<f32>(n, &stream).unwrap();
        let mut b = pool.cuda_buffer::<f32>(n, &stream).unwrap();
        round_trip(&stream, &mut a, &mut b).unwrap();
        // Used on another stream too: freed only after that stream's work.
        b.record_stream(&other).unwrap();
        let c = pool.cuda_buffer::<u8>(n, &other).unwrap();
        assert_ne!(c.buffer().ptr(), a.buffer().ptr());
    }
    assert_eq!(pool.kept(), 2, "each stream kept alive once");
    stream.synchronize().unwrap();
    other.synchronize().unwrap();
    pool.trim().unwrap();
    pool.with(|p| p.check()).unwrap();
    let st = pool.stats();
    println!("{st:?}");
    assert_eq!(st.pool.heap.live, 0);
    // The stream handles the pool holds are cudarc's.
    let _: CuStream = pool.with(|p| p.driver().default_stream());
}
