//! The invariant checker, written once over the placement seam: it walks every region and chunk,
//! every bin, and the counters (of a heap that keeps them), and reports the first broken
//! invariant as a [`CheckError`] naming what is wrong and where. Each placement contributes only
//! the decoding of its own tags ([`Tags::check_tags`]). Tests and fuzz targets call it after
//! every step, so it never trusts a link to stay in bounds: every walk is bounded by the number
//! of free chunks found.

use crate::algo::bins::Bins;
use crate::algo::heap::Heap;
use crate::algo::shape::sealed::Shape;
use crate::algo::size_table::{self, SizeTable, Table};
use crate::algo::stats::Tally;
use crate::algo::tags::{Link, Tags};
use crate::error::CheckError;

/// The bins' summary words as a step's check last saw them, kept by the caller between steps.
///
/// A full check ([`InlineHeap::check`](crate::InlineHeap::check)) reads the ends of every
/// exact-size list (2,047 of them in the default shape) and every chain of the size table,
/// however few chunks the heap has: a fixed cost far above that of the step it follows. A
/// step's check ([`InlineHeap::check_step`](crate::InlineHeap::check_step)) looks only into
/// the map words marked non-empty now or at the previous step's check: every list and chain a
/// step filed a chunk into, took one from, or emptied. It skips only lists and chains empty
/// both before and after the step, whose words a correct step does not touch; a stray write
/// into one of those that leaves every mark as it was and no free chunk unfiled is seen by the
/// next full check, which callers run every so many steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepMarks {
    lists: u64,
    table: [u64; size_table::SUMMARY_WORDS],
}

impl StepMarks {
    /// Whether a step's check looks into list map word `w`, whose summary bit is now `now`.
    fn list_word(&self, w: usize, now: bool) -> bool {
        now || self.lists >> w & 1 == 1
    }
}

impl<T: Tags, K: Tally, S: Shape> Heap<T, K, S> {
    /// A step's check: every invariant [`check`](Self::check) verifies, with the bins' lists
    /// and chains read only where `marks` (the previous step's) or the bins' own summaries
    /// mark them (see [`StepMarks`]); then `marks` are this state's.
    ///
    /// # Time Complexity
    /// `O(chunks + regions + marked map words)`.
    pub fn check_step(&self, marks: &mut StepMarks) -> Result<(), CheckError> {
        self.check_within(Some(marks))?;
        *marks = StepMarks {
            lists: self.bins().summary_bits(),
            table: self
                .bins()
                .table()
                .sizes()
                .map_or([0; size_table::SUMMARY_WORDS], SizeTable::summary_words),
        };
        Ok(())
    }

    /// Verifies every invariant of the heap: each region is covered by whole, consistent chunks
    /// whose sizes add up to it; no two free chunks are adjacent; every free chunk is in the bin
    /// of its size and nothing else is, but the top, which is the free end of the top region
    /// and in no bin, and the victim, in no bin and not ending the top region; the bins' map,
    /// lists and tries are consistent; the counters, where the heap keeps them, agree with the
    /// chunks.
    pub fn check(&self) -> Result<(), CheckError> {
        self.check_within(None)
    }

