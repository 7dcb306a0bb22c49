package report

import (
	"regexp"
	"strings"
)

// formulaStarts are the first characters that make a spreadsheet (Excel,
// LibreOffice Calc, Google Sheets) read a CSV cell as a formula, or turn it
// into one: = + - @, and a tab or carriage return before them.
const formulaStarts = "=+-@\t\r"

// plainNumber is a cell a spreadsheet reads as a number, not a formula: a
// negative amount in a discrepancy's expected or provider column.
var plainNumber = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// SafeCell returns a text cell of a CSV meant for people as a spreadsheet
// will show it: as text. A cell that starts with one of = + - @, a tab or a
// carriage return (CSV injection: "=HYPERLINK(...)" in a transaction id or
// an operator's note would run when the file is opened) gets a leading
// single quote, as OWASP recommends, unless it is a plain number. Ids,
// accounts, reasons, details and actors go through it; numeric columns are
// written as numbers and never do. Machine-read CSVs (a table source piped
// into enqueue) keep their values exact and do not use it.
func SafeCell(s string) string {
	if s == "" || !strings.ContainsRune(formulaStarts, rune(s[0])) || plainNumber.MatchString(s) {
		return s
	}
	return "'" + s
}
