//! The pull [`Parser`]: iterative (a bit stack, no recursion), allocation-free and as lenient
//! as fastjson; [`Token`] is what it yields.

use super::bytes::find_quote_or_escape;
use super::string::hex4;
use super::{JsonError, JsonErrorKind, JsonNumber, JsonStr, MAX_DEPTH, Result};

/// One token of the pull parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Token<'a> {
    /// `{`
    ObjectStart,
    /// `}`
    ObjectEnd,
    /// `[`
    ArrayStart,
    /// `]`
    ArrayEnd,
    /// An object key, quoted or bare; the following `:` is consumed with it.
    Key(JsonStr<'a>),
    /// A string value.
    Str(JsonStr<'a>),
    /// A number value.
    Number(JsonNumber<'a>),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// A value must follow (top level, after a key).
    Value,
    /// After `[` or `,` in an array: a value or `]`.
    ValueOrEnd,
    /// After `{` or `,` in an object: a key or `}`.
    KeyOrEnd,
    /// After a value inside a container.
    CommaOrEnd,
    /// The top-level value is complete.
    Done,
}

/// An iterative, allocation-free JSON pull parser over a byte slice.
///
/// Use [`Parser::next_token`] for raw tokens, or the structured helpers
/// ([`Parser::expect_object_start`], [`Parser::next_key`], [`Parser::array_next`],
/// [`Parser::string`], [`Parser::skip_value`], ...). After an error the parser's state is
/// unspecified; stop using it.
#[derive(Clone, Debug)]
pub struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
    /// Bit `i` set: level `i` is an object; clear: an array.
    stack: u32,
    depth: u8,
    state: State,
    /// Whether an object may be a key (not inside such a key: no recursion on hostile input).
    object_keys: bool,
}

const _: () = assert!(MAX_DEPTH <= 32);

impl<'a> Parser<'a> {
    /// A parser positioned before the single top-level value of `input`.
    pub const fn new(input: &'a [u8]) -> Self {
        Parser {
            input,
            pos: 0,
            stack: 0,
            depth: 0,
            state: State::Value,
            object_keys: true,
        }
    }

    /// Current byte offset.
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Current nesting depth (0 at top level).
    pub const fn depth(&self) -> usize {
        self.depth as usize
    }

    fn err(&self, kind: JsonErrorKind) -> JsonError {
        JsonError::new(kind, self.pos)
    }

    fn skip_ws(&mut self) {
        while let Some(b) = self.input.get(self.pos) {
            if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0C | 0x08) {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn in_object(&self) -> bool {
        self.depth > 0 && (self.stack >> (self.depth - 1)) & 1 == 1
    }

    fn push(&mut self, object: bool) -> Result<()> {
        if self.depth as usize >= MAX_DEPTH {
            return Err(self.err(JsonErrorKind::TooDeep));
        }
        let bit = 1u32 << self.depth;
        if object {
            self.stack |= bit;
        } else {
            self.stack &= !bit;
        }
        self.depth += 1;
        self.state = if object {
            State::KeyOrEnd
        } else {
            State::ValueOrEnd
        };
        Ok(())
    }

    fn pop(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.after_value();
    }

    fn after_value(&mut self) {
        self.state = if self.depth == 0 {
            State::Done
        } else {
            State::CommaOrEnd
        };
    }

    /// The next token, or `None` once the top-level value is complete and only whitespace
    /// remains.
    ///
    /// # Errors
    /// Any syntax error, [`JsonErrorKind::TooDeep`], [`JsonErrorKind::TrailingData`].
    pub fn next_token(&mut self) -> Result<Option<Token<'a>>> {
        loop {
            self.skip_ws();
            match self.state {
                State::Done => {
                    return if self.pos >= self.input.len() {
                        Ok(None)
                    } else {
                        Err(self.err(JsonErrorKind::TrailingData))
                    };
                }
                State::CommaOrEnd => {
                    let obj = self.in_object();
                    match self.peek() {
                        Some(b',') => {
                            self.pos += 1;
                            self.state = if obj {
                                State::KeyOrEnd
                            } else {
                                State::ValueOrEnd
                            };
                        }
                        Some(b'}') if obj => {
                            self.pos += 1;
                            self.pop();
                            return Ok(Some(Token::ObjectEnd));
                        }
                        Some(b']') if !obj => {
                            self.pos += 1;
                            self.pop();
                            return Ok(Some(Token::ArrayEnd));
                        }
                        Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                        None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
                    }
                }
                State::KeyOrEnd => {
                    if self.peek() == Some(b'}') {
                        self.pos += 1;
                        self.pop();
                        return Ok(Some(Token::ObjectEnd));
                    }
                    let key = self.key()?;
                    self.skip_ws();
                    match self.peek() {
                        Some(b':') => self.pos += 1,
                        Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                        None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
                    }
                    self.state = State::Value;
                    return Ok(Some(Token::Key(key)));
                }
                State::ValueOrEnd => {
                    if self.peek() == Some(b']') {
                        self.pos += 1;
                        self.pop();
                        return Ok(Some(Token::ArrayEnd));
                    }
                    return self.value().map(Some);
                }
                State::Value => return self.value().map(Some),
            }
        }
    }

    fn key(&mut self) -> Result<JsonStr<'a>> {
        match self.peek() {
            Some(q @ (b'"' | b'\'')) => self.string_body(q),
            Some(b) if b == b'-' || b.is_ascii_digit() => {
                let start = self.pos;
                self.pos += 1;
                self.digits();
                let raw = self.input.get(start..self.pos).unwrap_or(&[]);
                if raw == b"-" {
                    return Err(self.err(JsonErrorKind::InvalidNumber));
                }
                Ok(JsonStr::from_raw(raw))
            }
            Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b'$' => {
                let start = self.pos;
                while let Some(b) = self.peek() {
                    if b.is_ascii_alphanumeric() || b == b'_' || b == b'$' {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                Ok(JsonStr::from_raw(
                    self.input.get(start..self.pos).unwrap_or(&[]),
                ))
            }
            // An object as a key: fastjson writes `MessageQueue` map keys so (ConsumeStats,
            // ResetOffsetBody). The key is the object's source text, braces included: read it
            // with a `Parser` of its own.
            Some(b'{') if self.object_keys => {
                let rest = self.input.get(self.pos..).unwrap_or(&[]);
                let mut sub = Parser::new(rest);
                sub.object_keys = false;
                sub.skip_value().map_err(|e| JsonError {
                    offset: self.pos + e.offset,
                    kind: e.kind,
                })?;
                let raw = rest.get(..sub.pos).unwrap_or(&[]);
                self.pos += sub.pos;
                Ok(JsonStr::from_raw(raw))
            }
            Some(_) => Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `self.pos` is at the opening quote `q`.
    fn string_body(&mut self, q: u8) -> Result<JsonStr<'a>> {
        self.pos += 1;
        let start = self.pos;
        let mut escaped = false;
        loop {
            let Some(at) = find_quote_or_escape(self.input, self.pos, q) else {
                self.pos = self.input.len();
                return Err(self.err(JsonErrorKind::UnexpectedEnd));
            };
            self.pos = at;
            if self.peek() == Some(q) {
                let raw = self.input.get(start..self.pos).unwrap_or(&[]);
                self.pos += 1;
                return Ok(JsonStr { raw, escaped });
            }
            // Backslash: validate the escape's syntax now so later decoding only has
            // surrogate pairing and UTF-8 left to check.
            escaped = true;
            match self.input.get(self.pos + 1) {
                Some(b'"' | b'\\' | b'/' | b'\'' | b'b' | b'f' | b'n' | b'r' | b't') => {
                    self.pos += 2;
                }
                Some(b'u') => {
                    if hex4(self.input, self.pos + 2).is_none() {
                        return Err(self.err(JsonErrorKind::InvalidEscape));
                    }
                    self.pos += 6;
                }
                Some(_) => return Err(self.err(JsonErrorKind::InvalidEscape)),
                None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
            }
        }
    }

    fn number(&mut self) -> Result<JsonNumber<'a>> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        if self.digits() == 0 {
            return Err(self.err(JsonErrorKind::InvalidNumber));
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.err(JsonErrorKind::InvalidNumber));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.err(JsonErrorKind::InvalidNumber));
            }
        }
        Ok(JsonNumber {
            raw: self.input.get(start..self.pos).unwrap_or(&[]),
        })
    }

    fn literal(&mut self, word: &[u8]) -> Result<()> {
        let end = self.pos.saturating_add(word.len());
        match self.input.get(self.pos..end) {
            Some(w) if w == word => {
                self.pos = end;
                Ok(())
            }
            Some(_) => Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    fn value(&mut self) -> Result<Token<'a>> {
        let tok = match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                self.push(true)?;
                return Ok(Token::ObjectStart);
            }
            Some(b'[') => {
                self.pos += 1;
                self.push(false)?;
                return Ok(Token::ArrayStart);
            }
            Some(q @ (b'"' | b'\'')) => Token::Str(self.string_body(q)?),
            Some(b'-' | b'0'..=b'9') => Token::Number(self.number()?),
            Some(b't') => {
                self.literal(b"true")?;
                Token::Bool(true)
            }
            Some(b'f') => {
                self.literal(b"false")?;
                Token::Bool(false)
            }
            Some(b'n') => {
                self.literal(b"null")?;
                Token::Null
            }
            Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
        };
        self.after_value();
        Ok(tok)
    }

    /// Reads the next value token (not a key, not an end token).
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] if the next token is a key or a container end.
    pub fn next_value(&mut self) -> Result<Token<'a>> {
        if self.state == State::Value {
            // Fast path (the usual case after a key): same as `next_token` in this state.
            self.skip_ws();
            return self.value();
        }
        match self.next_token()? {
            Some(Token::Key(_) | Token::ObjectEnd | Token::ArrayEnd) => {
                Err(self.err(JsonErrorKind::UnexpectedToken))
            }
            Some(t) => Ok(t),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    /// Skips the next value, including a whole object or array, iteratively.
    ///
    /// # Errors
    /// Syntax errors inside the skipped value.
    pub fn skip_value(&mut self) -> Result<()> {
        let base = self.depth;
        match self.next_value()? {
            Token::ObjectStart | Token::ArrayStart => loop {
                match self.next_token()? {
                    Some(Token::ObjectEnd | Token::ArrayEnd) if self.depth == base => {
                        return Ok(());
                    }
                    Some(_) => {}
                    None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
                }
            },
            _ => Ok(()),
        }
    }

    /// Skips the next value like [`Parser::skip_value`] and returns its source text.
    ///
    /// # Errors
    /// As [`Parser::skip_value`].
    pub fn skip_value_span(&mut self) -> Result<&'a [u8]> {
        self.skip_ws();
        let start = self.pos;
        self.skip_value()?;
        Ok(self.input.get(start..self.pos).unwrap_or(&[]))
    }

    /// Expects `{`.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] if the next value is not an object.
    pub fn expect_object_start(&mut self) -> Result<()> {
        match self.next_value()? {
            Token::ObjectStart => Ok(()),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Expects `[`.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] if the next value is not an array.
    pub fn expect_array_start(&mut self) -> Result<()> {
        match self.next_value()? {
            Token::ArrayStart => Ok(()),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Inside an object: the next key, or `None` after consuming the closing `}`. After a key
    /// the caller must consume its value (read it or [`Parser::skip_value`]).
    ///
    /// # Errors
    /// Syntax errors; [`JsonErrorKind::UnexpectedToken`] if not positioned inside an object.
    pub fn next_key(&mut self) -> Result<Option<JsonStr<'a>>> {
        if !self.in_object() || !matches!(self.state, State::KeyOrEnd | State::CommaOrEnd) {
            return Err(self.err(JsonErrorKind::UnexpectedToken));
        }
        // Inlined `next_token` for these two states (same acceptance, same error offsets).
        self.skip_ws();
        if self.state == State::CommaOrEnd {
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.state = State::KeyOrEnd;
                    self.skip_ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    self.pop();
                    return Ok(None);
                }
                Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
            }
        }
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.pop();
            return Ok(None);
        }
        let key = self.key()?;
        self.skip_ws();
        match self.peek() {
            Some(b':') => self.pos += 1,
            Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
            None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
        self.state = State::Value;
        Ok(Some(key))
    }

    /// Inside an array: `true` if another element follows (then read or skip it), `false`
    /// after consuming the closing `]`.
    ///
    /// # Errors
    /// Syntax errors; [`JsonErrorKind::UnexpectedToken`] if not positioned inside an array.
    pub fn array_next(&mut self) -> Result<bool> {
        if self.depth == 0 || self.in_object() {
            return Err(self.err(JsonErrorKind::UnexpectedToken));
        }
        self.skip_ws();
        if self.state == State::CommaOrEnd {
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.state = State::ValueOrEnd;
                    self.skip_ws();
                }
                Some(b']') => {}
                Some(_) => return Err(self.err(JsonErrorKind::UnexpectedByte)),
                None => return Err(self.err(JsonErrorKind::UnexpectedEnd)),
            }
        }
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                self.pop();
                Ok(false)
            }
            Some(_) if self.state == State::ValueOrEnd => {
                self.state = State::Value;
                Ok(true)
            }
            Some(_) => Err(self.err(JsonErrorKind::UnexpectedToken)),
            None => Err(self.err(JsonErrorKind::UnexpectedEnd)),
        }
    }

    /// Reads a string value.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for any other value.
    pub fn string(&mut self) -> Result<JsonStr<'a>> {
        match self.next_value()? {
            Token::Str(s) => Ok(s),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Reads a string value or `null` (`None`).
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for any other value.
    pub fn string_or_null(&mut self) -> Result<Option<JsonStr<'a>>> {
        match self.next_value()? {
            Token::Str(s) => Ok(Some(s)),
            Token::Null => Ok(None),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Reads a number value.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for any other value.
    pub fn number_value(&mut self) -> Result<JsonNumber<'a>> {
        match self.next_value()? {
            Token::Number(n) => Ok(n),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Reads an integer: a JSON number, or (fastjson leniency) a string holding one.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for other values; [`JsonErrorKind::InvalidNumber`]
    /// if it is not an integer in `i64` range.
    pub fn i64(&mut self) -> Result<i64> {
        let v = match self.next_value()? {
            Token::Number(n) => n.as_i64(),
            Token::Str(s) => s.parse_i64(),
            _ => return Err(self.err(JsonErrorKind::UnexpectedToken)),
        };
        v.ok_or(self.err(JsonErrorKind::InvalidNumber))
    }

    /// Reads a boolean: `true`/`false`, or (fastjson leniency) a string `"true"`/`"false"`.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedToken`] for other values.
    pub fn boolean(&mut self) -> Result<bool> {
        match self.next_value()? {
            Token::Bool(b) => Ok(b),
            Token::Str(s) => Ok(s.parse_bool()),
            _ => Err(self.err(JsonErrorKind::UnexpectedToken)),
        }
    }

    /// Checks that the top-level value is complete and only whitespace follows.
    ///
    /// # Errors
    /// [`JsonErrorKind::UnexpectedEnd`] if a container is still open,
    /// [`JsonErrorKind::TrailingData`] if anything follows.
    pub fn finish(&mut self) -> Result<()> {
        if self.state != State::Done {
            return Err(self.err(JsonErrorKind::UnexpectedEnd));
        }
        match self.next_token()? {
            None => Ok(()),
            Some(_) => Err(self.err(JsonErrorKind::TrailingData)),
        }
    }
}
