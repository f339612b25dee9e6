//! The original Porter stemmer (M. F. Porter, "An algorithm for suffix stripping", 1980), in
//! the variant Lucene's `PorterStemFilter` runs: Porter's own Release 3 with its two bounds
//! fixes, including the departures from the paper that release made (`-bli` -> `-ble` and
//! `-logi` -> `-log` in step 3, the `e` restored after `-at`/`-bl`/`-iz`). It is not the
//! Snowball "Porter2" English stemmer.
//!
//! Words are stemmed as Java does, on UTF-16 code units; every letter other than `a e i o u`
//! (and `y` after a vowel) is a consonant. Words of one or two units are left alone.

/// A code unit: a byte of an ASCII word, or a UTF-16 unit of any other.
trait Unit: Copy + PartialEq {
    fn is(self, ascii: u8) -> bool;
    fn from_ascii(ascii: u8) -> Self;
}

impl Unit for u8 {
    fn is(self, ascii: u8) -> bool {
        self == ascii
    }
    fn from_ascii(ascii: u8) -> Self {
        ascii
    }
}

impl Unit for u16 {
    fn is(self, ascii: u8) -> bool {
        self == ascii as u16
    }
    fn from_ascii(ascii: u8) -> Self {
        ascii as u16
    }
}

/// Suffix rules grouped by the letter they are looked up by: `(letter, [(suffix, by)])`.
type Rules = [(u8, &'static [(&'static [u8], &'static [u8])])];

/// The stemmer's state for one word: `b[..=k]` is the word, `j` marks the end of the stem
/// a suffix test found (it can be -1, before the word).
struct Word<'a, T: Unit> {
    b: &'a mut Vec<T>,
    k: isize,
    j: isize,
}

impl<T: Unit> Word<'_, T> {
    fn at(&self, i: isize) -> T {
        self.b[i as usize]
    }

    fn cons(&self, i: isize) -> bool {
        let c = self.at(i);
        if c.is(b'a') || c.is(b'e') || c.is(b'i') || c.is(b'o') || c.is(b'u') {
            false
        } else if c.is(b'y') {
            i == 0 || !self.cons(i - 1)
        } else {
            true
        }
    }

    /// The number of vowel-consonant sequences in `b[..=j]`.
    fn m(&self) -> usize {
        // the first index from `i` up to `j` that is a consonant (`cons`) or a vowel
        let find = |mut i: isize, cons: bool| {
            while i <= self.j {
                if self.cons(i) == cons {
                    return Some(i);
                }
                i += 1;
            }
            None
        };
        let mut n = 0;
        let mut vowel = find(0, false);
        while let Some(v) = vowel {
            let Some(c) = find(v + 1, true) else {
                break;
            };
            n += 1;
            vowel = find(c + 1, false);
        }
        n
    }

    fn vowel_in_stem(&self) -> bool {
        (0..=self.j).any(|i| !self.cons(i))
    }

    /// `b[i-1..=i]` is a double consonant.
    fn double_cons(&self, i: isize) -> bool {
        i >= 1 && self.at(i) == self.at(i - 1) && self.cons(i)
    }

    /// `b[i-2..=i]` is consonant-vowel-consonant and the last is not `w`, `x` or `y`.
    fn cvc(&self, i: isize) -> bool {
        if i < 2 || !self.cons(i) || self.cons(i - 1) || !self.cons(i - 2) {
            return false;
        }
        let c = self.at(i);
        !(c.is(b'w') || c.is(b'x') || c.is(b'y'))
    }

    /// The word ends with `s`; on success `j` marks the stem before it.
    fn ends(&mut self, s: &[u8]) -> bool {
        let l = s.len() as isize;
        let o = self.k - l + 1;
        if o < 0 {
            return false;
        }
        if !s
            .iter()
            .enumerate()
            .all(|(i, &c)| self.at(o + i as isize).is(c))
        {
            return false;
        }
        self.j = self.k - l;
        true
    }

    /// Writes `s` from `j + 1` on and ends the word there. What lies beyond `k` stays in
    /// the buffer, as in Lucene's: step 6 still measures a stem that reaches past a removed
    /// final `e`.
    fn set_to(&mut self, s: &[u8]) {
        for (i, &c) in s.iter().enumerate() {
            let at = (self.j + 1) as usize + i;
            if at < self.b.len() {
                self.b[at] = T::from_ascii(c);
            } else {
                self.b.push(T::from_ascii(c));
            }
        }
        self.k = self.j + s.len() as isize;
    }

    /// `set_to(s)` when the stem has m() > 0.
    fn r(&mut self, s: &[u8]) {
        if self.m() > 0 {
            self.set_to(s);
        }
    }

    /// Plurals and -ed / -ing.
    fn step1(&mut self) {
        if self.at(self.k).is(b's') {
            if self.ends(b"sses") {
                self.k -= 2;
            } else if self.ends(b"ies") {
                self.set_to(b"i");
            } else if !self.at(self.k - 1).is(b's') {
                self.k -= 1;
            }
        }
        if self.ends(b"eed") {
            if self.m() > 0 {
                self.k -= 1;
            }
        } else if (self.ends(b"ed") || self.ends(b"ing")) && self.vowel_in_stem() {
            self.k = self.j;
            if self.ends(b"at") {
                self.set_to(b"ate");
            } else if self.ends(b"bl") {
                self.set_to(b"ble");
            } else if self.ends(b"iz") {
                self.set_to(b"ize");
            } else if self.double_cons(self.k) {
                let c = self.at(self.k);
                if !(c.is(b'l') || c.is(b's') || c.is(b'z')) {
                    self.k -= 1;
                }
            } else if self.m() == 1 && self.cvc(self.k) {
                self.set_to(b"e");
            }
        }
    }

    /// Terminal y -> i when the stem has a vowel.
    fn step2(&mut self) {
        if self.ends(b"y") && self.vowel_in_stem() {
            let k = self.k as usize;
            self.b[k] = T::from_ascii(b'i');
        }
    }

    /// Double suffixes -> single ones (-ization -> -ize, ...), when m() > 0.
    fn step3(&mut self) {
        if self.k == 0 {
            return;
        }
        const RULES: &Rules = &[
            (b'a', &[(b"ational", b"ate"), (b"tional", b"tion")]),
            (b'c', &[(b"enci", b"ence"), (b"anci", b"ance")]),
            (b'e', &[(b"izer", b"ize")]),
            (
                b'l',
                &[
                    (b"bli", b"ble"),
                    (b"alli", b"al"),
                    (b"entli", b"ent"),
                    (b"eli", b"e"),
                    (b"ousli", b"ous"),
                ],
            ),
            (
                b'o',
                &[(b"ization", b"ize"), (b"ation", b"ate"), (b"ator", b"ate")],
            ),
            (
                b's',
                &[
                    (b"alism", b"al"),
                    (b"iveness", b"ive"),
                    (b"fulness", b"ful"),
                    (b"ousness", b"ous"),
                ],
            ),
            (
                b't',
                &[(b"aliti", b"al"), (b"iviti", b"ive"), (b"biliti", b"ble")],
            ),
            (b'g', &[(b"logi", b"log")]),
        ];
        self.rules(self.k - 1, RULES);
    }

    /// -ic-, -full, -ness, ... when m() > 0.
    fn step4(&mut self) {
        const RULES: &Rules = &[
            (
                b'e',
                &[(b"icate", b"ic"), (b"ative", b""), (b"alize", b"al")],
            ),
            (b'i', &[(b"iciti", b"ic")]),
            (b'l', &[(b"ical", b"ic"), (b"ful", b"")]),
            (b's', &[(b"ness", b"")]),
        ];
        self.rules(self.k, RULES);
    }

    /// The first suffix of the group for `b[at]` that the word ends with is replaced (when
    /// m() > 0); later ones are not tried.
    fn rules(&mut self, at: isize, rules: &Rules) {
        let c = self.at(at);
        if let Some((_, group)) = rules.iter().find(|(key, _)| c.is(*key)) {
            for (suffix, by) in group.iter() {
                if self.ends(suffix) {
                    self.r(by);
                    return;
                }
            }
        }
    }

    /// -ant, -ence, ... removed when m() > 1.
    fn step5(&mut self) {
        if self.k == 0 {
            return;
        }
        let c = self.at(self.k - 1);
        let found = if c.is(b'a') {
            self.ends(b"al")
        } else if c.is(b'c') {
            self.ends(b"ance") || self.ends(b"ence")
        } else if c.is(b'e') {
            self.ends(b"er")
        } else if c.is(b'i') {
            self.ends(b"ic")
        } else if c.is(b'l') {
            self.ends(b"able") || self.ends(b"ible")
        } else if c.is(b'n') {
            self.ends(b"ant") || self.ends(b"ement") || self.ends(b"ment") || self.ends(b"ent")
        } else if c.is(b'o') {
            (self.ends(b"ion") && self.j >= 0 && {
                let s = self.at(self.j);
                s.is(b's') || s.is(b't')
            }) || self.ends(b"ou")
        } else if c.is(b's') {
            self.ends(b"ism")
        } else if c.is(b't') {
            self.ends(b"ate") || self.ends(b"iti")
        } else if c.is(b'u') {
            self.ends(b"ous")
        } else if c.is(b'v') {
            self.ends(b"ive")
        } else if c.is(b'z') {
            self.ends(b"ize")
        } else {
            false
        };
        if found && self.m() > 1 {
            self.k = self.j;
        }
    }

    /// A final -e removed when m() > 1 (or m() == 1 and not *o), and -ll -> -l when m() > 1.
    fn step6(&mut self) {
        self.j = self.k;
        if self.at(self.k).is(b'e') {
            let a = self.m();
            if a > 1 || a == 1 && !self.cvc(self.k - 1) {
                self.k -= 1;
            }
        }
        if self.at(self.k).is(b'l') && self.double_cons(self.k) && self.m() > 1 {
            self.k -= 1;
        }
    }
}

