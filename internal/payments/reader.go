package payments

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Options configure a Reader.
type Options struct {
	// Format is the file's syntax. Defaults to FormatAuto: by extension, and
	// for standard input or an unknown extension by the first byte.
	Format Format
	// BusinessDate is the day every payment must have occurred on, in
	// Location. Required unless AllowOutsideDate is set.
	BusinessDate Date
	// Location is the time zone of BusinessDate. Defaults to UTC.
	Location *time.Location
	// AllowOutsideDate accepts payments that occurred outside BusinessDate
	// (late exports, corrections). Defaults to false.
	AllowOutsideDate bool
	// MaxProblems is how many problems are kept with their details; more are
	// only counted. Defaults to 20.
	MaxProblems int
	// MaxRecordBytes bounds one row (one CSV record or one JSON line), so a
	// hostile or broken file cannot make the Reader buffer without limit. A
	// longer row is a problem. Defaults to 1 MiB.
	MaxRecordBytes int
	// Providers, when not nil, lists the provider names a payment's
	// provider field may hold (the providers file's); another name is a
	// problem on its line. Defaults to nil: any well-formed name.
	Providers []string
	// ProvidersSource names where Providers came from, for the problem
	// ("not in the providers file providers.json"). Defaults to "the
	// providers file".
	ProvidersSource string
}

// Reader streams the payments of one file. It is not safe for concurrent use.
type Reader struct {
	name       string
	opts       Options
	start, end time.Time
	sum        hash.Hash
	br         *bufio.Reader
	format     Format
	started    bool
	done       bool
	err        error // sticky read error
	rows       int   // data rows seen, valid or not
	seen       *idSet
	problems   ProblemList
	f          row

	// CSV
	csv      *csv.Reader
	limit    *recordLimiter
	cols     [numFields]int   // column of each field
	optCols  [numOptional]int // column of each optional field, -1 if none
	nextLine int              // line the next CSV record starts on, at the earliest

	// JSON Lines
	line    int
	eof     bool
	lineBuf []byte
	scratch []byte
	raw     rawRow
}

// rawRow receives one JSON line. Each field keeps its buffer between lines;
// an empty field after decoding means the key was absent.
type rawRow struct {
	TransactionID json.RawMessage `json:"transaction_id"`
	AccountID     json.RawMessage `json:"account_id"`
	AmountMinor   json.RawMessage `json:"amount_minor"`
	Currency      json.RawMessage `json:"currency"`
	Status        json.RawMessage `json:"status"`
	OccurredAt    json.RawMessage `json:"occurred_at"`
	Provider      json.RawMessage `json:"provider"`
	Kind          json.RawMessage `json:"kind"`
}

// errRecordTooLong is returned by recordLimiter past its limit.
var errRecordTooLong = errors.New("record too long")

// NewReader returns a Reader of the payments in src. name is used in
// problems and errors (a file path, or "-" for standard input) and, with
// FormatAuto, to pick the format. NewReader reads nothing; it fails only on
// invalid options.
func NewReader(src io.Reader, name string, opts Options) (*Reader, error) {
	if opts.Location == nil {
		opts.Location = time.UTC
	}
	if opts.MaxProblems <= 0 {
		opts.MaxProblems = 20
	}
	if opts.MaxRecordBytes <= 0 {
		opts.MaxRecordBytes = 1 << 20
	}
	switch opts.Format {
	case FormatAuto, FormatCSV, FormatJSONL:
	default:
		return nil, fmt.Errorf("open payments %s: unknown format %q: want csv or jsonl", name, opts.Format)
	}
	if opts.BusinessDate.IsZero() && !opts.AllowOutsideDate {
		return nil, fmt.Errorf("open payments %s: no business date given", name)
	}
	r := &Reader{name: name, opts: opts, sum: sha256.New(), seen: newIDSet()}
	r.start, r.end = opts.BusinessDate.Start(opts.Location), opts.BusinessDate.End(opts.Location)
	r.br = bufio.NewReaderSize(io.TeeReader(src, r.sum), 64<<10)
	r.format = opts.Format
	if r.format == FormatAuto {
		r.format = FormatFor(name)
	}
	return r, nil
}

