//! [`MarkerFilter`] takes the exec protocol's internal end markers
//! (`__ENDLESS_<tag>_<status>__` lines) out of a session's byte stream, fed
//! in chunks as they arrive: the one filter between a session and people,
//! used for its recording and live stream (see `audience`) and again by
//! the TUI's panes and replay, which may read recordings made before
//! recordings were clean.

use super::marker::MARKER_START;

/// What every end marker starts with.
const MARKER: &[u8] = MARKER_START.as_bytes();

/// Longest marker line kept back while waiting for its end.
const MAX_MARKER: usize = 256;

/// Removes end-marker lines from a byte stream fed in arbitrary chunks.
///
/// The protocol prints `\n__ENDLESS_<tag>_<status>__\n` after each command
/// (the tty turns `\n` into `\r\n`); the filter drops that whole line and
/// its leading newline, ends an output line left unterminated (so the next
/// output starts on a line of its own), and reports where a marker was.
///
/// The tty may hand a marker's leading `\r\n` over in one read and the
/// marker in the next. A newline that ends a line of output is shown at
/// once, so the cursor follows a command's last line without waiting; one
/// that would leave a blank line (it follows another newline) is held until
/// the next read shows whether a marker follows it. Every split of a stream
/// into reads shows the same screen.
#[derive(Debug, Clone)]
pub struct MarkerFilter {
    /// Bytes held back: the possible start of a marker.
    pending: Vec<u8>,
    /// Something other than `\r` was shown since the last `\n`.
    mid_line: bool,
    /// The last byte shown (`\n` at the start: a line begins there).
    last: u8,
}

impl Default for MarkerFilter {
    fn default() -> Self {
        MarkerFilter {
            pending: Vec::new(),
            mid_line: false,
            last: b'\n',
        }
    }
}

/// One piece of filtered output.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// Bytes to show.
    Bytes(Vec<u8>),
    /// A marker was removed here (a command ended); any unterminated line
    /// before it was already ended by a `\r\n` in the bytes.
    Marker,
}

fn is_tag_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

impl MarkerFilter {
    /// How many trailing bytes of `data[i..]` (output after any marker) to
    /// hold back: a newline that would leave a blank line, or a `\r` that may
    /// be the first half of one, in case a marker follows in the next read.
    fn blank_line_tail(&self, data: &[u8], i: usize) -> usize {
        let nl = match newline_before(&data[i..]) {
            0 => usize::from(data.ends_with(b"\r")),
            nl => nl,
        };
        let before = match data.len() - nl {
            n if n > i => data[n - 1],
            // Right after a marker: a line begins there.
            _ if i > 0 => b'\n',
            _ => self.last,
        };
        if before == b'\n' {
            nl
        } else {
            0
        }
    }

