//! The C ABI: the allocator layer over the fake driver (what the exported functions do over
//! the real one), the exported functions themselves on this machine (with no driver, malloc
//! returns null and the reason is readable), and the shared library's symbols, looked up by
//! name as PyTorch looks them up.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::Arc;

use tagalloc_cuda::fake::{FakeConfig, FakeDriver, Outstanding};
use tagalloc_cuda::{DeviceConfig, DevicePtr, Driver, PoolRegistry};
use tagalloc_cuda_pluggable::{
    copy_whole, tagalloc_empty_cache, tagalloc_free, tagalloc_last_error, tagalloc_malloc,
    tagalloc_record_stream, tagalloc_snapshot, tagalloc_stats, tagalloc_stats_size, tagalloc_trim,
    Allocator, MempoolId, TagallocStats,
};

fn fake_allocator(count: u32) -> (Allocator<Arc<FakeDriver>>, Vec<Arc<FakeDriver>>) {
    let gpus: Vec<Arc<FakeDriver>> = (0..count)
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
    let open = gpus.clone();
    let reg = PoolRegistry::new(count, DeviceConfig::VMM, move |d| {
        Ok(open[d as usize].clone())
    });
    (Allocator::new(reg), gpus)
}

#[test]
fn the_allocator_serves_frees_by_address_and_reports() {
    let (a, gpus) = fake_allocator(2);
    let (s0, s1) = (gpus[1].default_stream(), gpus[1].stream_create().unwrap());
    assert_eq!(a.malloc(0, 1, s0), Ok(None), "nothing for a size of 0");
    let p = a.malloc(1000, 1, s0).unwrap().unwrap();
    let q = a.malloc(5 << 20, 1, s1).unwrap().unwrap();
    assert!(gpus[1].is_device_address(p) && gpus[1].is_accessible(q, 5 << 20));
    a.record_stream(p, s1).unwrap();
    assert!(a
        .record_stream(DevicePtr(8), s1)
        .unwrap_err()
        .contains("not a live block"));
    let st = a.stats(1).unwrap();
    assert_eq!(st.status, 0);
    assert_eq!(st.in_use, 1024 + (5 << 20));
    assert_eq!(st.regions, 1);
    // The size given with a free must be the block's.
    let e = a.free(p, 999, 1).unwrap_err();
    assert!(e.contains("allocated with 1000"), "{e}");
    a.free(p, 1000, 1).unwrap();
    let e = a.free(p, 1000, 1).unwrap_err();
    assert!(e.contains("not a live block"), "{e}");
    a.free(q, -1, 1).unwrap(); // a negative size: not checked
    assert!(a.malloc(-5, 1, s0).unwrap_err().contains("bad size"));
    assert!(a.malloc(10, -1, s0).unwrap_err().contains("bad device"));
    let e = a.malloc(10, 2, s0).unwrap_err();
    assert!(e.contains("no CUDA device 2"), "{e}");
    gpus[1].complete_all();
    a.empty_cache(-1).unwrap();
    let st = a.stats(1).unwrap();
    assert_eq!((st.in_use, st.reserved, st.pending), (0, 0, 0));
    assert!(st.peak_reserved >= 5 << 20);
    drop(a);
    // SAFETY: the test's stream, unused from now on.
    unsafe { gpus[1].stream_destroy(s1).unwrap() };
    assert_eq!(gpus[1].outstanding(), Outstanding::default());
    assert_eq!(
        gpus[0].outstanding(),
        Outstanding::default(),
        "device 0 never opened"
    );
}