// Next returns the next valid payment, in file order. Rows with problems are
// skipped and their problems collected (see Problems); they do not stop the
// reading. At the end of the input Next returns io.EOF; then the caller must
// check Problems before it uses what it read. Any other error is a failure
// to read the input (not a problem with its content) and is returned again
// by every later call.
//
// A transaction id seen earlier in the file is a problem on the later line
// and the row is skipped. Ids are compared by a 96-bit fingerprint, so the
// set of ids seen stays small (see the package documentation); a duplicate
// is never missed, and a false one is vanishingly unlikely (about 6e-18 for
// a file of a million ids).
func (r *Reader) Next() (Payment, error) {
	if r.err != nil {
		return Payment{}, r.err
	}
	if !r.started {
		r.started = true
		if err := r.begin(); err != nil {
			r.err = fmt.Errorf("read payments %s: %w", r.name, err)
			return Payment{}, r.err
		}
	}
	for !r.done {
		var (
			p   Payment
			ok  bool
			err error
		)
		if r.format == FormatCSV {
			p, ok, err = r.nextCSV()
		} else {
			p, ok, err = r.nextJSONL()
		}
		if err != nil {
			r.err = fmt.Errorf("read payments %s: %w", r.name, err)
			return Payment{}, r.err
		}
		if ok {
			return p, nil
		}
	}
	return Payment{}, io.EOF
}

// Problems returns the problems found so far; complete once Next has
// returned io.EOF.
func (r *Reader) Problems() ProblemList { return r.problems }

// SHA256 returns the hexadecimal SHA-256 digest of the bytes read so far:
// once Next has returned io.EOF without problems, the digest of the whole
// input.
func (r *Reader) SHA256() string { return hex.EncodeToString(r.sum.Sum(nil)) }

// Format returns the format being read; for FormatAuto it is known after the
// first call to Next.
func (r *Reader) Format() Format { return r.format }

func (r *Reader) problem(line int, field, value, msg string) {
	r.problems.Total++
	if len(r.problems.Items) < r.opts.MaxProblems {
		r.problems.Items = append(r.problems.Items, Problem{File: r.name, Line: line, Field: field, Value: value, Msg: msg})
	}
}

// begin settles the format and, for CSV, reads the header.
func (r *Reader) begin() error {
	if r.format == FormatAuto {
		buf, err := r.br.Peek(4096)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
		buf = bytes.TrimLeft(bytes.TrimPrefix(buf, []byte("\ufeff")), " \t\r\n")
		r.format = FormatCSV
		if len(buf) > 0 && buf[0] == '{' {
			r.format = FormatJSONL
		}
	}
	if r.format == FormatCSV {
		return r.beginCSV()
	}
	return nil
}

