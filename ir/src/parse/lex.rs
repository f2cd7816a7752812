//! The lexer of the text form: tokens with their line:col, strings with `text::quote`'s
//! escapes undone, `@` provenance read as one token.

use crate::error::ParseError;
use crate::text::is_path_char;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Tok {
    Node(usize),
    Ident(String),
    Num(String),
    Str(String),
    Prov(String),
    Punct(char),
    Eof,
}

impl Tok {
    pub(super) fn describe(&self) -> String {
        match self {
            Tok::Node(n) => format!("'%{n}'"),
            Tok::Ident(s) | Tok::Num(s) => format!("'{s}'"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Prov(s) => format!("provenance '@{s}'"),
            Tok::Punct(c) => format!("'{c}'"),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

pub(super) struct Spanned {
    pub(super) tok: Tok,
    pub(super) line: usize,
    pub(super) col: usize,
}

pub(super) fn lex(src: &str) -> Result<Vec<Spanned>, ParseError> {
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut line, mut col) = (0, 1, 1);
    let mut out = Vec::new();
    let err = |line, col, expected: &str, found: String| ParseError { line, col, expected: expected.into(), found };
    while i < chars.len() {
        let c = chars[i];
        let (l0, c0) = (line, col);
        let take = |i: &mut usize, col: &mut usize, pred: &dyn Fn(char) -> bool| {
            let start = *i;
            while *i < chars.len() && pred(chars[*i]) {
                *i += 1;
                *col += 1;
            }
            chars[start..*i].iter().collect::<String>()
        };
        if c == '\n' {
            i += 1;
            line += 1;
            col = 1;
            continue;
        }
        if c.is_whitespace() {
            i += 1;
            col += 1;
            continue;
        }
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        let tok = if c == '%' {
            i += 1;
            col += 1;
            let digits = take(&mut i, &mut col, &|c| c.is_ascii_digit());
            Tok::Node(digits.parse().map_err(|_| err(l0, c0 + 1, "a node number after '%'", found_at(&chars, i)))?)
        } else if c.is_ascii_alphabetic() || c == '_' {
            Tok::Ident(take(&mut i, &mut col, &|c| c.is_ascii_alphanumeric() || c == '_'))
        } else if c.is_ascii_digit() || c == '-' || c == '+' {
            let text = take(&mut i, &mut col, &|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+'));
            Tok::Num(text)
        } else if c == '"' {
            Tok::Str(lex_string(&chars, &mut i, &mut line, &mut col)?)
        } else if c == '@' {
            i += 1;
            col += 1;
            if chars.get(i) == Some(&'"') {
                Tok::Prov(lex_string(&chars, &mut i, &mut line, &mut col)?)
            } else {
                let path = take(&mut i, &mut col, &|c| is_path_char(c));
                if path.is_empty() {
                    return Err(err(l0, c0 + 1, "a module path after '@'", found_at(&chars, i)));
                }
                Tok::Prov(path)
            }
        } else if ":=,[]{};()".contains(c) {
            i += 1;
            col += 1;
            Tok::Punct(c)
        } else {
            return Err(err(l0, c0, "a token", format!("'{c}'")));
        };
        out.push(Spanned { tok, line: l0, col: c0 });
    }
    out.push(Spanned { tok: Tok::Eof, line, col });
    Ok(out)
}

fn found_at(chars: &[char], i: usize) -> String {
    chars.get(i).map_or_else(|| "end of input".to_string(), |c| format!("'{c}'"))
}

/// Lex a quoted string starting at `chars[*i] == '"'`, undoing `text::quote`'s escapes.
fn lex_string(chars: &[char], i: &mut usize, line: &mut usize, col: &mut usize) -> Result<String, ParseError> {
    let (l0, c0) = (*line, *col);
    let err = |expected: &str, found: String, line, col| ParseError { line, col, expected: expected.into(), found };
    *i += 1;
    *col += 1;
    let mut s = String::new();
    loop {
        let Some(&c) = chars.get(*i) else {
            return Err(err("a closing '\"'", format!("end of input (string opened at {l0}:{c0})"), *line, *col));
        };
        *i += 1;
        *col += 1;
        match c {
            '"' => return Ok(s),
            '\n' => return Err(err("a closing '\"' before the end of the line", "a newline".into(), *line, *col - 1)),
            '\\' => {
                let e = chars.get(*i).copied();
                *i += 1;
                *col += 1;
                match e {
                    Some('"') => s.push('"'),
                    Some('\\') => s.push('\\'),
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some('u') if chars.get(*i) == Some(&'{') => {
                        let start = *i + 1;
                        let end = chars[start..].iter().position(|&c| c == '}').map(|p| start + p);
                        let code = end
                            .and_then(|e| u32::from_str_radix(&chars[start..e].iter().collect::<String>(), 16).ok())
                            .and_then(char::from_u32);
                        match (code, end) {
                            (Some(ch), Some(e)) => {
                                s.push(ch);
                                *col += e + 1 - *i;
                                *i = e + 1;
                            }
                            _ => return Err(err("a \\u{HEX} escape", "a malformed escape".into(), *line, *col)),
                        }
                    }
                    other => {
                        let found = other.map_or_else(|| "end of input".to_string(), |c| format!("'\\{c}'"));
                        return Err(err("an escape (\\\" \\\\ \\n \\t \\u{..})", found, *line, *col - 1));
                    }
                }
            }
            c => s.push(c),
        }
    }
}
