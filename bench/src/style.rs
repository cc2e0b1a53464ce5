//! How each allocator looks in the charts: one colour, one marker and one line pattern per
//! allocator, looked up by its name, so that an allocator is drawn the same way in every chart
//! and a reader who has learnt it in one chart can find it in the next.
//!
//! The colours are Okabe and Ito's colour-blind-safe palette (vermillion, blue, sky blue,
//! bluish green, orange, reddish purple), with seven of Paul Tol's "muted" colours (olive, wine,
//! indigo, rose, teal, green, and sand darkened to show on white) and a grey for the references
//! where more are needed. Ten allocators share a chart, more than any palette keeps apart for
//! every reader, so each also has its own marker shape, and the address allocators (which hand
//! out ranges, not memory) have hollow markers: a line can be told from its neighbours by shape
//! alone, in print or in grey.

use plotters::style::RGBColor;

/// A marker drawn on a line at intervals, and beside its name in the legend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    None,
    Circle,
    Square,
    Diamond,
    TriangleUp,
    TriangleDown,
    Plus,
    Cross,
}

/// How one allocator (or the trace's live bytes) is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    pub color: RGBColor,
    pub shape: Shape,
    /// White inside, coloured outline (filled otherwise); bars are drawn paler.
    pub hollow: bool,
    /// A dashed line: the references, and the second configuration of an allocator that is
    /// charted beside its first (the 512 B granule beside the 256 B one).
    pub dashed: bool,
    /// Line width in pixels.
    pub width: u32,
}

// Okabe & Ito, "Color Universal Design" (2002).
const VERMILLION: RGBColor = RGBColor(0xD5, 0x5E, 0x00);
const BLUE: RGBColor = RGBColor(0x00, 0x72, 0xB2);
const SKY_BLUE: RGBColor = RGBColor(0x56, 0xB4, 0xE9);
const BLUISH_GREEN: RGBColor = RGBColor(0x00, 0x9E, 0x73);
const ORANGE: RGBColor = RGBColor(0xE6, 0x9F, 0x00);
const REDDISH_PURPLE: RGBColor = RGBColor(0xCC, 0x79, 0xA7);
// Paul Tol's "muted" scheme.
const OLIVE: RGBColor = RGBColor(0x99, 0x99, 0x33);
const WINE: RGBColor = RGBColor(0x88, 0x22, 0x55);
const INDIGO: RGBColor = RGBColor(0x33, 0x22, 0x88);
const ROSE: RGBColor = RGBColor(0xCC, 0x66, 0x77);
const TEAL: RGBColor = RGBColor(0x44, 0xAA, 0x99);
const GREEN: RGBColor = RGBColor(0x11, 0x77, 0x33);
/// Tol's sand (#DDCC77), darkened: as it is, it hardly shows on white.
const SAND: RGBColor = RGBColor(0xB8, 0xA1, 0x3A);
// References: what the allocators are read against.
const GREY: RGBColor = RGBColor(0x70, 0x70, 0x70);
const INK: RGBColor = RGBColor(0, 0, 0);

/// The name of the series of a trace's live bytes in footprint charts: the floor every
/// allocator's footprint is read against.
pub const LIVE: &str = "live bytes (trace)";

const fn look(color: RGBColor, shape: Shape, hollow: bool, dashed: bool) -> Look {
    Look {
        color,
        shape,
        hollow,
        dashed,
        width: 2,
    }
}

