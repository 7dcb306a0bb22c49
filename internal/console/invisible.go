package console

import (
	"bytes"
	"fmt"
	"html/template"
	"unicode"
	"unicode/utf8"
)

// Ids, accounts, reasons and notes come from payment files, providers and
// people, and may hold formatting characters (Unicode category Cf) that
// are invisible or reorder what follows: a right-to-left override makes
// "tx_\u202Egnp.exe" read "tx_exe.png", a zero-width space makes two ids
// that look the same differ. The console shows each of them as its code
// point instead.

// invisibleNames are the short names of the formatting characters most
// often met; others are shown by code point alone.
var invisibleNames = map[rune]string{
	0x00AD: "SOFT HYPHEN", 0x061C: "ARABIC LETTER MARK",
	0x200B: "ZERO WIDTH SPACE", 0x200C: "ZERO WIDTH NON-JOINER", 0x200D: "ZERO WIDTH JOINER",
	0x200E: "LEFT-TO-RIGHT MARK", 0x200F: "RIGHT-TO-LEFT MARK",
	0x202A: "LEFT-TO-RIGHT EMBEDDING", 0x202B: "RIGHT-TO-LEFT EMBEDDING", 0x202C: "POP DIRECTIONAL FORMATTING",
	0x202D: "LEFT-TO-RIGHT OVERRIDE", 0x202E: "RIGHT-TO-LEFT OVERRIDE",
	0x2060: "WORD JOINER", 0x2066: "LEFT-TO-RIGHT ISOLATE", 0x2067: "RIGHT-TO-LEFT ISOLATE",
	0x2068: "FIRST STRONG ISOLATE", 0x2069: "POP DIRECTIONAL ISOLATE", 0xFEFF: "ZERO WIDTH NO-BREAK SPACE",
}

// invisible reports whether r is a formatting character.
func invisible(r rune) bool { return r >= 0xAD && unicode.Is(unicode.Cf, r) }

// showInvisible returns page with every formatting character replaced by
// its code point: in text as a marked-up <span class="cf">U+202E</span>
// whose title names it, inside a tag (an attribute value) as the plain
// text &lt;U+202E&gt;. page is html/template's output, which escapes < and >
// everywhere but in markup and has no inline script or style, so a < always
// opens a tag and a > closes it. page is returned as it is when it holds
// none, the common case.
func showInvisible(page []byte) []byte {
	i := bytes.IndexFunc(page, invisible)
	if i < 0 {
		return page
	}
	out := make([]byte, 0, len(page)+64)
	inTag := bytes.LastIndexByte(page[:i], '<') > bytes.LastIndexByte(page[:i], '>')
	out = append(out, page[:i]...)
	for rest := page[i:]; len(rest) > 0; {
		r, n := utf8.DecodeRune(rest)
		switch {
		case r == '<':
			inTag = true
		case r == '>':
			inTag = false
		}
		switch {
		case !invisible(r):
			out = append(out, rest[:n]...)
		case inTag:
			out = fmt.Appendf(out, "&lt;U+%04X&gt;", r)
		default:
			name := invisibleNames[r]
			if name == "" {
				name = "invisible formatting character"
			}
			out = fmt.Appendf(out, `<span class="cf" title="%s">U+%04X</span>`, template.HTMLEscapeString(name), r)
		}
		rest = rest[n:]
	}
	return out
}
