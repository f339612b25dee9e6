//! Knowledge-base reading: good rows and every bad-input case with its message.
use std::fs;
use std::sync::Arc;

use super::*;
use crate::{Corpus, Layout};

/// A tiny valid PNG.
fn png(rgb: [u8; 3]) -> Vec<u8> {
    let mut bytes = Vec::new();
    image::RgbImage::from_pixel(3, 2, image::Rgb(rgb))
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .unwrap();
    bytes
}

/// A KB directory with `images/a.png`, `images/b.png` and `kb.jsonl` holding `rows`.
fn kb(rows: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("kbdir");
    fs::create_dir_all(dir.join("images")).unwrap();
    fs::write(dir.join("images/a.png"), png([200, 0, 0])).unwrap();
    fs::write(dir.join("images/b.png"), png([0, 200, 0])).unwrap();
    let file = dir.join("kb.jsonl");
    fs::write(&file, rows).unwrap();
    (tmp, file)
}

fn passages(c: &Corpus) -> Result<(Vec<Passage>, Warnings)> {
    let mut p = c.passages("kb")?;
    let v = p.by_ref().collect::<Result<Vec<_>>>()?;
    Ok((v, p.warnings().clone()))
}

fn images(c: &Corpus, bytes: bool) -> Result<(Vec<ImageRecord>, Warnings)> {
    let mut i = if bytes {
        c.images("kb")?
    } else {
        c.image_paths("kb")?
    };
    let v = i.by_ref().collect::<Result<Vec<_>>>()?;
    Ok((v, i.warnings().clone()))
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

const GOOD: &str = concat!(
    "\u{feff}{\"id\": \"doc1\", \"image_path\": \"images/a.png\", \"text\": \"red square\", \"score\": 3}\n",
    "{\"qid\": 2, \"image_path\": \"./images/b.png\", \"text\": \"green square\"}\n",
    "\n",
    "{\"id\": \"doc3\", \"image_path\": null, \"text\": \"text alone\", \"extra\": {\"x\": [1]}}\n",
    "{\"id\": \"only-image\", \"image_path\": \"images\\\\b.png\", \"text\": \"  \"}\n",
    "{\"id\": \"doc5\", \"qid\": \"ignored\", \"image_path\": \"images/a.png\", \"text\": \"red again\"}\n",
    "{\"id\": \"doc6\", \"image_path\": \"\", \"text\": \"empty image path\"}\n",
);

#[test]
fn reads_rows_as_passages_images_and_row_links() {
    let (_tmp, file) = kb(GOOD);
    let c = Corpus::open(&file).unwrap();
    assert_eq!(c.layout(), Layout::Kb);
    assert_eq!(c.layout().name(), "kb");
    assert_eq!(c.root(), file);
    assert_eq!(c.domains().unwrap(), ["kb"]);
    assert_eq!(c.select_domains(&[]).unwrap(), ["kb"]);
    assert_eq!(c.passage_files("kb").unwrap(), std::slice::from_ref(&file));
    let (p, w) = passages(&c).unwrap();
    let ids: Vec<&str> = p.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["doc1", "2", "doc3", "doc5", "doc6"]);
    assert_eq!(p[0].text, "red square");
    assert!(w.is_empty(), "{:?}", w.examples());

    // one image per file named, in the order of the first row naming it
    let (imgs, w) = images(&c, true).unwrap();
    let ids: Vec<&str> = imgs.iter().map(|i| i.path.as_str()).collect();
    assert_eq!(ids, ["images/a.png", "images/b.png"]);
    assert!(w.is_empty(), "{:?}", w.examples());
    assert_eq!(imgs[0].bytes, png([200, 0, 0]));
    assert_eq!(imgs[1].row, 1, "the 0-based row of the first row naming it");
    assert!(imgs[1].file.is_absolute() && imgs[1].file.ends_with("images/b.png"));
    let (listed, _) = images(&c, false).unwrap();
    assert_eq!(
        listed.iter().map(|i| i.path.as_str()).collect::<Vec<_>>(),
        ids
    );
    assert!(listed.iter().all(|i| i.bytes.is_empty()));

    // the rows with text and an image
    assert_eq!(
        c.row_links("kb").unwrap().unwrap(),
        pairs(&[
            ("doc1", "images/a.png"),
            ("2", "images/b.png"),
            ("doc5", "images/a.png")
        ])
    );
    // no queries
    let err = c.examples("kb", false, &mut Warnings::new()).unwrap_err();
    assert!(
        err.to_string()
            .contains("a knowledge base has no queries or qrels"),
        "{err}"
    );
    assert!(matches!(
        c.beir_qrels("test", None, &mut Warnings::new()),
        Err(Error::NoQueries { .. })
    ));
    assert_eq!(c.query_images("kb").unwrap().count(), 0);
    // one domain
    let err = c.passages("other").err().expect("no such domain");
    assert!(err.to_string().contains("no domain \"other\""), "{err}");
}