func (r *Reader) beginCSV() error {
	r.limit = &recordLimiter{r: r.br, max: r.opts.MaxRecordBytes}
	r.csv = csv.NewReader(r.limit)
	r.csv.ReuseRecord = true
	header, err := r.csv.Read()
	if err != nil {
		return r.csvError(err, header)
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	r.noteEnd(header)
	for i := range r.cols {
		r.cols[i] = -1
	}
	for i := range r.optCols {
		r.optCols[i] = -1
	}
	for col, name := range header {
		name = strings.ToLower(strings.TrimSpace(name))
		if i := slices.Index(optionalNames[:], name); i >= 0 {
			if r.optCols[i] >= 0 {
				r.problem(1, "", "", fmt.Sprintf("column %s appears twice (columns %d and %d)", name, r.optCols[i]+1, col+1))
			}
			r.optCols[i] = col
			continue
		}
		for i, want := range fieldNames {
			if name != want {
				continue
			}
			if r.cols[i] >= 0 {
				r.problem(1, "", "", fmt.Sprintf("column %s appears twice (columns %d and %d)", want, r.cols[i]+1, col+1))
			}
			r.cols[i] = col
		}
	}
	var missing []string
	for i, col := range r.cols {
		if col < 0 {
			missing = append(missing, fieldNames[i])
		}
	}
	if len(missing) > 0 {
		r.problem(1, "", "", "missing required columns: "+strings.Join(missing, ", "))
	}
	if !r.problems.Empty() {
		r.done = true
	}
	return nil
}

// noteEnd records where the record after rec starts, for problems about a
// record too long to be returned.
func (r *Reader) noteEnd(rec []string) {
	if len(rec) == 0 {
		return
	}
	line, _ := r.csv.FieldPos(len(rec) - 1)
	r.nextLine = line + strings.Count(rec[len(rec)-1], "\n") + 1
}

// csvError turns what the CSV reader returned into problems, or returns the
// error when it is a failure to read. rec is the record returned with err.
func (r *Reader) csvError(err error, rec []string) error {
	var pe *csv.ParseError
	switch {
	case errors.Is(err, io.EOF):
		r.done = true
		if r.rows == 0 && r.problems.Empty() {
			if r.nextLine == 0 {
				r.problem(1, "", "", "empty file: no header row and no payments")
			} else {
				r.problem(1, "", "", "no payments: the file has a header row only")
			}
		}
		return nil
	case errors.Is(err, errRecordTooLong):
		// The CSV reader cannot resynchronise inside a record: stop here.
		r.done = true
		r.rows++
		r.problem(max(r.nextLine, 1), "", "", fmt.Sprintf("record longer than %d bytes", r.opts.MaxRecordBytes))
		return nil
	case errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount):
		r.rows++
		r.noteEnd(rec)
		r.problem(pe.StartLine, "", "", fmt.Sprintf("has %d fields, the header has %d", len(rec), r.csv.FieldsPerRecord))
		return nil
	case errors.As(err, &pe):
		r.rows++
		r.nextLine = pe.Line + 1
		r.problem(pe.Line, "", "", fmt.Sprintf("malformed CSV: %v (at byte %d of the line)", pe.Err, pe.Column))
		return nil
	default:
		return err
	}
}

func (r *Reader) nextCSV() (Payment, bool, error) {
	r.limit.n = 0
	rec, err := r.csv.Read()
	if err != nil {
		return Payment{}, false, r.csvError(err, rec)
	}
	r.rows++
	line, _ := r.csv.FieldPos(0)
	r.noteEnd(rec)
	r.f = row{}
	for i, col := range r.cols {
		r.f.vals[i] = rec[col]
	}
	for i, col := range r.optCols {
		if col >= 0 {
			r.f.opt[i] = rec[col]
		}
	}
	p, ok := r.accept(line, &r.f)
	return p, ok, nil
}

// accept checks a row and looks its transaction id up among those seen.
func (r *Reader) accept(line int, f *row) (Payment, bool) {
	p, validID, ok := r.check(line, f)
	if validID {
		if first, dup := r.seen.add(p.TransactionID, line); dup {
			ok = false
			r.problem(line, FieldTransactionID, quoteValue(p.TransactionID), fmt.Sprintf("duplicate: first seen on line %d", first))
		}
	}
	return p, ok
}