    /// [`check`](Self::check), with the bins' lists and chains limited to those `marks` name
    /// (see [`StepMarks`]), or all of them.
    fn check_within(&self, marks: Option<&StepMarks>) -> Result<(), CheckError> {
        let t = self.tags();
        let top = self.top();
        let (mut free_chunks, mut free, mut used, mut managed, mut live) = (0, 0, 0, 0, 0);
        // Whether a chunk ends where the top region's chunks end, and the top's size.
        let (mut top_region_seen, mut top_size) = (false, 0);
        let mut regions = 0;
        let mut region = t.first_region();
        while let Some(r) = region {
            let mut c = t.region_first_chunk(r);
            let mut total = 0usize;
            let mut prev_free = false;
            let mut first = true;
            loop {
                // The size is checked against the region before the placement follows it to
                // a footer or a successor: a damaged size is reported, never read through.
                let size = t.size(c);
                total = total
                    .checked_add(size)
                    .filter(|&s| s <= t.region_granules(r))
                    .ok_or(CheckError::new("chunks overrun their region", t.addr(c)))?;
                t.check_tags(c, first)?;
                first = false;
                if size == 0 {
                    return Err(CheckError::new("empty chunk", t.addr(c)));
                }
                if t.addr(c) + t.geometry().bytes_of(size) == top.end {
                    top_region_seen = true;
                    match (t.is_free(c), top.chunk) {
                        (true, Some(tc)) if tc == c => top_size = size,
                        (false, None) => {}
                        (true, _) => {
                            return Err(CheckError::new(
                                "the free end of the top region is not the top",
                                t.addr(c),
                            ))
                        }
                        (false, Some(_)) => {
                            return Err(CheckError::new(
                                "the top region's last chunk is in use but a top is kept",
                                t.addr(c),
                            ))
                        }
                    }
                }
                if t.is_free(c) {
                    if prev_free {
                        return Err(CheckError::new("two free chunks adjacent", t.addr(c)));
                    }
                    free_chunks += 1;
                    free += size;
                } else {
                    used += size;
                    live += 1;
                }
                prev_free = t.is_free(c);
                match t.next(c) {
                    Some(n) => c = n,
                    None => break,
                }
            }
            if total != t.region_granules(r) {
                return Err(CheckError::new(
                    "chunks do not add up to the region",
                    t.addr(c),
                ));
            }
            managed += total;
            regions += 1;
            region = t.next_region(r);
        }
        if top.end != 0 && !top_region_seen {
            return Err(CheckError::new(
                "no region ends where the top region does",
                top.end,
            ));
        }
        if let Some(c) = top.chunk {
            if top_size == 0 {
                return Err(CheckError::new(
                    "the top is not a region's free end",
                    t.addr(c),
                ));
            }
        }
        let (with_victim, victim_size) = match self.victim().chunk {
            Some((v, size)) => {
                let at = t.addr(v);
                if !t.is_free(v) || t.size(v) != size {
                    return Err(CheckError::new(
                        "the victim is not a free chunk of its size",
                        at,
                    ));
                }
                if top.chunk == Some(v) || self.ends_top(v, size) {
                    return Err(CheckError::new("the victim ends the top region", at));
                }
                (1, size)
            }
            None => (0, 0),
        };
        let (binned, binned_granules) = check_bins(self.bins(), t, free_chunks, marks)?;
        let with_top = usize::from(top.chunk.is_some());
        // A victim also filed in a bin would be counted twice.
        if binned + with_top + with_victim != free_chunks
            || binned_granules + top_size + victim_size != free
        {
            return Err(CheckError::new("a free chunk is missing from the bins", 0));
        }
        // A heap without counters has nothing more to agree with the chunks.
        let Some(k) = self.counters() else {
            return Ok(());
        };
        if k.free() != free || k.free_chunks != free_chunks || k.used != used || k.live() != live {
            return Err(CheckError::new("statistics disagree with the chunks", 0));
        }
        if k.managed != managed || k.regions != regions {
            return Err(CheckError::new(
                "managed size disagrees with the regions",
                0,
            ));
        }
        Ok(())
    }
}

