package expr

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits of an expression (docs/load-balancing.md#syntax-rules, P7 and
// P11). They bound the work a client can make the hub do per request, since
// expressions are parsed on the request path whenever the per-target cache
// misses.
const (
	MaxLen    = 1024
	MaxParams = 32
)

// Rule names one syntax rule of docs/load-balancing.md#syntax-rules. Every
// malformed_expression message starts with its rule ("P3: …") so clients
// and operators can tell which rule a header broke without reading the
// parser.
type Rule uint8

// The syntax rules. When a value breaks several, the first found is
// reported: P7, P3 and P9 are checked on the whole value first, then the
// value is read left to right.
const (
	// P1: the value is exactly one RFC 8941 Item whose bare item is a
	// token (the method), followed only by parameters; a string or number
	// method, an empty value or trailing characters break it.
	P1 Rule = iota + 1
	// P2: a parameter value is an RFC 8941 integer, decimal, token or
	// string; byte sequences, dates, display strings and malformed values
	// (bad escapes, unclosed strings, a lone '-') break it.
	P2
	// P3: no comma anywhere, not even inside a quoted string, because a
	// comma would make the header an RFC 8941 List.
	P3
	// P4: every parameter is written key=value with a non-empty value;
	// booleans are the tokens true and false, so ?1/?0 break it.
	P4
	// P5: a parameter key appears at most once.
	P5
	// P6: a parameter key matches [a-z][a-z0-9_]*.
	P6
	// P7: the value is at most MaxLen bytes.
	P7
	// P8: numbers stay within RFC 8941 limits: an integer has at most 15
	// digits, a decimal at most 12 integer and 3 fractional digits (a more
	// precise number must be quoted, e.g. "0.0625").
	P8
	// P9: no ';' inside a quoted string, so a parameter list can always be
	// split on ';' by simple tooling.
	P9
	// P10: the method token starts with a letter and has only
	// [A-Za-z0-9_-]; RFC 8941 tokens also allow '*', ':', '/' and others,
	// which no algorithm name uses.
	P10
	// P11: at most MaxParams parameters.
	P11
)

// String returns "P1" … "P11".
func (r Rule) String() string { return "P" + strconv.Itoa(int(r)) }

// Error is a syntax error: the rule broken and what was wrong.
type Error struct {
	Rule Rule
	Msg  string
}

// Error returns "<rule>: <message>", e.g. "P5: duplicate parameter key \"seed\"".
func (e *Error) Error() string { return e.Rule.String() + ": " + e.Msg }

func fail(r Rule, format string, args ...any) *Error {
	return &Error{Rule: r, Msg: fmt.Sprintf(format, args...)}
}

// Kind is the RFC 8941 type of a parameter value.
type Kind uint8

// The value kinds an expression may carry.
const (
	Integer Kind = iota + 1
	Decimal
	Token
	String
)

// String returns the RFC 8941 type name.
func (k Kind) String() string {
	switch k {
	case Integer:
		return "integer"
	case Decimal:
		return "decimal"
	case Token:
		return "token"
	case String:
		return "string"
	}
	return "invalid"
}

// Value is one parameter value.
type Value struct {
	Kind Kind
	// Int holds an Integer.
	Int int64
	// Dec holds a Decimal (an Integer is also copied here, so numeric
	// parameters can read Dec for either kind).
	Dec float64
	// Text holds a Token, or a String with its escapes removed.
	Text string
}

// Param is one key=value parameter.
type Param struct {
	Key   string
	Value Value
}

// Expression is a syntactically valid routing expression.
type Expression struct {
	// Method is the method token as written (not yet lower-cased).
	Method string
	// Params are the parameters in the order written; keys are unique.
	Params []Param
}

// Parse parses raw, which the proxy has already checked to be visible ASCII
// and trimmed. The error, when not nil, is an *Error.
func Parse(raw string) (Expression, error) {
	e, err := parse(raw)
	if err != nil {
		return Expression{}, err
	}
	return e, nil
}

func parse(s string) (Expression, *Error) {
	if len(s) > MaxLen {
		return Expression{}, fail(P7, "expression is %d bytes, more than %d", len(s), MaxLen)
	}
	if i := strings.IndexByte(s, ','); i >= 0 {
		return Expression{}, fail(P3, "commas are not allowed (byte %d)", i)
	}
	if err := checkQuotedSemicolons(s); err != nil {
		return Expression{}, err
	}
	i := skipSP(s, 0)
	if i == len(s) {
		return Expression{}, fail(P1, "expression is empty")
	}
	c := s[i]
	if !isAlpha(c) && c != '*' {
		return Expression{}, fail(P1, "routing method must be a token, found %s", describe(s[i:]))
	}
	j := scanToken(s, i)
	method := s[i:j]
	if err := checkMethod(method); err != nil {
		return Expression{}, err
	}
	i = j
	var params []Param
	for i < len(s) && s[i] == ';' {
		i = skipSP(s, i+1)
		if len(params) == MaxParams {
			return Expression{}, fail(P11, "more than %d parameters", MaxParams)
		}
		k := i
		for k < len(s) && s[k] != '=' && s[k] != ';' {
			k++
		}
		key := s[i:k]
		if !validKey(key) {
			return Expression{}, fail(P6, "invalid parameter key %q (want [a-z][a-z0-9_]*)", key)
		}
		if k == len(s) || s[k] == ';' {
			return Expression{}, fail(P4, "parameter %q requires an explicit value (key=value)", key)
		}
		for _, p := range params {
			if p.Key == key {
				return Expression{}, fail(P5, "duplicate parameter key %q", key)
			}
		}
		i = k + 1
		if i == len(s) || s[i] == ';' {
			return Expression{}, fail(P4, "parameter %q has an empty value", key)
		}
		v, n, err := parseValue(key, s[i:])
		if err != nil {
			return Expression{}, err
		}
		params = append(params, Param{Key: key, Value: v})
		i += n
	}
	if t := skipSP(s, i); t != len(s) {
		return Expression{}, fail(P1, "unexpected %q at byte %d; an expression is one item: method;key=value;…", s[i], i)
	}
	return Expression{Method: method, Params: params}, nil
}

// checkQuotedSemicolons applies P9 before anything splits on ';'. It tracks
// quotes and backslash escapes the way RFC 8941 strings do.
func checkQuotedSemicolons(s string) *Error {
	quoted, escaped := false, false
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case escaped:
			escaped = false
		case quoted && b == '\\':
			escaped = true
		case b == '"':
			quoted = !quoted
		case quoted && b == ';':
			return fail(P9, "semicolons are not allowed inside strings (byte %d)", i)
		}
	}
	return nil
}