func (r *Reader) nextJSONL() (Payment, bool, error) {
	if r.eof {
		r.done = true
		if r.rows == 0 && r.problems.Empty() {
			if r.line == 0 {
				r.problem(1, "", "", "empty file: no payments")
			} else {
				r.problem(1, "", "", "no payments: the file has blank lines only")
			}
		}
		return Payment{}, false, nil
	}
	line, tooLong, err := r.readLine()
	if errors.Is(err, io.EOF) {
		r.eof = true
		if len(line) == 0 && !tooLong {
			return Payment{}, false, nil
		}
	} else if err != nil {
		return Payment{}, false, err
	}
	r.line++
	if tooLong {
		r.rows++
		r.problem(r.line, "", "", fmt.Sprintf("line longer than %d bytes", r.opts.MaxRecordBytes))
		return Payment{}, false, nil
	}
	if r.line == 1 {
		line = bytes.TrimPrefix(line, []byte("\ufeff"))
	}
	line = bytes.Trim(line, " \t\r\n")
	if len(line) == 0 {
		return Payment{}, false, nil
	}
	r.rows++
	if !utf8.Valid(line) {
		r.problem(r.line, "", "", "not valid UTF-8")
		return Payment{}, false, nil
	}
	if line[0] != '{' {
		r.problem(r.line, "", "", "not a JSON object")
		return Payment{}, false, nil
	}
	raw := &r.raw
	fields := [numFields]*json.RawMessage{&raw.TransactionID, &raw.AccountID, &raw.AmountMinor, &raw.Currency, &raw.Status, &raw.OccurredAt}
	for _, f := range fields {
		*f = (*f)[:0]
	}
	optional := [numOptional]*json.RawMessage{&raw.Provider, &raw.Kind}
	for _, f := range optional {
		*f = (*f)[:0]
	}
	if err := json.Unmarshal(line, raw); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			r.problem(r.line, "", "", fmt.Sprintf("malformed JSON at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: ")))
		} else {
			r.problem(r.line, "", "", "malformed JSON: "+strings.TrimPrefix(err.Error(), "json: "))
		}
		return Payment{}, false, nil
	}
	r.f = row{}
	for i, f := range fields {
		v := *f
		if len(v) == 0 || string(v) == "null" {
			r.f.missing |= 1 << i
			continue
		}
		if i == idxAmount && v[0] != '"' {
			r.f.vals[i] = string(v) // a number or another literal; ParseAmount judges
			continue
		}
		s, scratch, ok := unquoteJSON(v, r.scratch)
		r.scratch = scratch
		if !ok {
			r.f.reported |= 1 << i
			if v[0] == '"' {
				r.problem(r.line, fieldNames[i], quoteValue(string(v[1:len(v)-1])), "contains an invalid escape (a lone UTF-16 surrogate)")
			} else {
				r.problem(r.line, fieldNames[i], quoteValue(string(v)), "not a JSON string")
			}
			continue
		}
		r.f.vals[i] = s
	}
	for i, f := range optional {
		v := *f
		if len(v) == 0 || string(v) == "null" {
			continue
		}
		s, scratch, ok := unquoteJSON(v, r.scratch)
		r.scratch = scratch
		if !ok {
			r.f.optReported = true
			r.problem(r.line, optionalNames[i], quoteValue(string(v)), "not a JSON string")
		} else {
			r.f.opt[i] = s
		}
	}
	p, ok := r.accept(r.line, &r.f)
	return p, ok, nil
}

// readLine returns the next line without its line feed. A line longer than
// MaxRecordBytes is consumed and reported by tooLong, without its bytes.
// The returned bytes are valid until the next call.
func (r *Reader) readLine() (line []byte, tooLong bool, err error) {
	r.lineBuf = r.lineBuf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !tooLong && len(r.lineBuf)+len(chunk) > r.opts.MaxRecordBytes {
			tooLong = true
			r.lineBuf = r.lineBuf[:0]
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			if !tooLong {
				r.lineBuf = append(r.lineBuf, chunk...)
			}
			continue
		}
		if tooLong {
			return nil, true, err
		}
		if len(r.lineBuf) == 0 {
			return chunk, false, err
		}
		r.lineBuf = append(r.lineBuf, chunk...)
		return r.lineBuf, false, err
	}
}

// recordLimiter fails reads once more than max bytes were read since n was
// last reset to zero (at the start of each record). The CSV reader reads
// ahead by at most its buffer, so a record longer than max (plus that
// buffer) trips it, while ordinary records never do.
type recordLimiter struct {
	r      io.Reader
	n, max int
}

func (l *recordLimiter) Read(p []byte) (int, error) {
	if l.n > l.max {
		return 0, errRecordTooLong
	}
	n, err := l.r.Read(p)
	l.n += n
	return n, err
}