/// Every allocator's look, by the name it has in tables and charts (`Peer::name`). The host
/// allocators are filled, the address allocators hollow; a granule that is charted alone (16 B
/// on host traces, 256 B on the device trace) keeps its allocator's look.
const LOOKS: &[(&str, Look)] = &[
    (
        LIVE,
        Look {
            color: INK,
            shape: Shape::None,
            hollow: false,
            dashed: false,
            width: 3,
        },
    ),
    (
        "tagalloc inline",
        look(VERMILLION, Shape::Circle, false, false),
    ),
    // The same heap without statistics: the same allocator in another configuration, so its
    // colour, dashed, with its own marker. Its footprint line lies on the default's (the same
    // addresses); its speed is what differs.
    (
        "tagalloc inline, no statistics",
        look(VERMILLION, Shape::Square, false, true),
    ),
    // The same heap with the compact bins: another configuration, its colour, dotted by its
    // own marker, hollow.
    (
        "tagalloc inline, compact bins",
        look(VERMILLION, Shape::TriangleDown, true, true),
    ),
    ("talc", look(BLUE, Shape::TriangleUp, false, false)),
    // talc built with its `counters` feature (the bench's `talc-counters`): talc in another
    // configuration, so its colour, dashed, as for the heap without statistics.
    (
        "talc, with its counters",
        look(BLUE, Shape::TriangleUp, false, true),
    ),
    ("rlsf", look(SKY_BLUE, Shape::Square, false, false)),
    ("dlmalloc", look(BLUISH_GREEN, Shape::Diamond, false, false)),
    (
        "linked_list_allocator",
        look(OLIVE, Shape::Plus, false, false),
    ),
    (
        "buddy_system_allocator",
        look(WINE, Shape::Cross, false, false),
    ),
    (
        "glibc malloc",
        look(ORANGE, Shape::TriangleDown, false, false),
    ),
    // The programs benchmark: allocators preloaded into real programs. tagalloc there is the
    // host pool (`HostPool`, what `HostAllocator` is), so it has HostAllocator's look.
    (
        "tagalloc (LD_PRELOAD)",
        look(ROSE, Shape::Plus, false, false),
    ),
    ("jemalloc", look(TEAL, Shape::Square, false, false)),
    ("mimalloc", look(GREEN, Shape::Diamond, false, false)),
    ("tcmalloc", look(SAND, Shape::Cross, false, false)),
    ("bump (reference)", look(GREY, Shape::Circle, true, true)),
    (
        "bump (reference, addresses)",
        look(GREY, Shape::Circle, true, true),
    ),
    (
        "tagalloc detached (16 B)",
        look(REDDISH_PURPLE, Shape::Square, true, false),
    ),
    (
        "tagalloc detached (256 B)",
        look(REDDISH_PURPLE, Shape::Square, true, false),
    ),
    (
        "tagalloc detached (512 B)",
        look(REDDISH_PURPLE, Shape::TriangleUp, true, true),
    ),
    (
        "offset-allocator (16 B units)",
        look(INDIGO, Shape::Diamond, true, false),
    ),
    (
        "offset-allocator (256 B units)",
        look(INDIGO, Shape::Diamond, true, false),
    ),
    (
        "offset-allocator (512 B units)",
        look(INDIGO, Shape::TriangleDown, true, true),
    ),
    // The shared heaps of the `threads` benchmark: `GlobalHeap` is the inline heap behind a
    // lock and looks like it; with the futex lock, a second configuration, dashed with its own
    // marker; the pool over mmap regions in Tol's rose.
    (
        "tagalloc GlobalHeap",
        look(VERMILLION, Shape::Circle, false, false),
    ),
    (
        "tagalloc GlobalHeap (futex)",
        look(VERMILLION, Shape::Diamond, false, true),
    ),
    (
        "tagalloc HostAllocator",
        look(ROSE, Shape::Plus, false, false),
    ),
];

/// What anything not in the table gets: a thin grey dashed line, plain enough to stand out as
/// unstyled (the tests keep every allocator of the tool in the table).
const UNKNOWN: Look = Look {
    color: GREY,
    shape: Shape::None,
    hollow: false,
    dashed: true,
    width: 1,
};

/// The look of the allocator (or series) called `name`.
pub fn of(name: &str) -> Look {
    LOOKS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(UNKNOWN, |(_, l)| *l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::Peer;

    /// The allocators that share a chart: host traces and the speed benchmarks, the device
    /// trace, the threads benchmark, and the real programs.
    fn charts() -> [Vec<String>; 4] {
        let host = Peer::HOST.iter().chain(&Peer::ADDRESSES);
        [
            host.map(|p| p.name()).chain([LIVE.to_string()]).collect(),
            Peer::DEVICE
                .iter()
                .map(|p| p.name())
                .chain([LIVE.to_string()])
                .collect(),
            crate::threads::Contender::ALL
                .iter()
                .map(|c| c.name().to_string())
                .collect(),
            crate::programs::allocator_names()
                .into_iter()
                .map(String::from)
                .collect(),
        ]
    }

    /// One colour per allocator across all charts: no two allocators share a colour, except
    /// configurations of one (tagalloc's inline heap alone, without statistics and behind a
    /// lock; the host pool as `HostAllocator` and as the preload library; granules of the
    /// detached heap and of offset-allocator; talc with and without its counters) and the
    /// references.
    #[test]
    fn no_two_allocators_share_a_colour() {
        fn family(n: &str) -> &str {
            if n.starts_with("tagalloc inline") || n.starts_with("tagalloc GlobalHeap") {
                "tagalloc inline"
            } else if n == "tagalloc HostAllocator" || n == "tagalloc (LD_PRELOAD)" {
                "tagalloc host pool"
            } else if n.starts_with("tagalloc detached") {
                "tagalloc detached"
            } else if n.starts_with("talc") {
                "talc"
            } else if n.starts_with("offset-allocator") {
                "offset-allocator"
            } else if n.starts_with("bump") {
                "bump"
            } else {
                n
            }
        }
        for (i, (a, la)) in LOOKS.iter().enumerate() {
            for (b, lb) in &LOOKS[..i] {
                if family(a) != family(b) {
                    assert!(la.color != lb.color, "{a} and {b} share a colour");
                }
            }
        }
    }

    #[test]
    fn every_allocator_has_its_own_look() {
        for names in charts() {
            for (i, a) in names.iter().enumerate() {
                assert!(LOOKS.iter().any(|(n, _)| n == a), "{a} has no look");
                for b in &names[..i] {
                    let (la, lb) = (of(a), of(b));
                    assert!(la.color != lb.color || la.shape != lb.shape, "{a} and {b}");
                    assert!(
                        la.shape != lb.shape || la.hollow != lb.hollow || la.dashed != lb.dashed,
                        "{a} and {b} differ only by colour"
                    );
                }
            }
        }
    }

    #[test]
    fn unknown_names_get_the_plain_look() {
        assert_eq!(of("no such allocator"), UNKNOWN);
        assert_eq!(of("talc").color, BLUE);
    }
}