func checkMethod(m string) *Error {
	if !isAlpha(m[0]) {
		return fail(P10, "invalid routing method %q: it must start with a letter", m)
	}
	for i := 1; i < len(m); i++ {
		if c := m[i]; !isAlpha(c) && !isDigit(c) && c != '_' && c != '-' {
			return fail(P10, "invalid routing method %q: only letters, digits, '_' and '-' are allowed", m)
		}
	}
	return nil
}

func validKey(k string) bool {
	if k == "" || k[0] < 'a' || k[0] > 'z' {
		return false
	}
	for i := 1; i < len(k); i++ {
		if c := k[i]; (c < 'a' || c > 'z') && !isDigit(c) && c != '_' {
			return false
		}
	}
	return true
}

// parseValue parses the bare item at the start of s and returns it with
// the number of bytes it used.
func parseValue(key, s string) (Value, int, *Error) {
	switch c := s[0]; {
	case c == '"':
		return parseString(key, s)
	case c == '-' || isDigit(c):
		return parseNumber(key, s)
	case isAlpha(c) || c == '*':
		n := scanToken(s, 0)
		return Value{Kind: Token, Text: s[:n]}, n, nil
	case c == '?':
		return Value{}, 0, fail(P4, "%s takes true or false, not ?1 or ?0", key)
	case c == ':':
		return Value{}, 0, fail(P2, "%s: byte sequences are not supported", key)
	case c == '@':
		return Value{}, 0, fail(P2, "%s: dates are not supported", key)
	case c == '%':
		return Value{}, 0, fail(P2, "%s: display strings are not supported", key)
	default:
		return Value{}, 0, fail(P2, "%s: value must be an integer, decimal, token or string, found %s", key, describe(s))
	}
}

