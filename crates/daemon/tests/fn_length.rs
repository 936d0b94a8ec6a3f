//! No function of the daemon, the store or the client is longer than
//! `LINES_MAX` lines (issue 28): a longer one fails here, listed with its file,
//! line and length, and is to be split along its concepts.
//!
//! Test code is not held to it: modules and items under `#[cfg(test)]` (inline, or
//! files such as `tests.rs` and `grants_tests.rs` declared so) and `#[test]`
//! functions. Source files are found from each crate's root (`src/lib.rs`,
//! `src/main.rs`, `src/bin/`) by their `mod` declarations (`#[path]` too), so a
//! file is judged test code by how the compiler sees it, not by its name; a file
//! under `src/` that no declaration reaches fails the test rather than going
//! unchecked.
//!
//! A function's length runs from the line of its `fn` keyword to the line of its
//! body's closing brace (attributes and doc comments not counted); a function
//! nested in another counts in both. The files are read by a small lexer of Rust's
//! tokens (comments, nested block comments, strings, raw strings, byte and C
//! strings, char literals and lifetimes), so a brace in a string, a char or a
//! comment never counts. Written in Rust, as a test of this crate, so that
//! `cargo test` (and scripts/test.sh) runs it with nothing else installed.

use std::collections::BTreeSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The longest a non-test function may be, in lines.
const LINES_MAX: usize = 70;

/// The crates held to `LINES_MAX`, relative to the workspace's root.
const CRATES: [&str; 3] = ["crates/daemon", "crates/store", "crates/client"];

#[test]
fn no_function_over_the_line_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut long = Vec::new();
    let mut unreached = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let scan = scan_crate(&src);
        long.extend(scan.functions.into_iter().filter(|f| f.lines > LINES_MAX));
        let mut all = Vec::new();
        rust_files(&src, &mut all);
        unreached.extend(all.into_iter().filter(|f| !scan.visited.contains(f)));
    }
    assert!(
        unreached.is_empty(),
        "files under src/ that no `mod` declaration reaches (not checked; declare them, or teach \
         crates/daemon/tests/fn_length.rs how they are included):\n{}",
        unreached.iter().map(|p| format!("  {}", p.display())).collect::<Vec<_>>().join("\n")
    );
    long.sort_by(|a, b| b.lines.cmp(&a.lines).then_with(|| a.file.cmp(&b.file)));
    let root = root.canonicalize().unwrap_or(root);
    let list: Vec<String> = long
        .iter()
        .map(|f| {
            let file = f.file.strip_prefix(&root).unwrap_or(&f.file);
            format!("  {} lines: fn {} ({}:{})", f.lines, f.name, file.display(), f.line)
        })
        .collect();
    assert!(
        long.is_empty(),
        "{} functions are longer than {LINES_MAX} lines; split each along its concepts:\n{}",
        long.len(),
        list.join("\n")
    );
}

/// A function found, and its length in lines.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Function {
    file: PathBuf,
    name: String,
    /// Line of its `fn` keyword, from 1.
    line: usize,
    lines: usize,
}

/// What scanning one crate found: its non-test functions, and every file visited
/// (test-only ones too).
struct CrateScan {
    functions: Vec<Function>,
    visited: BTreeSet<PathBuf>,
}

/// Every `.rs` file under `dir`, canonical.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for e in entries {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.canonicalize().expect("canonical path"));
        }
    }
}

/// Scans the crate whose sources are in `src`, from its roots down its modules.
fn scan_crate(src: &Path) -> CrateScan {
    let mut scan = CrateScan { functions: Vec::new(), visited: BTreeSet::new() };
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"].iter().map(|r| src.join(r)).filter(|p| p.exists()).collect();
    if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
        for b in bins.flatten() {
            let p = b.path();
            if p.is_dir() {
                roots.push(p.join("main.rs"));
            } else if p.extension().is_some_and(|x| x == "rs") {
                roots.push(p);
            }
        }
    }
    assert!(!roots.is_empty(), "{}: no crate root", src.display());
    for r in roots {
        // A crate root's submodules are beside it, as a mod.rs's are.
        let dir = r.parent().expect("a root has a directory").to_path_buf();
        scan_file(&r, &dir, false, &mut scan);
    }
    scan
}