fn stem_units<T: Unit>(b: &mut Vec<T>) {
    if b.len() < 3 {
        return;
    }
    let mut w = Word {
        k: b.len() as isize - 1,
        j: 0,
        b,
    };
    w.step1();
    w.step2();
    w.step3();
    w.step4();
    w.step5();
    w.step6();
    let k = w.k;
    b.truncate((k + 1) as usize);
}

/// Reusable buffers for stemming.
#[derive(Default)]
pub struct PorterStemmer {
    bytes: Vec<u8>,
    units: Vec<u16>,
}

impl PorterStemmer {
    /// Stems `word` (already lowercased) in place.
    pub fn stem(&mut self, word: &mut String) {
        if word.len() < 3 && word.is_ascii() {
            return;
        }
        if word.is_ascii() {
            self.bytes.clear();
            self.bytes.extend_from_slice(word.as_bytes());
            stem_units(&mut self.bytes);
            if self.bytes.len() != word.len() || self.bytes != word.as_bytes() {
                word.clear();
                // only ASCII letters are ever written
                word.push_str(std::str::from_utf8(&self.bytes).expect("ASCII"));
            }
        } else {
            self.units.clear();
            self.units.extend(word.encode_utf16());
            let before = self.units.len();
            stem_units(&mut self.units);
            if self.units.len() != before || !self.units.iter().copied().eq(word.encode_utf16()) {
                // the stemmer only removes or writes ASCII letters after the last non-ASCII
                // unit, so a surrogate pair is never split
                *word = String::from_utf16_lossy(&self.units);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stem(w: &str) -> String {
        let mut s = w.to_string();
        PorterStemmer::default().stem(&mut s);
        s
    }

    #[test]
    fn porter_examples() {
        // the paper's examples, and the Release 3 departures from it
        for (w, s) in [
            ("caresses", "caress"),
            ("ponies", "poni"),
            ("ties", "ti"),
            ("caress", "caress"),
            ("cats", "cat"),
            ("feed", "feed"),
            ("agreed", "agre"),
            ("disabled", "disabl"),
            ("matting", "mat"),
            ("mating", "mate"),
            ("meeting", "meet"),
            ("milling", "mill"),
            ("messing", "mess"),
            ("meetings", "meet"),
            ("happy", "happi"),
            ("relational", "relat"),
            ("conditional", "condit"),
            ("generalizations", "gener"),
            ("oscillators", "oscil"),
            ("archaeology", "archaeolog"),
            ("sensibility", "sensibl"),
            ("ion", "ion"),
            ("aed", "a"),
            ("by", "by"),
            ("naïve", "naïv"),
        ] {
            assert_eq!(stem(w), s, "{w}");
        }
    }
}
