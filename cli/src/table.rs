//! Aligned text tables: columns padded to their widest cell, two spaces apart, no trailing blanks, and colour
//! only around the padded text (so colour never breaks the alignment).

/// How a cell is coloured on a terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// No colour.
    #[default]
    Plain,
    /// Good news (succeeded, ok, active).
    Good,
    /// Bad news (failed, down).
    Bad,
    /// Worth a look (queued, draining, degraded).
    Warn,
    /// In progress (running).
    Busy,
    /// Over and unremarkable (cancelled, gone, absent values).
    Dim,
}

impl Style {
    fn ansi(self) -> Option<&'static str> {
        match self {
            Self::Plain => None,
            Self::Good => Some("32"),
            Self::Bad => Some("31"),
            Self::Warn => Some("33"),
            Self::Busy => Some("36"),
            Self::Dim => Some("2"),
        }
    }

    /// `text` wrapped in this style's escape codes when `colour` is on.
    pub fn paint(self, text: &str, colour: bool) -> String {
        match self.ansi().filter(|_| colour) {
            Some(code) => format!("\x1b[{code}m{text}\x1b[0m"),
            None => text.to_owned(),
        }
    }
}

/// One cell: its text and style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// The text (no escape codes).
    pub text: String,
    /// The style.
    pub style: Style,
}

impl Cell {
    /// A styled cell.
    pub fn styled(text: impl Into<String>, style: Style) -> Self {
        Self { text: text.into(), style }
    }
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Self { text, style: Style::Plain }
    }
}

impl From<&str> for Cell {
    fn from(text: &str) -> Self {
        Self::from(text.to_owned())
    }
}

/// A table with a header row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Self {
        Self { headers: headers.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    /// Adds a row (missing cells are blank, extra cells are dropped).
    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The column widths: the widest cell of each column, header included.
    pub fn widths(&self) -> Vec<usize> {
        self.headers
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let cells = self.rows.iter().filter_map(|r| r.get(i)).map(|c| width(&c.text));
                cells.chain([width(h)]).max().unwrap_or(0)
            })
            .collect()
    }

    /// The header line for `widths`.
    pub fn header_line(&self, widths: &[usize]) -> String {
        let cells: Vec<Cell> = self.headers.iter().map(|h| Cell::from(h.as_str())).collect();
        line(&cells, widths, false)
    }

    /// The whole table, one line per row, each ending with a newline.
    pub fn render(&self, colour: bool) -> String {
        let widths = self.widths();
        let mut out = self.header_line(&widths);
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(row, &widths, colour));
            out.push('\n');
        }
        out
    }
}

/// One line of cells padded to `widths`, without trailing blanks.
pub fn line(cells: &[Cell], widths: &[usize], colour: bool) -> String {
    let blank = Cell::from("");
    let mut out = String::new();
    for (i, w) in widths.iter().enumerate() {
        let cell = cells.get(i).unwrap_or(&blank);
        let last = i + 1 == widths.len();
        let pad = if last { 0 } else { w.saturating_sub(width(&cell.text)) };
        out.push_str(&cell.style.paint(&cell.text, colour));
        out.push_str(&" ".repeat(pad));
        if !last {
            out.push_str("  ");
        }
    }
    out.truncate(out.trim_end().len());
    out
}

/// The display width of a text, counted in characters (the tables hold ids, names, numbers and sentences).
pub fn width(text: &str) -> usize {
    text.chars().count()
}

/// `text` cut to `max` characters, with an ellipsis when cut; line breaks become spaces.
pub fn clip(text: &str, max: usize) -> String {
    let flat: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= max {
        return flat;
    }
    let mut cut: String = flat.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_lines_have_no_trailing_blanks() {
        let mut table = Table::new(&["NAME", "STATE", "NOTE"]);
        table.row(vec!["probe-1".into(), Cell::styled("ok", Style::Good), "".into()]);
        table.row(vec!["p".into(), "succeeded".into(), "done".into()]);
        assert_eq!(table.render(false), "NAME     STATE      NOTE\nprobe-1  ok\np        succeeded  done\n");
    }

    #[test]
    fn colour_wraps_the_text_but_not_the_padding() {
        let mut table = Table::new(&["STATE", "X"]);
        table.row(vec![Cell::styled("ok", Style::Bad), "1".into()]);
        assert_eq!(table.render(true).lines().nth(1), Some("\x1b[31mok\x1b[0m     1"));
    }

    #[test]
    fn clipping_counts_characters_and_flattens_lines() {
        assert_eq!(clip("héllo\nworld", 20), "héllo world");
        assert_eq!(clip("abcdef", 4), "abc…");
    }
}
