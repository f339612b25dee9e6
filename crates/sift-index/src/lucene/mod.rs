//! Lucene's English analysis, reproduced token for token: the `StandardTokenizer` (Unicode
//! UAX#29 word breaks as Lucene's JFlex grammar implements them, with its emoji, Southeast
//! Asian and CJK rules and its 255-unit token limit), the `EnglishPossessiveFilter`, Java's
//! per-code-point lowercasing, Lucene's 33 English stop words and the original Porter
//! stemmer. This is what pyserini's `get_lucene_analyzer()` (Anserini's default English
//! analyzer) runs, and so what the BRIGHT / MM-BRIGHT BM25 reference indexes with.
//!
//! The grammar is compiled once into a DFA over character classes; the classes come from
//! `tables.rs`, generated from the Unicode Character Database by
//! `eval/reference/lucene/gen_unicode_tables.py`. Equality with Lucene is checked by the
//! `lucene_tokens` test against token streams Anserini's jar produced
//! (`eval/reference/lucene/`).
use std::sync::OnceLock;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind, nfa::thompson};

mod porter;
mod tables;

pub use porter::PorterStemmer;
use tables::*;

/// Lucene's `EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`, sorted.
pub const ENGLISH_STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

/// True for a word of [`ENGLISH_STOP_WORDS`].
#[inline]
pub fn is_english_stop_word(word: &str) -> bool {
    // a match on the bytes compiles to a switch on length and first byte: no search
    matches!(
        word.as_bytes(),
        b"a" | b"an"
            | b"and"
            | b"are"
            | b"as"
            | b"at"
            | b"be"
            | b"but"
            | b"by"
            | b"for"
            | b"if"
            | b"in"
            | b"into"
            | b"is"
            | b"it"
            | b"no"
            | b"not"
            | b"of"
            | b"on"
            | b"or"
            | b"such"
            | b"that"
            | b"the"
            | b"their"
            | b"then"
            | b"there"
            | b"these"
            | b"they"
            | b"this"
            | b"to"
            | b"was"
            | b"will"
            | b"with"
    )
}

/// The longest token, in UTF-16 code units, Lucene's StandardTokenizer emits; longer runs are
/// cut into pieces of at most this length.
pub const MAX_TOKEN_UNITS: usize = 255;

/// Characters below this are classified by a table; the rest by binary search.
const FAST: usize = 0x3000;

struct Grammar {
    dfa: dense::DFA<Vec<u32>>,
    fast: Box<[u8; FAST]>,
    /// Classes that can begin a token.
    starts: [bool; 256],
}

/// A byte-class pattern of the classes that have all of `with` and none of `without`.
fn class(with: u32, without: u32) -> String {
    let ids: Vec<String> = CLASS_BITS
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b & with == with && b & without == 0 && b != 0)
        .map(|(i, _)| format!("\\x{i:02x}"))
        .collect();
    if ids.is_empty() {
        // no class has these properties: a byte no text holds
        "\\xff".to_string()
    } else {
        format!("[{}]", ids.concat())
    }
}

/// The StandardTokenizer grammar (Lucene's `StandardTokenizerImpl.jflex`), rule for rule, as
/// one pattern over class bytes; the longest match of any rule is the token.
fn pattern() -> String {
    let fmt = class(FMT, 0);
    let sans = class(FMT, PRESSEL);
    let ex = |bit: u32| format!("(?:{}{fmt}*)", class(bit, 0));
    let sans_ex = |bit: u32| format!("(?:{}{sans}*)", class(bit, 0));
    let zwj = class(ZWJ, 0);
    let fe0f = class(FE0F, 0);

    // Emoji (UTS #51 emoji_sequence, as Lucene's grammar spells it).
    let emoji_one = format!(
        "(?:{zwj}*{}{fe0f}?|(?:{zwj}*{})?{})",
        sans_ex(EMOJICHAR),
        sans_ex(EMB),
        sans_ex(EMOD)
    );
    let emoji = format!(
        "{emoji_one}(?:(?:{zwj}{emoji_one})*|{}+{})|{}{fe0f}?{}|{}{}",
        class(TAGSPEC, 0),
        class(TAGTERM, 0),
        sans_ex(KEYCAPBASE),
        sans_ex(KEYCAP),
        ex(RI),
        ex(RI)
    );
    let (enl, num, midnum) = (ex(ENL), ex(NUM), ex(MIDNUM));
    let numeric = format!("{enl}*{num}(?:(?:{enl}*|{midnum}){num})*{enl}*");
    let hangul = format!("{}+", ex(HANGUL));
    let kata = ex(KATA);
    let katakana = format!("{kata}+");
    let (heb, ahl) = (ex(HEB), ex(AHL));
    let inner = format!(
        "(?:{kata}(?:{enl}*{kata})*|(?:{heb}(?:{}|{}{heb})|{num}(?:(?:{enl}*|{midnum}){num})*|{ahl}(?:(?:{enl}*|{}){ahl})*)+)",
        ex(SQ),
        ex(DQ),
        ex(MIDLET)
    );
    let word = format!("{enl}*{inner}(?:{enl}+{inner})*{enl}*");
    let southeast_asian = format!("{}+", ex(SA));
    let rules = [
        emoji,
        numeric,
        hangul,
        katakana,
        word,
        southeast_asian,
        ex(HAN),
        ex(HIRA),
    ];
    rules
        .iter()
        .map(|r| format!("(?:{r})"))
        .collect::<Vec<_>>()
        .join("|")
}