#[test]
fn other_layouts_have_no_row_links() {
    let c = Corpus::open(concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpora/sample")).unwrap();
    assert_eq!(c.row_links("gis").unwrap(), None);
}

#[test]
fn the_fingerprint_covers_the_file() {
    let (_tmp, file) = kb(GOOD);
    let c = Corpus::open(&file).unwrap();
    let before = c.fingerprint("kb").unwrap();
    assert_eq!(before, c.fingerprint("kb").unwrap());
    fs::write(&file, GOOD.replace("red square", "red squares")).unwrap();
    assert_ne!(before, c.fingerprint("kb").unwrap());
}

#[test]
fn a_directory_with_one_kb_file_opens_it() {
    let (_tmp, file) = kb(GOOD);
    let dir = file.parent().unwrap();
    let c = Corpus::open(dir).unwrap();
    assert_eq!(c.layout(), Layout::Kb);
    assert_eq!(c.root(), file);
    assert_eq!(c.domains().unwrap(), ["kb"]);
    assert_eq!(passages(&c).unwrap().0.len(), 5);
    fs::write(dir.join("kb.parquet"), b"").unwrap();
    let err = Corpus::open(dir).unwrap_err();
    assert!(matches!(err, Error::AmbiguousKb { .. }), "{err}");
    fs::remove_file(&file).unwrap();
    fs::remove_file(dir.join("kb.parquet")).unwrap();
    let err = Corpus::open(dir).unwrap_err();
    assert!(err.to_string().contains("kb.jsonl / kb.parquet"), "{err}");
}

#[test]
fn file_names_must_be_a_kb_and_a_domain() {
    let tmp = tempfile::tempdir().unwrap();
    let txt = tmp.path().join("kb.txt");
    fs::write(&txt, "{}").unwrap();
    let err = Corpus::open(&txt).unwrap_err();
    assert!(
        matches!(err, Error::NotACorpusFile { .. })
            && err.to_string().contains(".jsonl or .parquet"),
        "{err}"
    );
    // the stem of `...jsonl` is `..`
    let dots = tmp.path().join("...jsonl");
    fs::write(&dots, "{}").unwrap();
    let err = Corpus::open(&dots).unwrap_err();
    assert!(
        matches!(err, Error::BadDomain { .. }) && err.to_string().contains("\"..\""),
        "{err}"
    );
    let upper = tmp.path().join("My KB.JSONL");
    fs::write(&upper, "{\"id\": 1, \"text\": \"x\"}\n").unwrap();
    assert_eq!(Corpus::open(&upper).unwrap().domains().unwrap(), ["My KB"]);
    let missing = tmp.path().join("none.jsonl");
    let err = Corpus::open(&missing).unwrap_err();
    assert!(err.to_string().contains("corpus not found"), "{err}");
    #[cfg(unix)]
    {
        let fifo = tmp.path().join("fifo.jsonl");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = Corpus::open(&fifo).unwrap_err();
        assert!(err.to_string().contains("a FIFO"), "{err}");
    }
}

/// The error reading `rows` (as passages, or as images), as text.
fn error_of(rows: &str) -> String {
    let (_tmp, file) = kb(rows);
    let c = Corpus::open(&file).unwrap();
    let p = passages(&c).err();
    let i = images(&c, true).err();
    let l = c.row_links("kb").err();
    let p = p.expect("passages fail").to_string();
    // images and links read the same rows, so they fail on them too
    assert_eq!(i.map(|e| e.to_string()).as_deref(), Some(p.as_str()));
    assert_eq!(l.map(|e| e.to_string()).as_deref(), Some(p.as_str()));
    p
}

#[test]
fn bad_rows_are_errors_naming_file_line_and_id() {
    let ok = "{\"id\": \"a\", \"text\": \"x\"}\n";
    let cases: &[(&str, &[&str])] = &[
        ("not json at all", &["kb.jsonl:2:", "not JSON"]),
        ("[1, 2]", &["kb.jsonl:2:", "not a JSON object"]),
        (
            "{\"text\": \"no id\"}",
            &["kb.jsonl:2:", "row has no \"id\" or \"qid\""],
        ),
        (
            "{\"id\": null, \"qid\": null, \"text\": \"x\"}",
            &["kb.jsonl:2:", "no \"id\" or \"qid\""],
        ),
        (
            "{\"_id\": \"b\", \"text\": \"beir\"}",
            &["kb.jsonl:2:", "a BEIR corpus.jsonl?"],
        ),
        (
            "{\"id\": \"a\", \"text\": \"again\"}",
            &[
                "kb.jsonl: line 2:",
                "duplicate id \"a\"",
                "first seen at line 1",
            ],
        ),
        (
            "{\"id\": 1.5, \"text\": \"x\"}",
            &["kb.jsonl:2:", "numeric \"id\" 1.5 is not an integer"],
        ),
        (
            "{\"id\": true, \"text\": \"x\"}",
            &[
                "kb.jsonl:2:",
                "\"id\" must be a string or an integer, found a boolean",
            ],
        ),
        (
            "{\"id\": \"b\", \"text\": 5}",
            &[
                "kb.jsonl:2:",
                "\"text\" must be a string or null, found a number",
            ],
        ),
        (
            "{\"id\": \"b\", \"image_path\": [\"x.png\"]}",
            &[
                "kb.jsonl:2:",
                "\"image_path\" must be a string or null, found an array",
            ],
        ),
        (
            "{\"id\": \"b c\", \"text\": \"x\"}",
            &["kb.jsonl: line 2:", "row id \"b c\" contains whitespace"],
        ),
        (
            "{\"id\": \"b\", \"text\": \"x\", \"image_path\": \"my image.png\"}",
            &[
                "kb.jsonl: line 2:",
                "image_path of row \"b\": \"my image.png\" contains whitespace",
            ],
        ),
    ];
    for (line, wanted) in cases {
        let err = error_of(&format!("{ok}{line}\n"));
        for w in *wanted {
            assert!(err.contains(w), "{line}: {err:?} lacks {w:?}");
        }
    }
    // an integer id and the same id as a string are one id
    let err = error_of("{\"qid\": 7, \"text\": \"x\"}\n{\"id\": \"7\", \"text\": \"y\"}\n");
    assert!(err.contains("duplicate id \"7\""), "{err}");
    // a duplicate id is refused even when a row is an image only
    let err = error_of(
        "{\"id\": \"a\", \"image_path\": \"images/a.png\"}\n{\"id\": \"a\", \"text\": \"x\"}\n",
    );
    assert!(err.contains("duplicate id \"a\""), "{err}");
    // invalid UTF-8
    let (_tmp, file) = kb("");
    fs::write(&file, b"{\"id\": \"a\", \"text\": \"\xff\"}\n").unwrap();
    let err = passages(&Corpus::open(&file).unwrap()).unwrap_err();
    assert!(
        err.to_string().contains("kb.jsonl:1: invalid UTF-8"),
        "{err}"
    );
}

#[test]
fn rows_with_neither_text_nor_image_are_skipped_and_counted() {
    let (_tmp, file) = kb(
        "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\"}\n{\"id\": \"c\", \"text\": \" \", \"image_path\": null}\n",
    );
    let c = Corpus::open(&file).unwrap();
    let (p, w) = passages(&c).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(w.count(WarningKind::EmptyRow), 2);
    let e = &w.examples()[0];
    assert_eq!(e.location, "line 2");
    assert!(
        e.to_string()
            .contains("row \"b\" has neither text nor image_path: skipped"),
        "{e}"
    );
    // images do not count them again
    assert!(images(&c, true).unwrap().1.is_empty());
}

#[test]
fn image_files_that_cannot_be_used_are_skipped_and_counted() {
    let (tmp, file) = kb("");
    let dir = file.parent().unwrap();
    let outside = tmp.path().join("outside.png");
    fs::write(&outside, png([1, 2, 3])).unwrap();
    fs::create_dir(dir.join("images/sub")).unwrap();
    fs::write(dir.join("images/empty.png"), b"").unwrap();
    let big = fs::File::create(dir.join("images/big.png")).unwrap();
    big.set_len(MAX_IMAGE_FILE_BYTES + 1).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, dir.join("images/link-out.png")).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink("a.png", dir.join("images/link-in.png")).unwrap();
    let inside_abs = dir.canonicalize().unwrap().join("images/b.png");
    let rows = [
        ("missing", "images/none.png"),
        ("dotdot", "../outside.png"),
        ("abs-out", outside.to_str().unwrap()),
        ("abs-in", inside_abs.to_str().unwrap()),
        ("dir", "images/sub"),
        ("empty", "images/empty.png"),
        ("big", "images/big.png"),
        ("link-out", "images/link-out.png"),
        ("link-in", "images/link-in.png"),
        ("twice", "images/none.png"),
    ];
    let jsonl: String = rows
        .iter()
        .map(|(id, p)| {
            format!(
                "{}\n",
                serde_json::json!({"id": id, "text": format!("text of {id}"), "image_path": p})
            )
        })
        .collect();
    fs::write(&file, jsonl).unwrap();
    let c = Corpus::open(&file).unwrap();
    // every row with text is a passage, whatever became of its image
    assert_eq!(passages(&c).unwrap().0.len(), rows.len());
    for bytes in [true, false] {
        let (imgs, w) = images(&c, bytes).unwrap();
        let ids: Vec<&str> = imgs.iter().map(|i| i.path.as_str()).collect();
        assert_eq!(ids, [inside_abs.to_str().unwrap(), "images/link-in.png"]);
        assert_eq!(w.count(WarningKind::MissingImageFile), 1, "one per image");
        assert_eq!(w.count(WarningKind::MissingImageBytes), 1);
        assert_eq!(w.count(WarningKind::SkippedImageFile), 5);
        let text: Vec<String> = w.examples().iter().map(|e| e.to_string()).collect();
        let has = |needle: &[&str]| {
            assert!(
                text.iter().any(|t| needle.iter().all(|n| t.contains(n))),
                "{needle:?} not in {text:#?}"
            )
        };
        has(&[
            "kb.jsonl: line 1:",
            "\"images/none.png\" of row \"missing\"",
            "does not exist: skipped",
        ]);
        has(&[
            "line 2:",
            "row \"dotdot\"",
            "leads outside the knowledge base's directory",
        ]);
        has(&["line 3:", "row \"abs-out\"", "leads outside"]);
        has(&["line 5:", "row \"dir\"", "is not a regular file"]);
        has(&["line 6:", "row \"empty\"", "is an empty file"]);
        has(&["line 7:", "row \"big\"", "more than"]);
        has(&["line 8:", "row \"link-out\"", "leads outside"]);
    }
    // the links name the images as the rows do; the skipped ones link to nothing later
    assert_eq!(c.row_links("kb").unwrap().unwrap().len(), rows.len());
}