/// Scans one source file: `dir` is where its `mod x;` declarations' files are
/// (`x.rs`, `x/mod.rs`), `test` whether the compiler sees it only in tests.
fn scan_file(file: &Path, dir: &Path, test: bool, scan: &mut CrateScan) {
    let file = file.canonicalize().unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    if !scan.visited.insert(file.clone()) {
        return;
    }
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let toks = lex(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let found = parse(&toks);
    if !test && !found.test_only {
        scan.functions.extend(found.functions.into_iter().map(|(name, line, lines)| Function {
            file: file.clone(),
            name,
            line,
            lines,
        }));
    }
    // As rustc finds them: `#[path]` is relative to this file's directory (or, inside
    // inline modules, to `dir` and their names), and the file it names has its own
    // submodules beside it; `mod x;` is `dir/x.rs` (submodules in `dir/x/`) or
    // `dir/x/mod.rs`.
    let own = file.parent().expect("a file has a directory").to_path_buf();
    for m in found.modules {
        let test = test || found.test_only || m.test;
        let base = if m.inline.is_empty() && m.path.is_some() { own.clone() } else { dir.to_path_buf() };
        let base = m.inline.iter().fold(base, |d, i| d.join(i));
        let (path, sub) = match &m.path {
            Some(p) => {
                let p = base.join(p);
                let sub = p.parent().expect("a path has a directory").to_path_buf();
                (p, sub)
            }
            None if base.join(format!("{}.rs", m.name)).exists() => {
                (base.join(format!("{}.rs", m.name)), base.join(&m.name))
            }
            None => (base.join(&m.name).join("mod.rs"), base.join(&m.name)),
        };
        assert!(path.exists(), "{}: module {} declared, but {} does not exist", file.display(), m.name, path.display());
        scan_file(&path, &sub, test, scan);
    }
}

/// A token's kind: only what finding items and their extent needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ident,
    Punct(char),
    /// A string, char or number literal: never anything structural.
    Literal,
    Lifetime,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tok {
    kind: Kind,
    text: String,
    /// Line it starts on, from 1.
    line: usize,
}

/// The tokens of `text`, comments dropped.
fn lex(text: &str) -> Result<Vec<Tok>, String> {
    let c: Vec<char> = text.chars().collect();
    let mut toks = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < c.len() {
        let start_line = line;
        let ch = c[i];
        if ch == '\n' {
            line += 1;
            i += 1;
        } else if ch.is_whitespace() {
            i += 1;
        } else if ch == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if ch == '/' && c.get(i + 1) == Some(&'*') {
            i = skip_block_comment(&c, i, &mut line)?;
        } else if let Some((body, end)) = string_literal(&c, i, &mut line)? {
            toks.push(Tok { kind: Kind::Literal, text: c[body].iter().collect(), line: start_line });
            i = end;
        } else if ch == '\'' || (ch == 'b' && c.get(i + 1) == Some(&'\'')) {
            let (kind, end) = quote(&c, i)?;
            let text = if kind == Kind::Lifetime { c[i..end].iter().collect() } else { String::new() };
            toks.push(Tok { kind, text, line: start_line });
            i = end;
        } else if ch == 'r' && c.get(i + 1) == Some(&'#') && c.get(i + 2).is_some_and(|&x| is_ident_start(x)) {
            // A raw identifier: r#fn is the identifier `fn`, not the keyword.
            let end = ident_end(&c, i + 2);
            toks.push(Tok { kind: Kind::Ident, text: format!("r#{}", c[i + 2..end].iter().collect::<String>()), line });
            i = end;
        } else if is_ident_start(ch) {
            let end = ident_end(&c, i);
            toks.push(Tok { kind: Kind::Ident, text: c[i..end].iter().collect(), line });
            i = end;
        } else if ch.is_ascii_digit() {
            // Digits, suffixes, exponents; a '.' only before a digit (`1..2`, `t.0.1`).
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || (c[i] == '.' && next_is_digit(&c, i))) {
                i += 1;
            }
            toks.push(Tok { kind: Kind::Literal, text: String::new(), line });
        } else {
            toks.push(Tok { kind: Kind::Punct(ch), text: ch.to_string(), line });
            i += 1;
        }
    }
    Ok(toks)
}

