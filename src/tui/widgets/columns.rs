//! Table columns that give way by priority on narrow terminals: each column
//! wants the width of its widest cell; when the table is too narrow the
//! lowest-ranked column shrinks to its minimum, then (if it may) is left
//! out, before the next one gives anything. Ids and failure modes rank
//! highest and keep their width longest; long ids are shortened in the
//! middle (`gen-offl…-0042`), so the distinguishing tail stays.
//!
//! Widths are counted in characters (one cell each): the texts these
//! tables show (ids, modes, statuses, numbers, stars) are such.

/// How one column behaves when the table is too narrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The width it takes when there is room (its widest cell or header).
    pub want: u16,
    /// The narrowest it may become (`want` for a column that keeps its width).
    pub min: u16,
    /// Lower ranks give way first.
    pub rank: u8,
    /// Whether it may be left out once shrinking is not enough.
    pub optional: bool,
    /// Whether it takes the room left over when the table is wider than needed.
    pub grow: bool,
}

impl Column {
    /// A column `want` cells wide that may shrink to `min`.
    pub fn new(want: usize, min: u16, rank: u8) -> Column {
        let want = want.min(u16::MAX as usize) as u16;
        Column {
            want: want.max(1),
            min: min.min(want).max(1),
            rank,
            optional: false,
            grow: false,
        }
    }

    /// A column that keeps its width until it is left out.
    pub fn fixed(want: usize, rank: u8) -> Column {
        Column::new(want, u16::MAX, rank)
    }

    /// May be left out when shrinking is not enough.
    pub fn optional(mut self) -> Column {
        self.optional = true;
        self
    }

    /// Takes the room left over.
    pub fn grow(mut self) -> Column {
        self.grow = true;
        self
    }
}

/// The width of the widest of `header` and `cells`, in characters.
pub fn widest<'a>(header: &str, cells: impl IntoIterator<Item = &'a str>) -> usize {
    cells
        .into_iter()
        .map(|c| c.chars().count())
        .fold(header.chars().count(), usize::max)
}

/// Widths of `cols` in a table `width` cells wide with `spacing` cells
/// between columns: `None` for a column left out.
pub fn fit(cols: &[Column], width: u16, spacing: u16) -> Vec<Option<u16>> {
    let mut w: Vec<Option<u16>> = cols.iter().map(|c| Some(c.want)).collect();
    let total = |w: &[Option<u16>]| -> u32 {
        let shown = w.iter().flatten().count() as u32;
        w.iter().flatten().map(|&x| u32::from(x)).sum::<u32>()
            + u32::from(spacing) * shown.saturating_sub(1)
    };
    // Lowest rank first; of equal ranks, the rightmost first.
    let mut order: Vec<usize> = (0..cols.len()).collect();
    order.sort_by_key(|&i| (cols[i].rank, std::cmp::Reverse(i)));
    for &i in &order {
        let t = total(&w);
        if t <= u32::from(width) {
            break;
        }
        let excess = t - u32::from(width);
        let cur = u32::from(w[i].unwrap_or(0));
        let shrunk = cur.saturating_sub(excess).max(u32::from(cols[i].min));
        w[i] = Some(shrunk as u16);
        if total(&w) > u32::from(width) && cols[i].optional {
            w[i] = None;
        }
    }
    // Room left over goes to the growing columns shown, the first first.
    let t = total(&w);
    if t < u32::from(width) {
        let growing: Vec<usize> = (0..cols.len())
            .filter(|&i| cols[i].grow && w[i].is_some())
            .collect();
        if !growing.is_empty() {
            let room = (u32::from(width) - t) as usize;
            for (k, &i) in growing.iter().enumerate() {
                let share = room / growing.len() + usize::from(k < room % growing.len());
                w[i] = w[i].map(|x| x.saturating_add(share as u16));
            }
        }
    }
    w
}

/// The items of the columns shown (`widths` from [`fit`]), in order.
pub fn shown<T>(items: impl IntoIterator<Item = T>, widths: &[Option<u16>]) -> Vec<T> {
    items
        .into_iter()
        .zip(widths)
        .filter_map(|(item, w)| w.map(|_| item))
        .collect()
}

/// The widths of the columns shown, as table constraints.
pub fn constraints(widths: &[Option<u16>]) -> Vec<ratatui::layout::Constraint> {
    widths
        .iter()
        .flatten()
        .map(|&w| ratatui::layout::Constraint::Length(w))
        .collect()
}

/// `s` in at most `width` characters, cut at the end with `…`.
pub fn cut_end(s: &str, width: u16) -> String {
    let width = width as usize;
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// `s` in at most `width` characters, cut in the middle with `…`: the
/// head and the last `-`/`_`/`#`/`/`-separated part (a job's or a run's
/// number, a sample) stay, as far as they fit (`gen-offl…-0042`).
pub fn cut_middle(s: &str, width: u16) -> String {
    let width = width as usize;
    let chars: Vec<char> = s.chars().collect();
    if chars.len() <= width {
        return s.to_string();
    }
    if width < 3 {
        return cut_end(s, width as u16);
    }
    let room = width - 1;
    // The tail: from the last separator, at most half the room.
    let sep = chars
        .iter()
        .rposition(|c| matches!(c, '-' | '_' | '#' | '/'))
        .filter(|&p| p > 0);
    let tail_len = sep
        .map_or(room / 2, |p| chars.len() - p)
        .min(room / 2)
        .max(1);
    let head_len = room - tail_len;
    let head: String = chars[..head_len].iter().collect();
    let tail: String = chars[chars.len() - tail_len..].iter().collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_give_way_lowest_rank_first_and_ids_keep_their_width() {
        let cols = [
            Column::new(20, 10, 9),           // id
            Column::new(15, 6, 1).optional(), // end reason
            Column::fixed(15, 8),             // failure mode
            Column::fixed(6, 2).optional(),   // rating
        ];
        // Room for all.
        assert_eq!(fit(&cols, 80, 1), [Some(20), Some(15), Some(15), Some(6)]);
        // The end reason shrinks first.
        assert_eq!(fit(&cols, 50, 1), [Some(20), Some(6), Some(15), Some(6)]);
        // Then goes; then the rating goes; the id shrinks last.
        assert_eq!(fit(&cols, 40, 1), [Some(20), None, Some(15), None]);
        assert_eq!(fit(&cols, 30, 1), [Some(14), None, Some(15), None]);
        // Too narrow even so: the kept columns stay at their minimum.
        assert_eq!(fit(&cols, 10, 1), [Some(10), None, Some(15), None]);
    }

    #[test]
    fn room_left_over_goes_to_growing_columns() {
        let cols = [Column::fixed(10, 9), Column::new(10, 5, 1).grow()];
        assert_eq!(fit(&cols, 41, 1), [Some(10), Some(30)]);
    }

    #[test]
    fn long_ids_are_shortened_in_the_middle_keeping_their_number() {
        assert_eq!(cut_middle("gen-offline-0042", 14), "gen-offl…-0042");
        assert_eq!(cut_middle("generate-offline-0042", 14), "generate…-0042");
        assert_eq!(cut_middle("generate-offline-2", 14), "generate-of…-2");
        assert_eq!(cut_middle("short", 14), "short");
        assert_eq!(cut_middle("archive-logs#12", 10), "archiv…#12");
        assert_eq!(cut_middle("abcdef", 2), "a…");
        assert_eq!(cut_end("turn_exhaustion", 8), "turn_ex…");
        assert_eq!(cut_end("done", 8), "done");
        assert_eq!(widest("Task", ["a", "count-words"]), 11);
    }
}
