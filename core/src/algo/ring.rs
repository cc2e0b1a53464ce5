//! Rings: the circular FIFO lists, threaded through the `Next` and `Prev` links, of the free
//! chunks of one size behind the oldest, as a trie node and a size-table head keep them.

use crate::algo::tags::{Link, Tags};

/// Calls `each(chunk, size)` for every chunk of the ring headed by `head`, oldest first.
pub(crate) fn ring_each<T: Tags>(
    t: &T,
    head: T::Chunk,
    size: usize,
    each: &mut impl FnMut(T::Chunk, usize),
) {
    let mut c = head;
    loop {
        each(c, size);
        match t.link(c, Link::Next) {
            Some(next) if next != head => c = next,
            _ => break,
        }
    }
}

pub(crate) fn ring_init<T: Tags>(t: &mut T, c: T::Chunk) {
    t.set_link(c, Link::Next, Some(c));
    t.set_link(c, Link::Prev, Some(c));
}

/// Appends `c` to the ring headed by `head` (the ring's oldest end).
pub(crate) fn ring_push_back<T: Tags>(t: &mut T, head: T::Chunk, c: T::Chunk) {
    let tail = t.link(head, Link::Prev).unwrap_or(head);
    t.set_link(c, Link::Next, Some(head));
    t.set_link(c, Link::Prev, Some(tail));
    t.set_link(tail, Link::Next, Some(c));
    t.set_link(head, Link::Prev, Some(c));
}

/// Unlinks `c` from its ring; returns the chunk after it, or `None` if `c` was alone.
pub(crate) fn ring_unlink<T: Tags>(t: &mut T, c: T::Chunk) -> Option<T::Chunk> {
    let next = t.link(c, Link::Next).unwrap_or(c);
    if next == c {
        return None;
    }
    let prev = t.link(c, Link::Prev).unwrap_or(c);
    t.set_link(prev, Link::Next, Some(next));
    t.set_link(next, Link::Prev, Some(prev));
    Some(next)
}