/// Verifies every bin invariant (see [`Bins`]); returns the number of free chunks filed and
/// their total size in granules. `limit` (the free chunks found in the regions) bounds every
/// walk, so a cycle of links is reported, not followed forever. With `marks`, only the lists
/// and chains they or the summaries mark are read (a step's check).
fn check_bins<T: Tags, S: Shape>(
    bins: &Bins<T::Chunk, S>,
    t: &T,
    limit: usize,
    marks: Option<&StepMarks>,
) -> Result<(usize, usize), CheckError> {
    let mut count = 0usize;
    let mut granules = 0usize;
    let mut check_one = |c: T::Chunk, b: usize| -> Result<(), CheckError> {
        if !t.is_free(c) {
            return Err(CheckError::new("chunk in a bin is not free", t.addr(c)));
        }
        if Bins::<T::Chunk, S>::bin(t.size(c)) != b {
            return Err(CheckError::new("free chunk in the wrong bin", t.addr(c)));
        }
        count += 1;
        granules += t.size(c);
        if count > limit {
            return Err(CheckError::new(
                "more chunks in bins than free chunks",
                t.addr(c),
            ));
        }
        Ok(())
    };
    // The lists 64 at a time: the map word, the summary bit, and which lists have a head and
    // a tail must all agree (every slot is looked at, the unused last one included); then each
    // non-empty list is walked.
    for w in 0..Bins::<T::Chunk, S>::map_words() {
        let (said, is) = bins.summary(w);
        if said != is {
            return Err(CheckError::new("bin summary disagrees with the bin map", 0));
        }
        if marks.is_some_and(|m| !m.list_word(w, is)) {
            continue;
        }
        let (map, heads, tails) = bins.list_word(w);
        // The first list where two of them disagree, by size.
        let at = |bits: u64| {
            let (head, tail, _) = bins.list(w * 64 + bits.trailing_zeros() as usize + 1);
            head.or(tail).map_or(0, |c| t.addr(c))
        };
        if heads != map {
            return Err(CheckError::new(
                "bin bitmap disagrees with bin",
                at(heads ^ map),
            ));
        }
        if heads != tails {
            return Err(CheckError::new(
                "bin head and tail disagree",
                at(heads ^ tails),
            ));
        }
        let mut left = map;
        while left != 0 {
            let size = w * 64 + left.trailing_zeros() as usize + 1;
            left &= left - 1;
            // The map and the heads agree, so the head is there.
            let (Some(head), tail, _) = bins.list(size) else {
                return Err(CheckError::new("bin bitmap disagrees with bin", 0));
            };
            if t.size(head) != size {
                return Err(CheckError::new("free chunk in the wrong bin", t.addr(head)));
            }
            let b = Bins::<T::Chunk, S>::bin(size);
            check_list(t, head, tail, limit, &mut |c| check_one(c, b))?;
        }
    }
    if let Some(table) = bins.table().sizes() {
        check_table(table, t, limit, marks, &mut check_one)?;
    }
    for b in Bins::<T::Chunk, S>::trie_bins() {
        let (root, marked) = bins.root(b);
        if root.is_some() != marked {
            let at = root.map_or(0, |c| t.addr(c));
            return Err(CheckError::new("bin bitmap disagrees with bin", at));
        }
        let Some(root) = root else { continue };
        if t.link(root, Link::Parent).is_some() {
            return Err(CheckError::new("trie root has a parent", t.addr(root)));
        }
        check_trie(t, root, Bins::<T::Chunk, S>::top_bit(b), limit, &mut |c| {
            check_one(c, b)
        })?;
    }
    Ok((count, granules))
}

