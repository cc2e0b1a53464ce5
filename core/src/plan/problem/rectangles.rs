//! A problem as an interval problem: each unit one rectangle, its extent over the hull of its
//! members' lifetimes. Valid (a rectangle covers all its members, so rectangles that never
//! meet place members that never meet), exact when no unit has a hole (see `solve`), and what
//! TensorFlow Lite does with in-place tensors: merge them into one, then plan the intervals.

use alloc::vec::Vec;

use super::super::Buffer;
use super::error::ProblemError;
use super::reach::Time;
use super::units::Units;
use super::{Layout, Lifetimes, Problem};

/// The units of an interval problem in one space without pins, as [`Buffer`]s.
///
/// Invariant: `buffers[u]` is unit `u` (`id` = `u`), of the unit's extent and alignment, live
/// over the hull of its members' intervals; buffer `b` of the problem sits at `rel[b]` in unit
/// `unit[b]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rectangles {
    /// One interval buffer per unit.
    pub buffers: Vec<Buffer>,
    unit: Vec<u32>,
    rel: Vec<u64>,
    sizes: Vec<u64>,
}

impl Rectangles {
    /// The rectangles of `problem` (checked as [`solve`](super::solve) checks it); `None` for
    /// a graph problem, several spaces or a pin, which rectangles cannot express.
    ///
    /// ```
    /// use tagalloc::plan::{greedy_by_size, Alias, Item, Lifetimes, Problem, Rectangles};
    ///
    /// let problem = Problem {
    ///     items: vec![Item::new(64), Item::new(64).with_alias(Alias::write(0, 0))],
    ///     lifetimes: Lifetimes::Intervals(vec![(0, 2), (1, 3)]),
    ///     ..Problem::default()
    /// };
    /// let rects = Rectangles::of(&problem)?.unwrap();
    /// assert_eq!(rects.buffers.len(), 1); // merged: one buffer over [0, 3)
    /// let plan = greedy_by_size(&rects.buffers).unwrap();
    /// assert_eq!(rects.layout(&problem, &plan.offsets).arenas, vec![64]);
    /// # Ok::<(), tagalloc::plan::ProblemError>(())
    /// ```
    pub fn of(problem: &Problem) -> Result<Option<Rectangles>, ProblemError> {
        let time = Time::new(problem, super::SolveOptions::default().bit_limit)?;
        let units = Units::new(problem, &time)?;
        Ok(Rectangles::from_units(problem, &units))
    }

    pub(super) fn from_units(p: &Problem, units: &Units) -> Option<Rectangles> {
        let Lifetimes::Intervals(iv) = &p.lifetimes else {
            return None;
        };
        if p.spaces.len() != 1 || units.pinned.iter().any(Option::is_some) {
            return None;
        }
        let buffers = units
            .members
            .iter()
            .enumerate()
            .map(|(u, m)| {
                let start = m.iter().map(|&b| iv[b as usize].0).min().unwrap_or(0);
                let end = m.iter().map(|&b| iv[b as usize].1).max().unwrap_or(1);
                Buffer::new(u as u64, units.extent[u], start, end).with_align(units.align[u])
            })
            .collect();
        Some(Rectangles {
            buffers,
            unit: units.unit.clone(),
            rel: units.rel.clone(),
            sizes: p.items.iter().map(|i| i.size).collect(),
        })
    }

    /// The layout placing each unit at `offsets[u]` (one offset per rectangle, as a
    /// [`Plan`](super::super::Plan) of [`Rectangles::buffers`] gives them). `problem` is the
    /// one the rectangles were made of.
    pub fn layout(&self, problem: &Problem, offsets: &[u64]) -> Layout {
        let n = self.unit.len();
        let mut layout = Layout {
            spaces: alloc::vec![0; n],
            offsets: alloc::vec![0; n],
            arenas: alloc::vec![0; problem.spaces.len().max(1)],
        };
        for b in 0..n {
            let at = offsets.get(self.unit[b] as usize).copied().unwrap_or(0) + self.rel[b];
            layout.offsets[b] = at;
            layout.arenas[0] = layout.arenas[0].max(at + self.sizes[b]);
        }
        layout
    }
}