    /// Filter the next chunk: returns the pieces to show, in order. Bytes
    /// that may start a marker are kept until the next chunk decides.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Piece> {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut shown = Vec::new();
        let mut i = 0;
        while i < data.len() {
            let Some(pos) = find(&data[i..], MARKER) else {
                // Hold back a tail that could begin a marker, and a newline
                // that would leave a blank line.
                let keep = match partial_tail(&data[i..]) {
                    0 => self.blank_line_tail(&data, i),
                    keep => keep,
                };
                let end = data.len() - keep;
                shown.extend_from_slice(&data[i..end]);
                self.pending = data[end..].to_vec();
                i = data.len();
                break;
            };
            let start = i + pos;
            let run = data[start..]
                .iter()
                .take_while(|b| is_tag_byte(**b))
                .count();
            let after = start + run;
            // Held back with the marker: the protocol's newline before it.
            let hold = start - newline_before(&data[i..start]);
            if after >= data.len() {
                // The marker may still be arriving.
                if data.len() - start > MAX_MARKER {
                    shown.extend_from_slice(&data[i..]);
                } else {
                    shown.extend_from_slice(&data[i..hold]);
                    self.pending = data[hold..].to_vec();
                }
                i = data.len();
                break;
            }
            let line = &data[start..after];
            let is_marker = line.len() > MARKER.len() + 2 && line.ends_with(b"__");
            let end = match (&data[after..], is_marker) {
                ([b'\r', b'\n', ..], true) => Some(after + 2),
                ([b'\n', ..], true) => Some(after + 1),
                ([b'\r'], true) => {
                    // Wait for the `\n`.
                    shown.extend_from_slice(&data[i..hold]);
                    self.pending = data[hold..].to_vec();
                    i = data.len();
                    break;
                }
                _ => None,
            };
            match end {
                Some(end) => {
                    // The newline printed before the marker is the protocol's.
                    shown.extend_from_slice(&data[i..hold]);
                    if !shown.is_empty() {
                        out.push(Piece::Bytes(std::mem::take(&mut shown)));
                    }
                    out.push(Piece::Marker);
                    i = end;
                }
                None => {
                    shown.extend_from_slice(&data[i..after]);
                    i = after;
                }
            }
        }
        if i < data.len() {
            shown.extend_from_slice(&data[i..]);
        }
        if !shown.is_empty() {
            out.push(Piece::Bytes(shown));
        }
        self.end_lines(out)
    }

    /// Insert `\r\n` before a marker that follows an unterminated line.
    fn end_lines(&mut self, pieces: Vec<Piece>) -> Vec<Piece> {
        let mut out = Vec::with_capacity(pieces.len() + 1);
        for piece in pieces {
            match piece {
                Piece::Bytes(b) => {
                    // A carriage return alone leaves a line empty.
                    let text = |bytes: &[u8]| bytes.iter().any(|c| *c != b'\r');
                    self.mid_line = match b.iter().rposition(|c| *c == b'\n') {
                        Some(nl) => text(&b[nl + 1..]),
                        None => self.mid_line || text(&b),
                    };
                    self.last = b.last().copied().unwrap_or(self.last);
                    out.push(Piece::Bytes(b));
                }
                Piece::Marker => {
                    if self.mid_line {
                        self.mid_line = false;
                        out.push(Piece::Bytes(b"\r\n".to_vec()));
                    }
                    self.last = b'\n';
                    out.push(Piece::Marker);
                }
            }
        }
        out
    }

    /// The bytes to show of the next chunk (markers dropped).
    pub fn push_bytes(&mut self, bytes: &[u8]) -> Vec<u8> {
        let pieces = self.push(bytes);
        bytes_of(pieces)
    }

    /// The bytes to show before a line that is not the session's output
    /// (the echo of a command about to run): what was held back (the last
    /// command's marker came already, so no marker follows it) and a
    /// newline ending a line left unterminated. The line then starts at the
    /// beginning of a line, as after a marker.
    pub fn before_line(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.pending);
        let pieces = self.end_lines(vec![Piece::Bytes(held), Piece::Marker]);
        bytes_of(pieces)
    }

    /// The bytes still held back (the stream ended: they were no marker).
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// Filter a whole text at once (recordings): markers removed, held
    /// bytes flushed.
    pub fn clean(text: &[u8]) -> Vec<u8> {
        let mut f = MarkerFilter::default();
        let mut out = f.push_bytes(text);
        out.extend(f.finish());
        out
    }
}

/// The bytes of `pieces`, markers left out.
fn bytes_of(pieces: Vec<Piece>) -> Vec<u8> {
    let mut out = Vec::new();
    for piece in pieces {
        if let Piece::Bytes(b) = piece {
            out.extend(b);
        }
    }
    out
}

/// Length of the newline (`\r\n` or `\n`) that `data` ends with.
fn newline_before(data: &[u8]) -> usize {
    if data.ends_with(b"\r\n") {
        2
    } else if data.ends_with(b"\n") {
        1
    } else {
        0
    }
}