fn next_is_digit(c: &[char], i: usize) -> bool {
    c.get(i + 1).is_some_and(|d| d.is_ascii_digit())
}

fn is_ident_start(ch: char) -> bool {
    ch == '_' || ch.is_alphabetic()
}

fn ident_end(c: &[char], mut i: usize) -> usize {
    while i < c.len() && (c[i] == '_' || c[i].is_alphanumeric()) {
        i += 1;
    }
    i
}

/// Past the block comment at `i` (`/* ... */`, nested ones inside).
fn skip_block_comment(c: &[char], mut i: usize, line: &mut usize) -> Result<usize, String> {
    let start = *line;
    let mut depth = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            depth += 1;
            i += 2;
        } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return Ok(i);
            }
        } else {
            if c[i] == '\n' {
                *line += 1;
            }
            i += 1;
        }
    }
    Err(format!("line {start}: block comment not closed"))
}

/// If a string literal starts at `i` (`"..."`, `r#"..."#`, `b"..."`, `br"..."`,
/// `c"..."`, `cr"..."`): where its text is (escapes left as they are), and where it
/// ends.
fn string_literal(c: &[char], i: usize, line: &mut usize) -> Result<Option<(Range<usize>, usize)>, String> {
    let start = *line;
    // The prefix must begin the token: the `r` of `for"` is no raw string.
    if i > 0 && (c[i - 1] == '_' || c[i - 1].is_alphanumeric()) {
        return Ok(None);
    }
    let mut j = i;
    if c.get(j).is_some_and(|&x| x == 'b' || x == 'c') {
        j += 1;
    }
    let raw = c.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let mut hashes = 0;
    while raw && c.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if c.get(j) != Some(&'"') {
        return Ok(None);
    }
    j += 1;
    let body = j;
    while j < c.len() {
        match c[j] {
            '\\' if !raw => {
                if c.get(j + 1) == Some(&'\n') {
                    *line += 1;
                }
                j += 2;
            }
            '"' if (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) => return Ok(Some((body..j, j + 1 + hashes))),
            '\n' => {
                *line += 1;
                j += 1;
            }
            _ => j += 1,
        }
    }
    Err(format!("line {start}: string not closed"))
}

/// The char literal (`'x'`, `'\n'`, `'\u{7f}'`, `b'x'`) or lifetime (`'a`,
/// `'static`) at `i`, and where it ends.
fn quote(c: &[char], i: usize) -> Result<(Kind, usize), String> {
    let q = if c[i] == 'b' { i + 1 } else { i };
    match c.get(q + 1) {
        Some('\\') => {
            // An escape: the literal ends at the next quote after it.
            let mut j = q + 3;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            Ok((Kind::Literal, j + 1))
        }
        Some(_) if c.get(q + 2) == Some(&'\'') => Ok((Kind::Literal, q + 3)),
        Some(&x) if is_ident_start(x) && q == i => Ok((Kind::Lifetime, ident_end(c, q + 1))),
        _ => Err(format!(
            "a quote neither a char literal nor a lifetime: {:?}",
            c[i..(i + 8).min(c.len())].iter().collect::<String>()
        )),
    }
}

/// A `mod name;` declaration: its file is scanned too.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ModDecl {
    name: String,
    /// Its `#[path = "..."]`, if any.
    path: Option<String>,
    /// Names of the inline modules it is declared in (`mod a { mod b; }`).
    inline: Vec<String>,
    /// Under `#[cfg(test)]` (itself or an inline module around it).
    test: bool,
}

/// What one file holds.
#[derive(Debug, Default)]
struct Parsed {
    /// Non-test functions: (name, line of `fn`, lines).
    functions: Vec<(String, usize, usize)>,
    modules: Vec<ModDecl>,
    /// The file says `#![cfg(test)]`.
    test_only: bool,
}

