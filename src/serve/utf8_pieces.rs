//! Text from a byte stream cut anywhere (a pipe's, a terminal's): each
//! piece up to the last whole character, what follows held for the next
//! piece; bytes that are no UTF-8 become U+FFFD.

/// A decoder of one byte stream.
#[derive(Debug, Default)]
pub struct Utf8Pieces {
    held: Vec<u8>,
}

impl Utf8Pieces {
    /// The text of `bytes` after what was held, but for a character cut at
    /// its end (held for the next call).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        let mut all = std::mem::take(&mut self.held);
        all.extend_from_slice(bytes);
        let cut = all.len() - incomplete_tail(&all);
        self.held = all.split_off(cut);
        String::from_utf8_lossy(&all).into_owned()
    }

    /// What is still held, at the end of the stream.
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.held)).into_owned()
    }
}

/// Bytes at the end of `b` that begin a character and lack the rest of it.
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(4) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // a continuation byte: its lead is further back
        }
        let need = match c {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_cut_between_pieces_are_whole_in_the_next() {
        let text = "aé€😀b".as_bytes();
        for cut in 0..=text.len() {
            let mut d = Utf8Pieces::default();
            let (a, b) = text.split_at(cut);
            let mut out = d.push(a);
            out.push_str(&d.push(b));
            out.push_str(&d.finish());
            assert_eq!(out, "aé€😀b", "cut at {cut}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut d = Utf8Pieces::default();
        assert_eq!(d.push(b"a\xffb"), "a\u{fffd}b");
        // A lead byte left alone at the end is held, then given up.
        assert_eq!(d.push(b"c\xe2"), "c");
        assert_eq!(d.finish(), "\u{fffd}");
        assert_eq!(d.finish(), "");
    }
}