fn grammar() -> &'static Grammar {
    static GRAMMAR: OnceLock<Grammar> = OnceLock::new();
    GRAMMAR.get_or_init(|| {
        let dfa = dense::Builder::new()
            .configure(
                dense::Config::new()
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored),
            )
            .syntax(syntax::Config::new().unicode(false).utf8(false))
            .thompson(thompson::Config::new().utf8(false))
            .build(&pattern())
            .expect("the StandardTokenizer grammar compiles");
        let mut fast = Box::new([0u8; FAST]);
        for &(lo, hi, c) in RANGES.iter() {
            for cp in lo..=hi.min(FAST as u32 - 1) {
                fast[cp as usize] = c;
            }
        }
        let mut starts = [false; 256];
        for (i, &bits) in CLASS_BITS.iter().enumerate() {
            // FMT, the mid-word punctuation and the quotes only continue a token
            const STARTS: u32 = AHL
                | NUM
                | KATA
                | ENL
                | HAN
                | HIRA
                | SA
                | RI
                | EMOJICHAR
                | EMB
                | EMOD
                | ZWJ
                | KEYCAPBASE;
            starts[i] = bits & STARTS != 0;
        }
        Grammar { dfa, fast, starts }
    })
}

fn class_of(g: &Grammar, c: char) -> u8 {
    let cp = c as u32;
    if (cp as usize) < FAST {
        return g.fast[cp as usize];
    }
    match RANGES.binary_search_by(|&(lo, hi, _)| {
        if hi < cp {
            std::cmp::Ordering::Less
        } else if lo > cp {
            std::cmp::Ordering::Greater
        } else {
            std::cmp::Ordering::Equal
        }
    }) {
        Ok(i) => RANGES[i].2,
        Err(_) => 0,
    }
}

/// Lucene's `StandardTokenizer`, with reusable buffers.
#[derive(Default)]
pub struct StandardTokenizer {
    classes: Vec<u8>,
    /// Byte offset of each code point, and the text's length.
    offsets: Vec<u32>,
    /// Where the text has a code point outside the BMP (two UTF-16 units).
    wide: bool,
}

impl StandardTokenizer {
    /// Calls `f` with each token of `text`, in order (before any filter).
    pub fn tokenize<'t>(&mut self, text: &'t str, mut f: impl FnMut(&'t str)) {
        let g = grammar();
        self.classes.clear();
        self.offsets.clear();
        self.wide = false;
        for (i, c) in text.char_indices() {
            self.classes.push(class_of(g, c));
            self.offsets.push(i as u32);
            self.wide |= c as u32 > 0xFFFF;
        }
        self.offsets.push(text.len() as u32);
        let n = self.classes.len();
        let mut i = 0;
        while i < n {
            if !g.starts[self.classes[i] as usize] {
                i += 1;
                continue;
            }
            let mut len = self.longest(g, i, n.min(i + MAX_TOKEN_UNITS));
            if self.wide && len > 0 && self.units(text, i, i + len) > MAX_TOKEN_UNITS {
                // the limit counts UTF-16 units: look again in a window that fits
                let mut end = i + len;
                while self.units(text, i, end) > MAX_TOKEN_UNITS {
                    end -= 1;
                }
                len = self.longest(g, i, end);
            }
            if len == 0 {
                i += 1;
            } else {
                f(&text[self.offsets[i] as usize..self.offsets[i + len] as usize]);
                i += len;
            }
        }
    }

    /// The length (in code points) of the longest token at `i` within `..end`; 0 if none.
    fn longest(&self, g: &Grammar, i: usize, end: usize) -> usize {
        let input = Input::new(&self.classes[..end])
            .range(i..end)
            .anchored(Anchored::Yes);
        match g.dfa.try_search_fwd(&input) {
            Ok(Some(m)) => m.offset() - i,
            _ => 0,
        }
    }

    fn units(&self, text: &str, from: usize, to: usize) -> usize {
        text[self.offsets[from] as usize..self.offsets[to] as usize]
            .chars()
            .map(char::len_utf16)
            .sum()
    }
}

/// Lucene's `EnglishPossessiveFilter`: a trailing `'s`, `’s` or `＇s` (either case of s) is
/// removed.
pub fn strip_possessive(token: &str) -> &str {
    let mut cs = token.char_indices().rev();
    if let (Some((_, s)), Some((at, q))) = (cs.next(), cs.next())
        && (s == 's' || s == 'S')
        && matches!(q, '\'' | '\u{2019}' | '\u{FF07}')
    {
        return &token[..at];
    }
    token
}

