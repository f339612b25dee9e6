//! The figures as PNG (`sift report --figures`), rendered by resvg.
use crate::{Error, Result};

/// Renders SVG figures to PNG (white background, `scale` pixels per SVG unit), with the
/// system's fonts loaded once; sans-serif text falls back to DejaVu Sans or Liberation
/// Sans where the system has them.
pub struct PngRenderer {
    options: resvg::usvg::Options<'static>,
    scale: f32,
}

impl PngRenderer {
    /// A renderer at `scale` (2: twice the SVG's size, for print).
    pub fn new(scale: f32) -> PngRenderer {
        let mut options = resvg::usvg::Options::default();
        let db = options.fontdb_mut();
        db.load_system_fonts();
        for family in ["DejaVu Sans", "Liberation Sans", "Arial"] {
            let has = db
                .faces()
                .any(|f| f.families.iter().any(|(name, _)| name == family));
            if has {
                db.set_sans_serif_family(family);
                break;
            }
        }
        PngRenderer { options, scale }
    }

    /// The PNG of `svg` (`name` in errors).
    pub fn render(&self, name: &str, svg: &str) -> Result<Vec<u8>> {
        let err = |m: String| Error::Report(format!("figure {name}: {m}"));
        let tree =
            resvg::usvg::Tree::from_str(svg, &self.options).map_err(|e| err(e.to_string()))?;
        let size = tree.size().to_int_size();
        let (w, h) = (
            (size.width() as f32 * self.scale).ceil() as u32,
            (size.height() as f32 * self.scale).ceil() as u32,
        );
        let mut pixmap = resvg::tiny_skia::Pixmap::new(w, h)
            .ok_or_else(|| err(format!("cannot make a {w}x{h} image")))?;
        pixmap.fill(resvg::tiny_skia::Color::WHITE);
        resvg::render(
            &tree,
            resvg::tiny_skia::Transform::from_scale(self.scale, self.scale),
            &mut pixmap.as_mut(),
        );
        pixmap.encode_png().map_err(|e| err(e.to_string()))
    }
}