/// Checks the size table: its three levels of map agree, every chain is linked both ways and
/// holds heads of its own bucket's sizes, one per size the map marks and no other, each with
/// its ring; calls `each` on every chunk with its bin. With `marks`, only the chains they or
/// the map mark are walked (a step's check).
fn check_table<T: Tags>(
    table: &SizeTable<T::Chunk>,
    t: &T,
    limit: usize,
    marks: Option<&StepMarks>,
    each: &mut impl FnMut(T::Chunk, usize) -> Result<(), CheckError>,
) -> Result<(), CheckError> {
    let (words, summary_words, _) = SizeTable::<T::Chunk>::SHAPE;
    for s in 0..summary_words {
        let (nonzero, said) = table.summary_word(s);
        if nonzero != said {
            return Err(CheckError::new("size table summary disagrees", 0));
        }
    }
    // Chain `k` holds the heads of the sizes of map word `k` (`SizeTable::bucket_of`), so each
    // word is checked with its chain.
    const { assert!(SizeTable::<()>::SHAPE.0 == SizeTable::<()>::SHAPE.2) };
    let (mut marked, mut heads) = (0usize, 0usize);
    let mut word = |k: usize| -> Result<(), CheckError> {
        let (map, said) = table.map_word(k);
        if (map != 0) != said {
            return Err(CheckError::new("size table summary disagrees", 0));
        }
        if k < size_table::FIRST / 64 && map != 0 {
            return Err(CheckError::new("size table marks a listed size", 0));
        }
        marked += map.count_ones() as usize;
        let mut prev = None;
        let mut node = table.bucket_head(k);
        while let Some(h) = node {
            heads += 1;
            if heads > limit {
                return Err(CheckError::new("size table chain does not end", t.addr(h)));
            }
            let size = t.size(h);
            if !(size_table::FIRST..=size_table::LAST).contains(&size)
                || SizeTable::<T::Chunk>::bucket_of(size) != k
            {
                return Err(CheckError::new("free chunk in the wrong bin", t.addr(h)));
            }
            // The map marks the size, and `h` is the first head of it in the chain.
            if !table.has(size) || table.head(t, size) != Some(h) {
                return Err(CheckError::new("bin bitmap disagrees with bin", t.addr(h)));
            }
            if t.link(h, Link::Left) != prev {
                return Err(CheckError::new(
                    "size table chain links disagree",
                    t.addr(h),
                ));
            }
            if t.link(h, Link::Parent).is_some() {
                return Err(CheckError::new("size table head has a parent", t.addr(h)));
            }
            let b = Bins::<T::Chunk>::bin(size);
            check_ring(t, h, limit, &mut |c| {
                if c != h && t.link(c, Link::Parent) != Some(c) {
                    return Err(CheckError::new("ring member not marked as such", t.addr(c)));
                }
                each(c, b)
            })?;
            prev = Some(h);
            node = t.link(h, Link::Right);
        }
        Ok(())
    };
    match marks {
        None => (0..words).try_for_each(&mut word)?,
        // A step's check: the words the summaries mark now or marked at the previous step.
        Some(m) => {
            let now = table.summary_words();
            for (s, (now, then)) in now.iter().zip(m.table).enumerate() {
                let mut bits = now | then;
                while bits != 0 {
                    word(s * 64 + bits.trailing_zeros() as usize)?;
                    bits &= bits - 1;
                }
            }
        }
    }
    if heads != marked {
        return Err(CheckError::new("bin bitmap disagrees with bin", 0));
    }
    if table.is_lone() {
        // The only chunk, outside the map and the chains, which are empty.
        let Some((c, size)) = table.min().filter(|_| marked == 0 && heads == 0) else {
            return Err(CheckError::new("size table's lone chunk is not alone", 0));
        };
        if t.size(c) != size || !(size_table::FIRST..=size_table::LAST).contains(&size) {
            return Err(CheckError::new("free chunk in the wrong bin", t.addr(c)));
        }
        return each(c, Bins::<T::Chunk>::bin(size));
    }
    // The cached smallest chunk is the head of the smallest size marked.
    let smallest = table.smallest();
    let want = smallest.and_then(|s| Some((table.head(t, s)?, s)));
    if table.min() != want {
        let at = table.min().map_or(0, |(c, _)| t.addr(c));
        return Err(CheckError::new(
            "size table's smallest chunk is not its smallest",
            at,
        ));
    }
    Ok(())
}

/// Bit `bit` of `size`; bits past the word (a walk that ran out of bits) read as zero.
#[inline]
fn bit_set(size: usize, bit: u32) -> bool {
    size.checked_shr(bit).unwrap_or(0) & 1 == 1
}

