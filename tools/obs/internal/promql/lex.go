package promql

import "fmt"

// kind is a token's class.
type kind int

const (
	ident  kind = iota // a name: metric, label, function, keyword
	number             // a number or a duration (5m, 0.99, 1e3)
	str                // a quoted string, unquoted
	op                 // an operator
	punct              // ( ) { } [ ] ,
)

type token struct {
	kind kind
	text string
	pos  int
}

// lex splits a PromQL expression into tokens.
func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#': // a comment runs to the end of the line
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j])) {
				j++
			}
			out = append(out, token{ident, s[i:j], i})
			i = j
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			j := i + 1
			for j < len(s) && (isDigit(s[j]) || isIdentStart(s[j]) || s[j] == '.') {
				j++
			}
			out = append(out, token{number, s[i:j], i})
			i = j
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			var val []byte
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' && j+1 < len(s) {
					j++
				}
				val = append(val, s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			out = append(out, token{str, string(val), i})
			i = j + 1
		case c == '(' || c == ')' || c == '{' || c == '}' || c == '[' || c == ']' || c == ',':
			out = append(out, token{punct, string(c), i})
			i++
		default:
			n := operatorLen(s[i:])
			if n == 0 {
				return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
			}
			out = append(out, token{op, s[i : i+n], i})
			i += n
		}
	}
	return out, nil
}

// operatorLen is the length of the operator s starts with, or 0.
func operatorLen(s string) int {
	for _, o := range []string{"==", "!=", "=~", "!~", ">=", "<=", "=", ">", "<", "+", "-", "*", "/", "%", "^", ":", "@"} {
		if len(s) >= len(o) && s[:len(o)] == o {
			return len(o)
		}
	}
	return 0
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