#[cfg(unix)]
#[test]
fn an_image_that_exists_but_cannot_be_examined_is_an_error() {
    let (_tmp, file) =
        kb("{\"id\": \"loop\", \"text\": \"x\", \"image_path\": \"images/l1.png\"}\n");
    let dir = file.parent().unwrap();
    std::os::unix::fs::symlink("l2.png", dir.join("images/l1.png")).unwrap();
    std::os::unix::fs::symlink("l1.png", dir.join("images/l2.png")).unwrap();
    let c = Corpus::open(&file).unwrap();
    let err = images(&c, true).unwrap_err().to_string();
    assert!(
        err.contains("kb.jsonl:1: image \"images/l1.png\" of row \"loop\""),
        "{err}"
    );
    assert_eq!(passages(&c).unwrap().0.len(), 1);
}

enum Col<'a> {
    Str(&'a str, Vec<Option<&'a str>>),
    Int(&'a str, Vec<Option<i64>>),
}

/// Writes a parquet file of optional string / int64 columns with parquet's own writer.
fn write_parquet(path: &Path, cols: &[Col<'_>]) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    let fields: Vec<String> = cols
        .iter()
        .map(|c| match c {
            Col::Str(n, _) => format!("OPTIONAL BYTE_ARRAY {n} (UTF8);"),
            Col::Int(n, _) => format!("OPTIONAL INT64 {n};"),
        })
        .collect();
    let schema = parquet::schema::parser::parse_message_type(&format!(
        "message kb {{ {} }}",
        fields.join(" ")
    ))
    .unwrap();
    let props = Arc::new(parquet::file::properties::WriterProperties::builder().build());
    let f = fs::File::create(path).unwrap();
    let mut w =
        parquet::file::writer::SerializedFileWriter::new(f, Arc::new(schema), props).unwrap();
    let mut rg = w.next_row_group().unwrap();
    for col in cols {
        let mut c = rg.next_column().unwrap().unwrap();
        match col {
            Col::Str(_, v) => {
                let defs: Vec<i16> = v.iter().map(|x| x.is_some() as i16).collect();
                let vals: Vec<ByteArray> =
                    v.iter().flatten().map(|s| ByteArray::from(*s)).collect();
                c.typed::<ByteArrayType>()
                    .write_batch(&vals, Some(&defs), None)
                    .unwrap();
            }
            Col::Int(_, v) => {
                let defs: Vec<i16> = v.iter().map(|x| x.is_some() as i16).collect();
                let vals: Vec<i64> = v.iter().flatten().copied().collect();
                c.typed::<Int64Type>()
                    .write_batch(&vals, Some(&defs), None)
                    .unwrap();
            }
        }
        c.close().unwrap();
    }
    rg.close().unwrap();
    w.close().unwrap();
}

#[test]
fn parquet_kbs_read_the_same_columns() {
    let (_tmp, jsonl) = kb("");
    let dir = jsonl.parent().unwrap();
    fs::remove_file(&jsonl).unwrap();
    let file = dir.join("docs.parquet");
    write_parquet(
        &file,
        &[
            Col::Str("extra", vec![Some("e"), None, None, None]),
            Col::Str("id", vec![Some("d0"), None, None, Some("d3")]),
            Col::Int("qid", vec![None, Some(11), Some(12), Some(99)]),
            Col::Str(
                "text",
                vec![Some("red"), None, Some("green"), Some("plain")],
            ),
            Col::Str(
                "image_path",
                vec![
                    Some("images/a.png"),
                    Some("images/b.png"),
                    Some("./images/b.png"),
                    None,
                ],
            ),
        ],
    );
    let c = Corpus::open(&file).unwrap();
    assert_eq!(c.layout(), Layout::Kb);
    assert_eq!(c.domains().unwrap(), ["docs"]);
    let mut p = c.passages("docs").unwrap();
    let ids: Vec<String> = p.by_ref().map(|p| p.unwrap().id).collect();
    assert_eq!(ids, ["d0", "12", "d3"]);
    assert!(p.warnings().is_empty());
    let imgs: Vec<ImageRecord> = c.images("docs").unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(
        imgs.iter()
            .map(|i| (i.path.as_str(), i.row))
            .collect::<Vec<_>>(),
        [("images/a.png", 0), ("images/b.png", 1)]
    );
    assert_eq!(
        c.row_links("docs").unwrap().unwrap(),
        pairs(&[("d0", "images/a.png"), ("12", "images/b.png")])
    );

    // bad rows and schemas name the file and the row
    let bad = |cols: &[Col<'_>]| -> String {
        write_parquet(&file, cols);
        let c = Corpus::open(&file).unwrap();
        c.passages("docs")
            .and_then(|p| p.collect::<Result<Vec<_>>>())
            .unwrap_err()
            .to_string()
    };
    let err = bad(&[Col::Str("text", vec![Some("x")])]);
    assert!(
        err.contains("docs.parquet: a knowledge base needs an \"id\" (or \"qid\") column"),
        "{err}"
    );
    let err = bad(&[
        Col::Str("id", vec![Some("x")]),
        Col::Str("body", vec![Some("x")]),
    ]);
    assert!(
        err.contains("needs a \"text\" or an \"image_path\" column"),
        "{err}"
    );
    let err = bad(&[
        Col::Str("id", vec![Some("a"), None]),
        Col::Str("text", vec![Some("x"), Some("y")]),
    ]);
    assert!(
        err.contains("docs.parquet: row 1: row has no \"id\" or \"qid\""),
        "{err}"
    );
    let err = bad(&[
        Col::Int("qid", vec![Some(1), Some(2), Some(1)]),
        Col::Str("text", vec![Some("x"), Some("y"), Some("z")]),
    ]);
    assert!(
        err.contains("docs.parquet: row 2: duplicate id \"1\" (first seen at row 0)"),
        "{err}"
    );
    let err = bad(&[
        Col::Str("id", vec![Some("a")]),
        Col::Int("text", vec![Some(1)]),
    ]);
    assert!(
        err.contains("row 0: column \"text\": expected a string, found an integer"),
        "{err}"
    );
    let (imgs, w) = {
        write_parquet(
            &file,
            &[
                Col::Str("id", vec![Some("a"), Some("b")]),
                Col::Str("image_path", vec![Some("images/gone.png"), None]),
            ],
        );
        let c = Corpus::open(&file).unwrap();
        let mut p = c.passages("docs").unwrap();
        assert_eq!(p.by_ref().count(), 0);
        assert_eq!(p.warnings().count(WarningKind::EmptyRow), 1);
        let mut i = c.images("docs").unwrap();
        let v: Vec<_> = i.by_ref().collect();
        (v, i.warnings().clone())
    };
    assert!(imgs.is_empty());
    assert_eq!(w.examples()[0].location, "row 0");
}

/// Search-R1's rows (`contents`, the title quoted on the first line) are read as they are,
/// titled by that line; a `title` column titles `text` rows and is indexed with them; a row
/// with both `text` and `contents` is refused with its line.
#[test]
fn search_r1_contents_and_title_columns() {
    let (_t, file) = kb(concat!(
        "{\"id\": \"0\", \"contents\": \"\\\"Aaron\\\"\\nAaron is a prophet.\"}\n",
        "{\"id\": 1, \"title\": \"Tide\", \"text\": \"It rises.\"}\n",
        "{\"id\": \"2\", \"contents\": \"one line\"}\n",
        "{\"id\": \"3\", \"contents\": \"Unquoted\\nbody\", \"title\": \"Given\"}\n",
    ));
    let (p, _) = passages(&Corpus::open(&file).unwrap()).unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = p
        .iter()
        .map(|p| (p.id.as_str(), p.text.as_str(), p.title.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("0", "\"Aaron\"\nAaron is a prophet.", Some("Aaron")),
            ("1", "Tide It rises.", Some("Tide")),
            ("2", "one line", None),
            ("3", "Unquoted\nbody", Some("Given")),
        ]
    );
    assert_eq!(
        contents_title("Unquoted\nbody").as_deref(),
        Some("Unquoted")
    );
    assert_eq!(contents_title("\"\"\nbody"), None);
    let (_t, file) = kb(
        "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\", \"text\": \"x\", \"contents\": \"y\"}\n",
    );
    let err = passages(&Corpus::open(&file).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("kb.jsonl:2"), "{err}");
    assert!(err.contains("both \"text\" and \"contents\""), "{err}");
}