/// A free by address finds its block whatever stream it was allocated on; a second free of the
/// address is refused; the map and the pool agree throughout.
#[test]
fn address_frees_find_their_block() {
    let (a, gpus) = fake_allocator(1);
    let st = [
        gpus[0].stream_create().unwrap(),
        gpus[0].stream_create().unwrap(),
    ];
    let p = a.malloc(1000, 0, st[0]).unwrap().unwrap();
    let q = a.malloc(1000, 0, st[1]).unwrap().unwrap();
    assert_ne!(p, q);
    a.free(p, -1, 0).unwrap();
    let e = a.free(p, -1, 0).unwrap_err();
    assert_eq!(e, format!("device pool: {:#x} is not a live block", p.0));
    a.check().unwrap();
    a.free(q, -1, 0).unwrap();
    a.empty_cache(0).unwrap();
    a.check().unwrap();
    drop(a);
    for s in st {
        // SAFETY: the test's stream, unused from now on.
        unsafe { gpus[0].stream_destroy(s).unwrap() };
    }
    assert_eq!(gpus[0].outstanding(), Outstanding::default());
}

/// The snapshot the Python module's tests read (`backend-cuda/python/tests/`): this test
/// checks it is what the pool writes now; `TAGALLOC_BLESS=1` rewrites it.
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../python/tests/fixtures/snapshot_fake.json"
);

/// `doc` with every `"address"` made an offset from its first segment's.
fn rebased(mut doc: serde_json::Value) -> serde_json::Value {
    fn walk(v: &mut serde_json::Value, base: u64) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    match x.as_u64() {
                        Some(a) if k == "address" => *x = serde_json::json!(a - base),
                        _ => walk(x, base),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, base)),
            _ => {}
        }
    }
    let base = doc["segments"][0]["address"].as_u64().unwrap();
    walk(&mut doc, base);
    doc
}