/// How many trailing bytes of `data` could begin `\r\n__ENDLESS_`.
fn partial_tail(data: &[u8]) -> usize {
    let full: Vec<u8> = [b"\r\n".as_slice(), MARKER].concat();
    for k in (1..full.len()).rev() {
        if data.len() >= k {
            let tail = &data[data.len() - k..];
            // A suffix of the text that is a prefix of one of the forms; a
            // bare trailing newline is shown at once (printf writes the
            // marker with its newline in one piece).
            for form in [&full[..], &full[1..], &full[2..]] {
                if k < form.len() && form.starts_with(tail) && tail.contains(&b'_') {
                    return k;
                }
            }
        }
    }
    0
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(chunks: &[&[u8]]) -> Vec<u8> {
        let mut f = MarkerFilter::default();
        let mut out = Vec::new();
        for c in chunks {
            for p in f.push(c) {
                match p {
                    Piece::Bytes(b) => out.extend(b),
                    Piece::Marker => out.extend_from_slice(b"|"),
                }
            }
        }
        out
    }

    #[test]
    fn markers_are_removed_across_chunks() {
        let s = b"a\r\nb\r\n__ENDLESS_tok_1_0__\r\nc\r\n\r\n__ENDLESS_tok_2_127__\r\n";
        assert_eq!(run(&[s]), b"a\r\nb\r\n|c\r\n|");
        // Any split, in two or three reads, shows the same screen with the
        // cursor in the same place, on a screen that scrolls too.
        for rows in [10, 3] {
            let screen = |bytes: Vec<u8>| {
                let mut p = vt100::Parser::new(rows, 20, 0);
                p.process(&bytes);
                (p.screen().contents(), p.screen().cursor_position())
            };
            let whole = screen(run(&[s]));
            for cut in 1..s.len() {
                let out = run(&[&s[..cut], &s[cut..]]);
                assert_eq!(screen(out), whole, "cut at {cut}, {rows} rows");
                for second in cut + 1..s.len() {
                    let out = run(&[&s[..cut], &s[cut..second], &s[second..]]);
                    assert_eq!(screen(out), whole, "cuts at {cut}, {second}");
                }
            }
        }
        // The tty's usual split: the output, its newline, then the marker.
        // The cursor moves below the last line at once.
        let seq: Vec<u8> = (1..=60)
            .flat_map(|i| format!("{i}\r\n").into_bytes())
            .collect();
        let mut f = MarkerFilter::default();
        let mut p = vt100::Parser::new(48, 20, 0);
        p.process(&f.push_bytes(&seq));
        assert_eq!(p.screen().cursor_position(), (47, 0));
        for chunk in [b"\r\n".as_slice(), b"__ENDLESS_t_1_0__\r\n"] {
            p.process(&f.push_bytes(chunk));
        }
        assert!(p.screen().contents().ends_with("59\n60"));
        assert_eq!(p.screen().cursor_position(), (47, 0));
        // A blank line that no marker follows is shown with the next read.
        assert_eq!(f.push_bytes(b"x\r\n\r\n"), b"x\r\n");
        assert_eq!(f.push_bytes(b"y"), b"\r\ny");
        // Not a marker: shown as is.
        assert_eq!(run(&[b"x __ENDLESS_ y\r\n"]), b"x __ENDLESS_ y\r\n");
        assert_eq!(
            MarkerFilter::clean(
                b"out\r\n__ENDLESS_t_1_0__\r\nno newline\r\n__ENDLESS_t_2_0__\r\n$ "
            ),
            b"out\r\nno newline\r\n$ "
        );
    }

    #[test]
    fn before_a_line_of_its_own_held_bytes_come_out_and_the_line_ends() {
        let mut f = MarkerFilter::default();
        // Right after a marker: nothing to add.
        assert_eq!(
            f.push_bytes(b"out\r\n\r\n__ENDLESS_t_1_0__\r\n"),
            b"out\r\n"
        );
        assert_eq!(f.before_line(), b"");
        // A blank line held back in case a marker followed: shown now.
        assert_eq!(f.push_bytes(b"late\r\n\r\n"), b"late\r\n");
        assert_eq!(f.before_line(), b"\r\n");
        // An unterminated line (background output) is ended.
        assert_eq!(f.push_bytes(b"partial"), b"partial");
        assert_eq!(f.before_line(), b"\r\n");
        // What looked like a marker's start was none.
        assert_eq!(f.push_bytes(b"x\r\n__END"), b"x");
        assert_eq!(f.before_line(), b"\r\n__END\r\n");
        // Afterwards a line begins: a marker right away leaves nothing.
        assert_eq!(f.push_bytes(b"\r\n__ENDLESS_t_2_0__\r\n"), b"");
    }
}
