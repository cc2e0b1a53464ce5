//! What a [`DevicePool`] is made of, read: [`DevicePool::check`], the invariant checker, and
//! [`DevicePool::snapshot`], the picture of its regions and chunks.

use std::cell::RefCell;

use super::order::{Entry, Mode};
use super::seam::Seam;
use super::DevicePool;
use crate::driver::Driver;
use crate::snapshot::{BlockState, SnapshotBlock, SnapshotRegion};

impl<D: Driver> DevicePool<D> {
    /// Every region the pool holds and every chunk in it, in address order, with what the
    /// pool knows of each (see [`SnapshotRegion`]): a pending chunk's stream; nothing of a
    /// chunk in use, whose block its owner holds.
    ///
    /// # Time Complexity
    /// `O(chunks + regions)`, and a hash lookup per chunk in use.
    pub fn snapshot(&self) -> Vec<SnapshotRegion<D::Stream>> {
        let o = &self.order;
        let regions = RefCell::new(Vec::new());
        self.mem.pool.visit(
            |addr, size| {
                regions.borrow_mut().push(SnapshotRegion {
                    addr,
                    size,
                    blocks: Vec::new(),
                })
            },
            |addr, size, free| {
                let mut block = SnapshotBlock {
                    addr,
                    size,
                    state: BlockState::Free,
                    requested: None,
                    stream: None,
                };
                if !free {
                    block.state = BlockState::Allocated;
                    if let Some(Entry::Pending(slot)) = o.index.get(&addr) {
                        block.state = BlockState::Pending;
                        let s = &o.slots.slots[*slot as usize];
                        block.stream = o.streams.get(s.stream as usize).map(|st| st.stream);
                    }
                }
                if let Some(r) = regions.borrow_mut().last_mut() {
                    r.blocks.push(block);
                }
            },
        );
        regions.into_inner()
    }

    /// Verifies every invariant: the core pool's (heap and reserved bytes) and the stream
    /// order's (see `order.rs` and `pending.rs`).
    ///
    /// # Time Complexity
    /// `O(chunks + regions + pending blocks × their batches + streams²)`.
    pub fn check(&self) -> Result<(), String> {
        self.mem.pool.check().map_err(|e| e.to_string())?;
        let o = &self.order;
        if o.mode != Mode::Multi
            && (o.slots.count > 0 || !o.index.is_empty() || !o.extra.is_empty())
        {
            return Err("pending blocks with a single stream".into());
        }
        // How many live batches name each slot under its generation.
        let mut refs = vec![0usize; o.slots.slots.len()];
        for st in &o.streams {
            if st.gone && !st.open.is_empty() {
                return Err(format!(
                    "forgotten stream {:?} has an open batch",
                    st.stream
                ));
            }
            let mut last = 0;
            for b in &st.fenced {
                if b.seq <= last || b.seq >= st.open_seq {
                    return Err(format!("stream {:?}'s batches are out of order", st.stream));
                }
                last = b.seq;
            }
            for (t, &w) in st.waited.iter().enumerate() {
                if o.streams.get(t).is_some_and(|other| w > other.open_seq) {
                    return Err(format!(
                        "stream {:?} waited for a batch not yet made",
                        st.stream
                    ));
                }
            }
            let batches = st.fenced.iter().map(|b| &b.slots).chain([&st.open]);
            let mut waiting = 0;
            for r in batches.flatten() {
                if let Some(s) = o.slots.get(*r) {
                    refs[r.slot as usize] += 1;
                    waiting += s.usable;
                }
            }
            if waiting != st.bytes {
                return Err(format!(
                    "stream {:?}'s batches hold {waiting} bytes, it counts {}",
                    st.stream, st.bytes
                ));
            }
        }
        let (mut count, mut bytes, mut fit) = (0, 0, 0);
        for (i, s) in o.slots.slots.iter().enumerate() {
            if !s.live {
                continue;
            }
            count += 1;
            bytes += s.usable;
            let at = s.block.addr;
            self.mem
                .is_live(&s.block)
                .map_err(|e| format!("pending block {at:#x} is not live in the heap: {e}"))?;
            if o.index.get(&at) != Some(&Entry::Pending(i as u32)) {
                return Err(format!("pending block {at:#x} is not indexed"));
            }
            if o.ends.get(&(at + s.usable)) != Some(&(i as u32)) {
                return Err(format!("pending block {at:#x} is not indexed by its end"));
            }
            if !o.sizes.contains(&(s.usable, i as u32)) {
                return Err(format!("pending block {at:#x} is not in the size index"));
            }
            let held = s
                .batches
                .iter()
                .filter(|&&(t, q)| o.streams[t as usize].holds_batch(q))
                .count();
            if refs[i] != s.waits as usize || held != refs[i] {
                return Err(format!(
                    "pending block {at:#x} waits for {} batches, names {held} live ones, is \
                     in {}",
                    s.waits, refs[i]
                ));
            }
            let listed = o
                .streams
                .get(s.stream as usize)
                .is_some_and(|st| st.fit.contains(&(s.usable, i as u32)));
            if listed != (s.reusable && s.waits == 1) {
                return Err(format!("pending block {at:#x} is wrongly (un)listed"));
            }
            fit += usize::from(listed);
        }
        if (count, bytes) != (o.slots.count, o.slots.bytes)
            || count != o.sizes.len()
            || count != o.ends.len()
        {
            return Err("pending counts disagree with the slots".into());
        }
        if fit != o.streams.iter().map(|s| s.fit.len()).sum::<usize>() {
            return Err("a pending list names a block that is not pending".into());
        }
        for (&at, e) in &o.index {
            if let Entry::Reused(_) = e {
                if !self.mem.holds(at) {
                    return Err(format!("reused block {at:#x} is outside every region"));
                }
            }
        }
        Ok(())
    }
}
