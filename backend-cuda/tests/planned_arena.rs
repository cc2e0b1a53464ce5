//! A static plan's arena in a block of the device pool (on the fake driver): every buffer's
//! address lies in the block and keeps its alignment, and a block one byte short of the arena
//! is refused. Device memory is the fake's `PROT_NONE` space: nothing here touches it.

use tagalloc::plan::{
    solve, Alias, ArenaError, Item, Lifetimes, PlannedArena, Problem, SolveOptions,
};
use tagalloc_cuda::fake::{FakeConfig, FakeDriver, Outstanding};
use tagalloc_cuda::{DeviceConfig, DevicePool, Driver};

#[test]
fn a_planned_arena_in_a_device_block() {
    let problem = Problem {
        items: vec![
            Item::new(3000).with_align(256),
            Item::new(10_000).with_align(512),
            Item::new(10_000).with_alias(Alias::write(1, 0)),
            Item::new(4096).with_alias(Alias::view(2, 4096)),
            Item::new(777).with_align(64),
        ],
        lifetimes: Lifetimes::Intervals(vec![(0, 2), (0, 2), (1, 3), (2, 4), (3, 4)]),
        ..Problem::default()
    };
    let layout = solve(&problem, &SolveOptions::default(), &mut || false)
        .unwrap()
        .layout;
    let arena = layout.arenas[0];

    let gpu = FakeDriver::new(FakeConfig {
        total_memory: 1 << 30,
        ..FakeConfig::default()
    })
    .unwrap();
    let s = gpu.stream_create().unwrap();
    let mut pool = DevicePool::new(&gpu, DeviceConfig::PLAIN).unwrap();

    let block = pool.alloc(arena as usize, s).unwrap();
    let (base, len) = (block.ptr().0, block.size() as u64);
    assert!(gpu.is_accessible(block.ptr(), block.size()));
    let planned = PlannedArena::new(&problem, &layout, 0, base, len).unwrap();
    assert_eq!(planned.region(), (base, len));
    for (b, it) in problem.items.iter().enumerate() {
        let (addr, size) = planned.range(b).unwrap();
        assert_eq!(addr, base + layout.offsets[b]);
        assert!(addr >= base && addr + size <= base + len, "buffer {b}");
        assert_eq!(addr % it.align, 0, "buffer {b}");
    }

    let short = pool.alloc(arena as usize - 1, s).unwrap();
    assert_eq!(
        PlannedArena::new(&problem, &layout, 0, short.ptr().0, short.size() as u64),
        Err(ArenaError::TooSmall {
            needed: arena,
            given: arena - 1
        })
    );

    pool.free(block).unwrap();
    pool.free(short).unwrap();
    drop(pool);
    // SAFETY: the test created the stream and uses it no more.
    unsafe { gpu.stream_destroy(s).unwrap() };
    assert_eq!(gpu.outstanding(), Outstanding::default());
}