/// Checks an exact bin's list from `head` to `tail`: links agree both ways, one size, and
/// calls `each` on every member.
fn check_list<T: Tags>(
    t: &T,
    head: T::Chunk,
    tail: Option<T::Chunk>,
    limit: usize,
    each: &mut impl FnMut(T::Chunk) -> Result<(), CheckError>,
) -> Result<(), CheckError> {
    if t.link(head, Link::Prev).is_some() {
        return Err(CheckError::new("bin head has a predecessor", t.addr(head)));
    }
    let size = t.size(head);
    let mut c = head;
    for _ in 0..=limit {
        each(c)?;
        if t.size(c) != size {
            return Err(CheckError::new(
                "bin holds chunks of different sizes",
                t.addr(c),
            ));
        }
        let Some(next) = t.link(c, Link::Next) else {
            if tail != Some(c) {
                return Err(CheckError::new("bin tail is not its last chunk", t.addr(c)));
            }
            return Ok(());
        };
        if t.link(next, Link::Prev) != Some(c) {
            return Err(CheckError::new("bin links disagree", t.addr(c)));
        }
        c = next;
    }
    Err(CheckError::new("bin list does not end", t.addr(head)))
}

/// Checks a ring's links both ways and calls `each` on every member.
fn check_ring<T: Tags>(
    t: &T,
    head: T::Chunk,
    limit: usize,
    each: &mut impl FnMut(T::Chunk) -> Result<(), CheckError>,
) -> Result<(), CheckError> {
    let size = t.size(head);
    let mut c = head;
    for _ in 0..=limit {
        each(c)?;
        if t.size(c) != size {
            return Err(CheckError::new(
                "ring holds chunks of different sizes",
                t.addr(c),
            ));
        }
        let next = t
            .link(c, Link::Next)
            .ok_or(CheckError::new("ring link missing", t.addr(c)))?;
        if t.link(next, Link::Prev) != Some(c) {
            return Err(CheckError::new("ring links disagree", t.addr(c)));
        }
        if next == head {
            return Ok(());
        }
        c = next;
    }
    Err(CheckError::new("ring does not close", t.addr(head)))
}

/// Checks the trie under `node` (which branches on `bit`): sizes agree with the path, parent
/// links agree with child links, rings hang only off nodes.
fn check_trie<T: Tags>(
    t: &T,
    node: T::Chunk,
    bit: u32,
    limit: usize,
    each: &mut impl FnMut(T::Chunk) -> Result<(), CheckError>,
) -> Result<(), CheckError> {
    // Iterative depth-first walk; depth is bounded by the bits of a size (plus one level for
    // a child of a bit-0 node, marked by `bit` wrapping to `u32::MAX`, which may have none).
    const DEPTH: usize = 2 * usize::BITS as usize + 2;
    let mut stack: [(Option<T::Chunk>, u32, usize); DEPTH] = [(None, 0, 0); DEPTH];
    let mut top = 1;
    stack[0] = (Some(node), bit, t.size(node));
    while top > 0 {
        top -= 1;
        let (Some(n), bit, prefix) = stack[top] else {
            continue;
        };
        // `prefix` is the parent's size: all bits above the parent's branching bit agree.
        let size = t.size(n);
        let shift = bit.wrapping_add(2);
        if size.checked_shr(shift) != prefix.checked_shr(shift) {
            return Err(CheckError::new("trie node off its path's bits", t.addr(n)));
        }
        check_ring(t, n, limit, &mut |c| {
            if c != n && t.link(c, Link::Parent) != Some(c) {
                return Err(CheckError::new("ring member not marked as such", t.addr(c)));
            }
            each(c)
        })?;
        for (side, want) in [(Link::Left, false), (Link::Right, true)] {
            let Some(child) = t.link(n, side) else {
                continue;
            };
            if bit == u32::MAX || top + 1 >= DEPTH {
                return Err(CheckError::new(
                    "trie deeper than a size's bits",
                    t.addr(child),
                ));
            }
            if t.link(child, Link::Parent) != Some(n) {
                return Err(CheckError::new("trie parent link disagrees", t.addr(child)));
            }
            let csize = t.size(child);
            if bit_set(csize, bit) != want || csize == size {
                return Err(CheckError::new(
                    "trie child on the wrong side",
                    t.addr(child),
                ));
            }
            stack[top] = (Some(child), bit.wrapping_sub(1), size);
            top += 1;
        }
    }
    Ok(())
}
