//! Words for messages, shared by the programs over this crate (the malloc library, the bench
//! tools and the replay tests) so that each is written once: the known name nearest to a
//! misspelt one, for refusals that suggest what was meant (`did you mean "alignment"?`), and a
//! count with its noun in the right number (`1 region`, `2 regions`). Neither allocates: the
//! malloc library uses them inside the allocator.

use core::fmt;

/// The longest name compared; longer ones are never suggested (nor suggested for), which keeps
/// the distance's rows on the stack.
const LONGEST: usize = 64;

/// The name of `known` nearest to `word` by edit distance (insertions, deletions and
/// substitutions of bytes), if one is near enough to be a slip rather than another word: at
/// most a third of `word`'s length away (at least 1). Ties go to the first. `O(Σ |word| ·
/// |name|)`, nothing allocated.
pub fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.len() / 3).max(1);
    let mut best: Option<(usize, &str)> = None;
    for name in known {
        let Some(d) = distance(word.as_bytes(), name.as_bytes()) else {
            continue;
        };
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, name));
        }
    }
    best.map(|(_, name)| name)
}

/// Levenshtein distance of `a` and `b`, or `None` if either is longer than [`LONGEST`].
fn distance(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() > LONGEST || b.len() > LONGEST {
        return None;
    }
    // `row[j]`: the distance from the first `i` bytes of `a` to the first `j` of `b`.
    let mut row = [0usize; LONGEST + 1];
    for (j, slot) in row.iter_mut().enumerate().take(b.len() + 1) {
        *slot = j;
    }
    for (i, &x) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(x != y))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    Some(row[b.len()])
}

/// A figure and the noun it counts, singular for 1 only: `1 region`, `0 regions`,
/// `2 misses`. Made by [`count`].
#[derive(Clone, Copy, Debug)]
pub struct Count<'a> {
    n: u64,
    one: &'a str,
    many: &'a str,
}

/// `n` (any unsigned figure) counting `one` or `many`, for display.
pub fn count<'a>(n: impl TryInto<u64>, one: &'a str, many: &'a str) -> Count<'a> {
    Count {
        n: n.try_into().unwrap_or(u64::MAX),
        one,
        many,
    }
}

/// `one` for a count of 1, `many` for any other (0 included).
pub fn noun<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

impl fmt::Display for Count<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.n, noun(self.n, self.one, self.many))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(distance(b"", b""), Some(0));
        assert_eq!(distance(b"abc", b""), Some(3));
        assert_eq!(distance(b"size", b"sise"), Some(1));
        assert_eq!(distance(b"alignmnet", b"alignment"), Some(2));
        assert_eq!(distance(b"kitten", b"sitting"), Some(3));
        assert_eq!(distance(&[b'a'; 65], b"a"), None);
    }

    #[test]
    fn the_nearest_near_enough_name() {
        let columns = [
            "id",
            "lower",
            "start",
            "upper",
            "end",
            "size",
            "alignment",
            "align",
        ];
        assert_eq!(nearest("alignmnet", columns), Some("alignment"));
        assert_eq!(nearest("sise", columns), Some("size"));
        assert_eq!(nearest("Size", columns), Some("size"));
        // Another word altogether: nothing suggested.
        assert_eq!(nearest("from", columns), None);
        assert_eq!(nearest("bytes", columns), None);
        assert_eq!(
            nearest("CHEKED", ["STATS", "CHECKED", "ON_MISUSE"]),
            Some("CHECKED")
        );
        assert_eq!(nearest("x", []), None);
    }

    #[test]
    fn counts_agree_in_number() {
        assert_eq!(count(1u64, "region", "regions").to_string(), "1 region");
        assert_eq!(count(0usize, "region", "regions").to_string(), "0 regions");
        assert_eq!(count(2u32, "miss", "misses").to_string(), "2 misses");
    }
}