/// Java's `Character.toLowerCase` on each code point (Lucene's `LowerCaseFilter`): the simple
/// case mapping, so `İ` becomes `i` and `Σ` always `σ`.
pub fn lowercase_into(token: &str, out: &mut String) {
    out.clear();
    if token.is_ascii() {
        out.push_str(token);
        out.make_ascii_lowercase();
        return;
    }
    for c in token.chars() {
        if c == '\u{130}' {
            out.push('i');
        } else {
            let mut l = c.to_lowercase();
            match (l.next(), l.next()) {
                (Some(one), None) => out.push(one),
                // only U+0130 has a multi-character lowercase; keep any other as it is
                _ => out.push(c),
            }
        }
    }
}

/// Lucene's `SmallFloat.intToByte4`: a document length as Lucene stores it in one byte
/// (exact below 24, then 4 significant bits).
pub fn length_to_byte4(len: u32) -> u8 {
    const FREE: u32 = 24;
    if len < FREE {
        return len as u8;
    }
    (FREE + long_to_int4((len - FREE) as u64)) as u8
}

/// Lucene's `SmallFloat.byte4ToInt`: the length a length byte stands for.
pub fn byte4_to_length(b: u8) -> u32 {
    const FREE: u32 = 24;
    let i = b as u32;
    if i < FREE {
        return i;
    }
    (FREE as u64 + int4_to_long(i - FREE)).min(i32::MAX as u64) as u32
}

fn long_to_int4(i: u64) -> u32 {
    let bits = 64 - i.leading_zeros();
    if bits < 4 {
        return i as u32;
    }
    let shift = bits - 4;
    // the 4 most significant bits, the leading one implicit
    let mantissa = ((i >> shift) as u32) & 0x07;
    mantissa | ((shift + 1) << 3)
}

fn int4_to_long(i: u32) -> u64 {
    let bits = (i & 0x07) as u64;
    let shift = (i >> 3) as i32 - 1;
    if shift == -1 {
        bits
    } else {
        (bits | 0x08) << shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<String> {
        let mut t = StandardTokenizer::default();
        let mut out = Vec::new();
        t.tokenize(text, |s| out.push(s.to_string()));
        out
    }

    #[test]
    fn standard_tokenizer_basics() {
        assert_eq!(
            tokens("e-mail foo@bar.com http://example.com/a 3.14 1,000 U.S.A. e.g. don't"),
            [
                "e",
                "mail",
                "foo",
                "bar.com",
                "http",
                "example.com",
                "a",
                "3.14",
                "1,000",
                "U.S.A",
                "e.g",
                "don't"
            ]
        );
        assert_eq!(
            tokens("日本語のテキスト 한국어 ภาษาไทย"),
            ["日", "本", "語", "の", "テキスト", "한국어", "ภาษาไทย"]
        );
        assert_eq!(
            tokens("😀 👍🏽 1️⃣ 🇺🇸 👨‍👩‍👧 ©"),
            ["😀", "👍🏽", "1️⃣", "🇺🇸", "👨‍👩‍👧", "©"]
        );
        let long = "x".repeat(300);
        assert_eq!(tokens(&long), [&long[..255], &long[255..]]);
    }

    #[test]
    fn filters() {
        assert_eq!(strip_possessive("John's"), "John");
        assert_eq!(strip_possessive("JOHN’S"), "JOHN");
        assert_eq!(strip_possessive("Johns"), "Johns");
        let mut s = String::new();
        lowercase_into("İSTANBUL ΣΟΦΙΑΣ", &mut s);
        assert_eq!(s, "istanbul σοφιασ");
        assert!(is_english_stop_word("the") && !is_english_stop_word("these."));
        // the match is exactly the list
        assert!(ENGLISH_STOP_WORDS.iter().all(|w| is_english_stop_word(w)));
        for w in ["", "i", "tha", "thes", "theirs", "wills", "The", "into "] {
            assert!(!is_english_stop_word(w), "{w}");
        }
        let mut sorted = ENGLISH_STOP_WORDS;
        sorted.sort_unstable();
        assert_eq!(sorted, ENGLISH_STOP_WORDS);
    }

    #[test]
    fn small_float_round_trips_like_lucene() {
        // below 24 lengths are exact; above, each byte stands for the smallest length it codes
        for len in 0..24 {
            assert_eq!(byte4_to_length(length_to_byte4(len)), len);
        }
        let mut last = 0;
        for b in 0..=255u8 {
            let len = byte4_to_length(b);
            assert!(b == 0 || len > last, "byte {b}");
            assert_eq!(length_to_byte4(len), b);
            last = len;
        }
        // tantivy's field norms use the same code
        for len in [0u32, 1, 23, 24, 25, 40, 100, 1000, 123_456] {
            assert_eq!(
                tantivy::fieldnorm::FieldNormReader::id_to_fieldnorm(length_to_byte4(len)),
                byte4_to_length(length_to_byte4(len))
            );
        }
    }
}
