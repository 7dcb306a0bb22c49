package payments

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// unquoteJSON returns the text of a JSON string literal that encoding/json
// has already found well-formed, appending to scratch when escapes must be
// decoded. Unlike encoding/json, which silently turns a lone UTF-16
// surrogate escape such as \ud800 into U+FFFD, it reports one, so an id is
// either kept exactly or rejected.
func unquoteJSON(raw []byte, scratch []byte) (string, []byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", scratch, false
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		return string(body), scratch, true
	}
	b := scratch[:0]
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		if i+1 >= len(body) {
			return "", b, false
		}
		switch e := body[i+1]; e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := hex4(body[i+2:])
			if !ok {
				return "", b, false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				// A high surrogate must be followed by an escaped low one.
				if len(body) < i+6 || body[i] != '\\' || body[i+1] != 'u' {
					return "", b, false
				}
				r2, ok := hex4(body[i+2:])
				if !ok {
					return "", b, false
				}
				r = utf16.DecodeRune(r, r2)
				if r == utf8.RuneError {
					return "", b, false
				}
				i += 6
			}
			b = utf8.AppendRune(b, r)
			continue
		default:
			return "", b, false
		}
		i += 2
	}
	return string(b), b, true
}

// hex4 decodes the four hexadecimal digits at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