/// Attributes seen before an item.
#[derive(Default)]
struct Attrs {
    test: bool,
    path: Option<String>,
}

/// Finds the functions and module declarations of a file's tokens, skipping
/// test-only items.
fn parse(toks: &[Tok]) -> Parsed {
    let mut out = Parsed::default();
    let mut attrs = Attrs::default();
    // Inline modules open: (name, test-only, brace depth inside them).
    let mut inline: Vec<(String, bool, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        let in_test = inline.iter().any(|m| m.1);
        match t.kind {
            Kind::Punct('#') if attribute_at(toks, i).is_some() => {
                let (inner, a, end) = attribute_at(toks, i).expect("checked");
                if inner {
                    out.test_only |= depth == 0 && is_test_attr(a);
                } else {
                    attrs.test |= is_test_attr(a);
                    attrs.path = path_attr(a).or(attrs.path.take());
                }
                i = end + 1;
            }
            Kind::Ident if t.text == "mod" && toks.get(i + 1).is_some_and(|n| n.kind == Kind::Ident) => {
                let name = toks[i + 1].text.clone();
                let test = in_test || attrs.test;
                match toks.get(i + 2).map(|n| n.kind) {
                    Some(Kind::Punct(';')) => {
                        let inline = inline.iter().map(|m| m.0.clone()).collect();
                        out.modules.push(ModDecl { name, path: attrs.path.take(), inline, test });
                        i += 3;
                    }
                    Some(Kind::Punct('{')) => {
                        depth += 1;
                        inline.push((name, test, depth));
                        i += 3;
                    }
                    _ => i += 1,
                }
                attrs = Attrs::default();
            }
            _ if attrs.test => match item_keyword(toks, i) {
                // Its module is visited as test code (a file of its own may hold
                // modules too).
                Some(k) if toks[k].text == "mod" => i = k,
                _ => {
                    i = item_end(toks, i) + 1;
                    attrs = Attrs::default();
                }
            },
            Kind::Ident if t.text == "fn" && toks.get(i + 1).is_some_and(|n| n.kind == Kind::Ident) => {
                if let Some(end) = fn_body_end(toks, i).filter(|_| !in_test) {
                    out.functions.push((toks[i + 1].text.clone(), t.line, toks[end].line - t.line + 1));
                }
                // On into the body: items nested in it are items too.
                i += 2;
                attrs = Attrs::default();
            }
            Kind::Punct('{') => {
                depth += 1;
                i += 1;
            }
            Kind::Punct('}') => {
                if inline.last().is_some_and(|m| m.2 == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                attrs = Attrs::default();
            }
            Kind::Punct(';') => {
                i += 1;
                attrs = Attrs::default();
            }
            _ => i += 1,
        }
    }
    out
}

/// The attribute at `i` (`#[...]`, or `#![...]`: `inner`): whether inner, the
/// tokens inside the brackets, and the index of the closing bracket.
fn attribute_at(toks: &[Tok], i: usize) -> Option<(bool, &[Tok], usize)> {
    let inner = toks.get(i + 1).is_some_and(|n| n.kind == Kind::Punct('!'));
    let open = if inner { i + 2 } else { i + 1 };
    if !toks.get(open).is_some_and(|n| n.kind == Kind::Punct('[')) {
        return None;
    }
    let end = matching(toks, open);
    Some((inner, &toks[open + 1..end], end))
}

/// The index of the bracket closing the one at `open` (`[`, `(` or `{`); the last
/// token if it is not closed.
fn matching(toks: &[Tok], open: usize) -> usize {
    let mut depth = 0usize;
    for (j, t) in toks.iter().enumerate().skip(open) {
        match t.kind {
            Kind::Punct('[' | '(' | '{') => depth += 1,
            Kind::Punct(']' | ')' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

/// Words that may come before an item's keyword.
const QUALIFIERS: [&str; 6] = ["pub", "unsafe", "async", "default", "extern", "crate"];
/// Keywords that start an item.
const ITEM_KEYWORDS: [&str; 12] =
    ["fn", "mod", "impl", "struct", "enum", "union", "trait", "use", "static", "const", "type", "macro_rules"];

/// If an item starts at `i` (past visibility and qualifiers: `pub(crate)`,
/// `unsafe`, `extern "C"`, ...): the index of its keyword.
fn item_keyword(toks: &[Tok], mut i: usize) -> Option<usize> {
    while let Some(t) = toks.get(i) {
        let next_is = |k: Kind| toks.get(i + 1).is_some_and(|n| n.kind == k);
        match t.kind {
            // `const fn` and `const X` alike: the item's extent is found the same way.
            Kind::Ident if ITEM_KEYWORDS.contains(&t.text.as_str()) => return Some(i),
            Kind::Ident if t.text == "pub" && next_is(Kind::Punct('(')) => i = matching(toks, i + 1) + 1,
            Kind::Ident if QUALIFIERS.contains(&t.text.as_str()) => i += 1,
            Kind::Literal if i > 0 && toks[i - 1].text == "extern" => i += 1,
            _ => return None,
        }
    }
    None
}

/// The last token of what starts at `i`. An item (`item_keyword`) ends at its `;`
/// or at the brace closing its block; anything else (a field, a variant, a
/// statement) at the `,` or `;` after it, or before the brace closing what holds
/// it. A `;`, `,` or `{` inside brackets does not count.
fn item_end(toks: &[Tok], i: usize) -> usize {
    let item = item_keyword(toks, i).is_some();
    let mut j = i;
    while j < toks.len() {
        match toks[j].kind {
            Kind::Punct('{') if item => return matching(toks, j),
            Kind::Punct('(' | '[' | '{') => j = matching(toks, j),
            Kind::Punct(';') => return j,
            Kind::Punct(',') if !item => return j,
            Kind::Punct(')' | ']' | '}') => return j - 1,
            _ => {}
        }
        j += 1;
    }
    toks.len() - 1
}

/// For the `fn` at `i`: the index of its body's closing brace, None if it has no
/// body (a trait's or an extern block's declaration).
fn fn_body_end(toks: &[Tok], i: usize) -> Option<usize> {
    let end = item_end(toks, i);
    (toks[end].kind == Kind::Punct('}')).then_some(end)
}

/// Whether an attribute (the tokens inside `#[...]`) makes its item test code:
/// `test` (or a path ending in it, `tokio::test`), or a `cfg` false outside tests.
fn is_test_attr(a: &[Tok]) -> bool {
    let idents: Vec<&str> = a.iter().filter(|t| t.kind == Kind::Ident).map(|t| t.text.as_str()).collect();
    let is_path = a.iter().all(|t| t.kind == Kind::Ident || t.kind == Kind::Punct(':'));
    if is_path && idents.last() == Some(&"test") {
        return true;
    }
    if idents.first() == Some(&"cfg") && a.get(1).is_some_and(|t| t.kind == Kind::Punct('(')) {
        let (v, _) = cfg_value(a, 2);
        return v == Some(false);
    }
    false
}

/// The value of the cfg predicate at `i` outside tests: `test` false, `not`, `all`
/// and `any` as the compiler's, anything else unknown (None). Returns the index
/// past the predicate.
fn cfg_value(a: &[Tok], i: usize) -> (Option<bool>, usize) {
    let Some(t) = a.get(i) else { return (None, i + 1) };
    if t.kind == Kind::Ident && a.get(i + 1).is_some_and(|n| n.kind == Kind::Punct('(')) {
        let close = matching(a, i + 1);
        let mut args = Vec::new();
        let mut j = i + 2;
        while j < close {
            let (v, next) = cfg_value(a, j);
            args.push(v);
            j = next;
            // To the next argument (past `= "value"` of a `name = "value"`).
            while j < close && a[j].kind != Kind::Punct(',') {
                j += 1;
            }
            j += 1;
        }
        let v = match t.text.as_str() {
            "not" => args.first().copied().flatten().map(|b| !b),
            "all" if args.contains(&Some(false)) => Some(false),
            "all" if args.iter().all(|v| *v == Some(true)) => Some(true),
            "any" if args.contains(&Some(true)) => Some(true),
            "any" if args.iter().all(|v| *v == Some(false)) => Some(false),
            _ => None,
        };
        return (v, close + 1);
    }
    let is_test =
        t.kind == Kind::Ident && t.text == "test" && !a.get(i + 1).is_some_and(|n| n.kind == Kind::Punct('='));
    (is_test.then_some(false), i + 1)
}

/// The path of `#[path = "..."]`.
fn path_attr(a: &[Tok]) -> Option<String> {
    match a {
        [p, eq, lit] if p.text == "path" && eq.kind == Kind::Punct('=') && lit.kind == Kind::Literal => {
            Some(lit.text.clone())
        }
        _ => None,
    }
}

/// The functions `parse` finds in `src`: (name, lines).
#[cfg(test)]
fn lengths(src: &str) -> Vec<(String, usize)> {
    parse(&lex(src).expect("lexes")).functions.into_iter().map(|(n, _, l)| (n, l)).collect()
}

#[test]
fn braces_in_strings_chars_and_comments_do_not_count() {
    let src = r####"
fn a() {
    let s = "}}} { \" }";
    let r = r#"}"# ;
    let r2 = r##"a "# } "##;
    let b = b"}";
    let c = '}';
    let e = '\'';
    let u = '\u{7d}';
    let bc = b'}';
    // }
    /* } /* nested } */ still a comment } */
    let l: &'static str = "";
    'outer: loop { break 'outer; }
    let m = "a string over
two lines {";
}
fn b() {}
"####;
    assert_eq!(lengths(src), vec![("a".to_string(), 16), ("b".to_string(), 1)]);
}

#[test]
fn test_code_is_skipped() {
    let src = r#"
fn kept() {
}
#[cfg(test)]
mod tests {
    fn helper() {}
    #[test]
    fn t() {}
}
#[cfg(all(test, feature = "x"))]
fn only_in_tests() {}
#[cfg(not(test))]
fn not_in_tests() {}
#[cfg(any(test, feature = "x"))]
fn maybe() {}
#[test]
fn a_test() {}
struct S {
    #[cfg(test)]
    field: u32,
    other: u32,
}
fn after() {}
"#;
    let names: Vec<String> = lengths(src).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["kept", "not_in_tests", "maybe", "after"]);
}

#[test]
fn declarations_and_signatures() {
    let src = r#"
trait T { fn declared(&self); fn with_default(&self) {} }
extern "C" { fn c_side(x: u32) -> u32; }
fn ptr(f: fn(u32) -> u32, a: [u8; 4]) -> impl Fn(&[u8]) -> bool
where
    u32: Copy,
{
    move |_| true
}
fn r#match() {}
pub(crate) const unsafe fn q() {}
"#;
    assert_eq!(
        lengths(src),
        vec![("with_default".to_string(), 1), ("ptr".to_string(), 6), ("r#match".to_string(), 1), ("q".to_string(), 1)]
    );
}

#[test]
fn module_declarations() {
    let src = r#"
mod plain;
#[path = "other_file.rs"]
mod renamed;
#[cfg(test)]
#[path = "x_tests.rs"]
mod tests;
#[cfg(test)]
pub(crate) mod more_tests;
mod inline {
    mod nested;
}
"#;
    let p = parse(&lex(src).expect("lexes"));
    let m: Vec<(&str, Option<&str>, Vec<String>, bool)> =
        p.modules.iter().map(|m| (m.name.as_str(), m.path.as_deref(), m.inline.clone(), m.test)).collect();
    assert_eq!(
        m,
        vec![
            ("plain", None, vec![], false),
            ("renamed", Some("other_file.rs"), vec![], false),
            ("tests", Some("x_tests.rs"), vec![], true),
            ("more_tests", None, vec![], true),
            ("nested", None, vec!["inline".to_string()], false),
        ]
    );
}