#[test]
fn the_snapshot_has_every_chunk_in_pytorchs_shape() {
    let (a, gpus) = fake_allocator(1);
    let (s0, s1) = (gpus[0].default_stream(), gpus[0].stream_create().unwrap());
    let number = |s| if s == s0 { 0 } else { 7 };
    let kept = a.malloc(1000, 0, s0).unwrap().unwrap();
    let freed = a.malloc(3 << 20, 0, s1).unwrap().unwrap();
    let other = a.malloc(4096, 0, s1).unwrap().unwrap();
    a.free(freed, 3 << 20, 0).unwrap(); // on s1, whose work the fake device has not passed
    let st = a.stats(0).unwrap();
    assert!(st.pending >= 3 << 20, "{st:?}");
    assert_eq!(st.pending_blocks, 1);
    assert_eq!(st.live_blocks, 3, "pending blocks count as live");

    let json = a.snapshot_json(0, number).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(doc["device"], 0);
    let segments = doc["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 1, "one region with virtual-memory growth");
    let seg = &segments[0];
    let blocks = seg["blocks"].as_array().unwrap();
    let int = |v: &serde_json::Value| v.as_u64().unwrap();
    // Blocks tile the segment in address order.
    let mut at = int(&seg["address"]);
    for b in blocks {
        assert_eq!(int(&b["address"]), at);
        at += int(&b["size"]);
        assert_eq!(b["frames"], serde_json::json!([]));
    }
    assert_eq!(at - int(&seg["address"]), int(&seg["total_size"]));
    assert_eq!(int(&seg["total_size"]), st.reserved);
    let find = |ptr: DevicePtr| {
        blocks
            .iter()
            .find(|b| int(&b["address"]) == ptr.0)
            .unwrap_or_else(|| panic!("no block at {ptr:?} in {json}"))
    };
    let (k, f, o) = (find(kept), find(freed), find(other));
    assert_eq!(k["state"], "active_allocated");
    assert_eq!((int(&k["requested_size"]), int(&k["size"])), (1000, 1024));
    assert_eq!(k["stream"], 0);
    assert_eq!(f["state"], "active_pending_free");
    assert_eq!(f["stream"], 7, "pending on the stream it was freed on");
    assert_eq!(o["state"], "active_allocated");
    assert_eq!(
        (int(&o["requested_size"]), o["stream"].as_u64()),
        (4096, Some(7))
    );
    let inactive: Vec<_> = blocks.iter().filter(|b| b["state"] == "inactive").collect();
    assert!(
        !inactive.is_empty(),
        "the rest of the region is free: {json}"
    );
    for b in &inactive {
        assert_eq!(
            (int(&b["requested_size"]), b["stream"].is_null()),
            (0, true)
        );
    }
    // The segment's sums, as PyTorch's allocator makes them.
    let sum = |states: &[&str], key: &str| -> u64 {
        blocks
            .iter()
            .filter(|b| states.contains(&b["state"].as_str().unwrap()))
            .map(|b| int(&b[key]))
            .sum()
    };
    assert_eq!(
        int(&seg["allocated_size"]),
        sum(&["active_allocated"], "size")
    );
    assert_eq!(int(&seg["allocated_size"]), 1024 + 4096);
    let active = ["active_allocated", "active_pending_free"];
    assert_eq!(int(&seg["active_size"]), sum(&active, "size"));
    assert_eq!(int(&seg["active_size"]), st.in_use);
    assert_eq!(int(&seg["requested_size"]), sum(&active, "requested_size"));
    assert_eq!(
        (
            &seg["stream"],
            &seg["segment_type"],
            &seg["segment_pool_id"]
        ),
        (
            &serde_json::json!(0),
            &serde_json::json!("large"),
            &serde_json::json!([0, 0])
        )
    );

    if std::env::var_os("TAGALLOC_BLESS").is_some() {
        std::fs::write(FIXTURE, format!("{json}\n")).unwrap();
    }
    // The fake driver's addresses change from run to run: compared from the first segment's.
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap();
    assert_eq!(
        rebased(fixture),
        rebased(doc),
        "{FIXTURE} is stale: rerun with TAGALLOC_BLESS=1"
    );

    // Everything freed and the cache emptied: nothing active is left to show.
    a.free(kept, 1000, 0).unwrap();
    a.free(other, 4096, 0).unwrap();
    a.empty_cache(0).unwrap();
    let json = a.snapshot_json(0, number).unwrap();
    assert!(!json.contains("active_"), "{json}");
    drop(a);
    // SAFETY: the test's stream, unused from now on.
    unsafe { gpus[0].stream_destroy(s1).unwrap() };
}

#[test]
fn the_snapshot_is_whole_or_absent_and_says_why_there_is_none() {
    let (a, gpus) = fake_allocator(1);
    let s0 = gpus[0].default_stream();
    let p = a.malloc(100, 0, s0).unwrap().unwrap();
    let json = a.snapshot_json(0, |_| 0).unwrap();
    let n = json.len();
    // Sizing: a null buffer, or a zero length, only gives the length.
    assert_eq!(
        // SAFETY: a null buffer is never written.
        unsafe { copy_whole(json.as_bytes(), std::ptr::null_mut(), 0) },
        n
    );
    // Too small, even by the NUL: nothing written.
    let mut small = vec![b'x' as c_char; n];
    assert_eq!(
        // SAFETY: `small` has `n` writable bytes, apart from `json`.
        unsafe { copy_whole(json.as_bytes(), small.as_mut_ptr(), n) },
        n
    );
    assert!(
        small.iter().all(|&c| c == b'x' as c_char),
        "a refused copy writes nothing"
    );
    // Room for the document and its NUL: written whole.
    let mut fits = vec![b'x' as c_char; n + 1];
    assert_eq!(
        // SAFETY: `fits` has `n + 1` writable bytes, apart from `json`.
        unsafe { copy_whole(json.as_bytes(), fits.as_mut_ptr(), n + 1) },
        n
    );
    // SAFETY: NUL-terminated by the call.
    let back = unsafe { CStr::from_ptr(fits.as_ptr()) }.to_str().unwrap();
    assert_eq!(back, json);
    // No pool: a bad ordinal, a device the machine does not have.
    assert!(a
        .snapshot_json(-1, |_| 0)
        .unwrap_err()
        .contains("bad device"));
    let e = a.snapshot_json(1, |_| 0).unwrap_err();
    assert!(e.contains("no CUDA device 1"), "{e}");
    a.free(p, 100, 0).unwrap();
}

fn last_error() -> String {
    let mut buf = [0 as c_char; 512];
    // SAFETY: `buf` has 512 writable bytes.
    let n = unsafe { tagalloc_last_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: the function wrote a NUL-terminated string into `buf`.
    let s = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert!(n >= s.len());
    s
}

#[test]
fn the_exported_functions_on_this_machine() {
    let null = std::ptr::null_mut::<c_void>();
    let p = tagalloc_malloc(4096, 0, null);
    let mut st = TagallocStats::default();
    // SAFETY: `st` is writable.
    let status = unsafe { tagalloc_stats(0, &mut st) };
    if tagalloc_cuda::driver_present() {
        // A machine with a driver: a device answers, or the reason there is none is given.
        if p.is_null() {
            assert_eq!(status, -1);
            assert!(last_error().contains("CUDA"), "{}", last_error());
        } else {
            assert_eq!((status, st.status), (0, 0));
            assert!(st.in_use >= 4096);
            tagalloc_free(p, 4096, 0, null);
            tagalloc_empty_cache();
            assert_eq!(tagalloc_trim(-1), 0);
        }
    } else {
        assert!(p.is_null(), "no driver: malloc returns null");
        assert_eq!((status, st.status), (-1, -1));
        let e = last_error();
        assert!(e.contains("no CUDA driver"), "{e}");
        tagalloc_empty_cache();
        tagalloc_record_stream(null, null);
        tagalloc_free(null, 0, 0, null); // null: nothing to do
        tagalloc_free(8 as *mut c_void, 16, 0, null); // refused, not a crash
        assert!(last_error().contains("no CUDA driver"));
        let mut buf = [1 as c_char; 64];
        // SAFETY: `buf` has 64 writable bytes.
        let n = unsafe { tagalloc_snapshot(0, buf.as_mut_ptr(), buf.len()) };
        assert_eq!(n, usize::MAX, "no pool: (size_t)-1");
        assert!(buf.iter().all(|&c| c == 1), "nothing written");
        assert!(last_error().contains("no CUDA driver"));
        assert_eq!(
            // SAFETY: a null buffer is never written.
            unsafe { tagalloc_snapshot(0, std::ptr::null_mut(), 0) },
            usize::MAX
        );
    }
    assert_eq!(tagalloc_stats_size(), std::mem::size_of::<TagallocStats>());
    // SAFETY: a null `out` is refused, nothing written.
    assert_eq!(unsafe { tagalloc_stats(0, std::ptr::null_mut()) }, -2);
    // SAFETY: a null buffer only asks for the length.
    let n = unsafe { tagalloc_last_error(std::ptr::null_mut(), 0) };
    assert_eq!(n, "tagalloc_stats: out is null".len());
    // A buffer too short gets the message cut, NUL-terminated.
    let mut short = [1 as c_char; 8];
    // SAFETY: `short` has 8 writable bytes.
    let n = unsafe { tagalloc_last_error(short.as_mut_ptr(), short.len()) };
    assert!(n > 7);
    assert_eq!(
        // SAFETY: NUL-terminated by the call.
        unsafe { CStr::from_ptr(short.as_ptr()) }.to_bytes().len(),
        7
    );
}

/// The shared library exports each entry point under its C name, as PyTorch's
/// `CUDAPluggableAllocator` looks them up (`dlopen` + `dlsym`).
#[test]
fn the_shared_library_exports_the_c_names() {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    let lib = [
        "libtagalloc_cuda_pluggable.so",
        "../libtagalloc_cuda_pluggable.so",
    ]
    .iter()
    .map(|name| dir.join(name))
    .find(|p| p.exists())
    .expect("the cdylib is built beside the tests");
    let path = std::ffi::CString::new(lib.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path; the library's initialisers are Rust's own.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen {lib:?}");
    for name in [
        c"tagalloc_malloc",
        c"tagalloc_free",
        c"tagalloc_record_stream",
        c"tagalloc_empty_cache",
        c"tagalloc_trim",
        c"tagalloc_stats",
        c"tagalloc_stats_size",
        c"tagalloc_snapshot",
        c"tagalloc_last_error",
        c"tagalloc_forget_stream",
        c"tagalloc_begin_allocate_to_pool",
        c"tagalloc_end_allocate_to_pool",
        c"tagalloc_release_pool",
        c"tagalloc_check_captures",
    ] {
        // SAFETY: a live handle and a NUL-terminated name; the symbol is only looked up.
        let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
        assert!(!sym.is_null(), "{name:?} is not exported");
    }
    // Through the library, as C calls it: with no driver, null and a reason.
    if !tagalloc_cuda::driver_present() {
        type Malloc = extern "C" fn(isize, c_int, *mut c_void) -> *mut c_void;
        // SAFETY: as above.
        let sym = unsafe { libc::dlsym(handle, c"tagalloc_malloc".as_ptr()) };
        // SAFETY: the symbol is `tagalloc_malloc`, whose signature this is.
        let malloc: Malloc = unsafe { std::mem::transmute::<*mut c_void, Malloc>(sym) };
        assert!(malloc(1 << 20, 0, std::ptr::null_mut()).is_null());
    }
    // SAFETY: the handle is live and nothing from the library is used after.
    unsafe { libc::dlclose(handle) };
}

/// PyTorch's graph-pool hooks over the fake driver: a capture's allocations come from its own
/// pool (the device's pool does not grow), frees go back to it, nothing the capture breaks
/// (the fake would invalidate it), a capture without an open pool and two ambiguous ones are
/// refused, and a released pool's memory goes back at `empty_cache` once nothing of it lives.
#[test]
fn graph_pools_serve_captures_and_go_back_when_released() {
    let (a, gpus) = fake_allocator(1);
    let gpu = &gpus[0];
    let (s, c) = (gpu.default_stream(), gpu.stream_create().unwrap());
    let eager = a.malloc(1 << 20, 0, s).unwrap().unwrap();
    let before = a.stats(0).unwrap();
    // A capture with no pool open: refused, not served from the shared pool.
    gpu.begin_capture(c).unwrap();
    let id = MempoolId {
        first: 0,
        second: 1,
    };
    let other = MempoolId {
        first: 0,
        second: 2,
    };
    a.begin_allocate_to_pool(0, other).unwrap();
    a.end_allocate_to_pool(0, other).unwrap();
    assert!(gpu.end_capture(c).unwrap());
    gpu.begin_capture(c).unwrap();
    a.begin_allocate_to_pool(0, id).unwrap();
    a.begin_allocate_to_pool(
        0,
        MempoolId {
            first: 0,
            second: 3,
        },
    )
    .unwrap();
    let e = a.malloc(4096, 0, c).unwrap_err();
    assert!(e.contains("ambiguous"), "{e}");
    a.end_allocate_to_pool(
        0,
        MempoolId {
            first: 0,
            second: 3,
        },
    )
    .unwrap();
    // One pool open: the capture's allocations come from it.
    let g1 = a.malloc(3 << 20, 0, c).unwrap().unwrap();
    let g2 = a.malloc(1 << 20, 0, c).unwrap().unwrap();
    a.free(g2, 1 << 20, 0).unwrap(); // freed in the capture, back to the graph's pool
    let g3 = a.malloc(1 << 20, 0, c).unwrap().unwrap();
    // An eager allocation on another stream meanwhile: the device's pool.
    let e2 = a.malloc(1 << 20, 0, s).unwrap().unwrap();
    let during = a.stats(0).unwrap();
    assert_eq!(
        during.graph_pools, 3,
        "pools of three captures (two closed)"
    );
    assert_eq!(
        during.in_use,
        before.in_use + (1 << 20),
        "the capture's blocks are not the device pool's"
    );
    a.check().unwrap();
    assert!(
        gpu.end_capture(c).unwrap(),
        "the pools never broke the capture"
    );
    a.end_allocate_to_pool(0, id).unwrap();
    assert!(a.end_allocate_to_pool(0, id).is_err(), "ended already");
    // After the capture: the graph's blocks free to its pool; released, it waits for its last
    // block; then empty_cache gives its memory back.
    a.free(g1, 3 << 20, 0).unwrap();
    a.release_pool(0, id).unwrap();
    a.release_pool(0, other).unwrap();
    a.release_pool(
        0,
        MempoolId {
            first: 0,
            second: 3,
        },
    )
    .unwrap();
    assert!(a
        .release_pool(
            0,
            MempoolId {
                first: 9,
                second: 9
            }
        )
        .is_err());
    assert_eq!(a.stats(0).unwrap().graph_pools, 1, "g3 is still live");
    let held = gpu.outstanding().device_bytes;
    a.free(g3, 1 << 20, 0).unwrap();
    assert_eq!(a.stats(0).unwrap().graph_pools, 0);
    a.empty_cache(0).unwrap();
    assert!(
        gpu.outstanding().device_bytes < held,
        "the graph pools' memory went back"
    );
    a.free(eager, 1 << 20, 0).unwrap();
    a.free(e2, 1 << 20, 0).unwrap();
    a.check().unwrap();
    assert_eq!(a.forget_stream(c), Ok(()));
    // SAFETY: the test's stream, forgotten by every pool and used no more.
    unsafe { gpu.stream_destroy(c).unwrap() };
    a.empty_cache(-1).unwrap();
    drop(a);
    assert_eq!(gpu.outstanding(), Outstanding::default());
}

/// A capture under way without an open graph pool: the allocation is refused with a message
/// saying why, never served from the shared pool.
#[test]
fn a_capture_without_a_graph_pool_is_refused() {
    let (a, gpus) = fake_allocator(1);
    let gpu = &gpus[0];
    let c = gpu.stream_create().unwrap();
    let id = MempoolId {
        first: 0,
        second: 1,
    };
    a.begin_allocate_to_pool(0, id).unwrap();
    a.end_allocate_to_pool(0, id).unwrap();
    gpu.begin_capture(c).unwrap();
    a.begin_allocate_to_pool(
        0,
        MempoolId {
            first: 0,
            second: 7,
        },
    )
    .unwrap();
    // The open pool takes this capture's allocations.
    let p = a.malloc(4096, 0, c).unwrap().unwrap();
    a.free(p, 4096, 0).unwrap();
    a.end_allocate_to_pool(
        0,
        MempoolId {
            first: 0,
            second: 7,
        },
    )
    .unwrap();
    // Announced, but its pool closed already (another capture's): refused.
    a.begin_allocate_to_pool(
        0,
        MempoolId {
            first: 0,
            second: 8,
        },
    )
    .unwrap();
    let d = gpu.stream_create().unwrap();
    let id2 = gpu.begin_capture(d).unwrap();
    let q = a.malloc(4096, 0, d).unwrap().unwrap(); // binds pool 8 to capture id2
    let e = a.malloc(4096, 0, c).unwrap_err();
    assert!(e.contains("no graph pool is open"), "{e}");
    assert!(id2 > 0);
    a.free(q, 4096, 0).unwrap();
    a.end_allocate_to_pool(
        0,
        MempoolId {
            first: 0,
            second: 8,
        },
    )
    .unwrap();
    assert!(gpu.end_capture(d).unwrap());
    assert!(gpu.end_capture(c).unwrap());
    a.check().unwrap();
}

/// Without the graph-pool hooks (an older PyTorch), checking every allocation's stream refuses
/// one on a capturing stream rather than serving it from the shared pool.
#[test]
fn without_the_hooks_a_capturing_allocation_is_refused_when_asked_to_check() {
    let (a, gpus) = fake_allocator(1);
    let gpu = &gpus[0];
    let c = gpu.stream_create().unwrap();
    a.check_captures(true);
    let before = a.malloc(4096, 0, c).unwrap().unwrap(); // not capturing: served
    gpu.begin_capture(c).unwrap();
    let e = a.malloc(4096, 0, c).unwrap_err();
    assert!(e.contains("no graph pool is open"), "{e}");
    assert!(gpu.end_capture(c).unwrap(), "the refusal broke no capture");
    a.free(before, 4096, 0).unwrap();
    a.check().unwrap();
}