func parseString(key, s string) (Value, int, *Error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return Value{}, 0, fail(P2, "%s: invalid escape in string (only \\\" and \\\\)", key)
			}
			i++
			b.WriteByte(s[i])
		case c == '"':
			return Value{Kind: String, Text: b.String()}, i + 1, nil
		case c < 0x20 || c > 0x7e:
			return Value{}, 0, fail(P2, "%s: string holds a byte outside visible ASCII and space", key)
		default:
			b.WriteByte(c)
		}
	}
	return Value{}, 0, fail(P2, "%s: unterminated string", key)
}

// parseNumber follows RFC 8941 §4.2.4.
func parseNumber(key, s string) (Value, int, *Error) {
	i := 0
	if s[0] == '-' {
		i = 1
	}
	if i == len(s) || !isDigit(s[i]) {
		return Value{}, 0, fail(P2, "%s: '-' must be followed by a digit", key)
	}
	start, dot := i, -1
	for ; i < len(s); i++ {
		c := s[i]
		if isDigit(c) {
			continue
		}
		if c == '.' && dot < 0 {
			if i-start > 12 {
				return Value{}, 0, fail(P8, "%s: a decimal has at most 12 integer digits", key)
			}
			dot = i
			continue
		}
		break
	}
	lit := s[:i]
	if dot < 0 {
		if i-start > 15 {
			return Value{}, 0, fail(P8, "%s: an integer has at most 15 digits", key)
		}
		n, err := strconv.ParseInt(lit, 10, 64)
		if err != nil { // unreachable: at most 15 digits always fit
			return Value{}, 0, fail(P8, "%s: integer out of range", key)
		}
		return Value{Kind: Integer, Int: n, Dec: float64(n)}, i, nil
	}
	switch frac := i - dot - 1; {
	case frac == 0:
		return Value{}, 0, fail(P2, "%s: a decimal needs digits after '.'", key)
	case frac > 3:
		return Value{}, 0, fail(P8, "%s: %s has more than 3 fractional digits; quote it (%s=\"%s\")", key, lit, key, lit)
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil { // unreachable: the grammar above only admits valid decimals
		return Value{}, 0, fail(P2, "%s: invalid decimal %q", key, lit)
	}
	return Value{Kind: Decimal, Dec: f}, i, nil
}

// scanToken returns the end of the RFC 8941 token starting at s[i].
func scanToken(s string, i int) int {
	for i++; i < len(s); i++ {
		if c := s[i]; !isTchar(c) && c != ':' && c != '/' {
			break
		}
	}
	return i
}

func skipSP(s string, i int) int {
	for i < len(s) && s[i] == ' ' {
		i++
	}
	return i
}

func describe(s string) string {
	switch c := s[0]; {
	case c == '"':
		return "a string"
	case c == '-' || isDigit(c):
		return "a number"
	default:
		return strconv.QuoteRune(rune(c))
	}
}

func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// isTchar is RFC 9110's tchar.
func isTchar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// IsPlainNumber reports whether s is [+-]?digits(.digits)?: the only form a
// quoted number may take (docs/load-balancing.md#parameter-types), so
// "inf", "1e3" or " 1" never reach a numeric setting.
func IsPlainNumber(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	return allDigits(whole) && (!hasDot || allDigits(frac))
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}
