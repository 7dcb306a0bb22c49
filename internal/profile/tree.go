package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// node is one JSON value of a profile file with the line it starts on, so
// that every error can name the line of the key or value at fault.
type node struct {
	kind    kind
	line    int
	text    string // a string's value or a number's text
	boolean bool
	members []member // objects, in file order
	elems   []node   // arrays
}

type member struct {
	key  string
	line int
	val  node
}

type kind int

const (
	kindNull kind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
)

func (k kind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "true or false"
	default:
		return "null"
	}
}

// maxDepth bounds the nesting of a profile file; real ones nest 3 deep.
const maxDepth = 32

// parseTree parses data, at most MaxFileSize bytes, into a tree. Errors
// carry the line of the fault.
func parseTree(file string, data []byte) (node, error) {
	return parseTreeLimit(file, data, MaxFileSize)
}

// parseTreeLimit is parseTree for a file of at most limit bytes.
func parseTreeLimit(file string, data []byte, limit int) (node, error) {
	if len(data) > limit {
		return node{}, &Error{File: file, Msg: fmt.Sprintf("larger than %d bytes", limit)}
	}
	t := &treeReader{file: file, data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	t.dec.UseNumber()
	tok, err := t.token()
	if err != nil {
		return node{}, err
	}
	n, err := t.value(tok, 0)
	if err != nil {
		return node{}, err
	}
	if _, err := t.dec.Token(); !errors.Is(err, io.EOF) {
		return node{}, &Error{File: file, Line: t.lineAt(t.dec.InputOffset()), Msg: "trailing data after the profile"}
	}
	return n, nil
}

type treeReader struct {
	file string
	data []byte
	dec  *json.Decoder
}

// lineAt returns the 1-based line of the byte before offset (the last byte
// of the token just read).
func (t *treeReader) lineAt(offset int64) int {
	end := min(max(offset-1, 0), int64(len(t.data)))
	return 1 + bytes.Count(t.data[:end], []byte{'\n'})
}

func (t *treeReader) token() (json.Token, error) {
	tok, err := t.dec.Token()
	if err == nil {
		return tok, nil
	}
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return nil, &Error{File: t.file, Line: t.lineAt(se.Offset), Msg: "not valid JSON: " + se.Error()}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, &Error{File: t.file, Line: t.lineAt(int64(len(t.data)) + 1), Msg: "not valid JSON: unexpected end of file"}
	default:
		return nil, &Error{File: t.file, Line: t.lineAt(t.dec.InputOffset()), Msg: "not valid JSON: " + err.Error()}
	}
}

func (t *treeReader) value(tok json.Token, depth int) (node, error) {
	line := t.lineAt(t.dec.InputOffset())
	if depth > maxDepth {
		return node{}, &Error{File: t.file, Line: line, Msg: fmt.Sprintf("nested deeper than %d levels", maxDepth)}
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			n := node{kind: kindObject, line: line}
			seen := map[string]int{}
			for t.dec.More() {
				kt, err := t.token()
				if err != nil {
					return node{}, err
				}
				key, _ := kt.(string) // the decoder only returns string keys
				kline := t.lineAt(t.dec.InputOffset())
				if prev, dup := seen[key]; dup {
					return node{}, &Error{File: t.file, Line: kline, Key: key, Msg: fmt.Sprintf("duplicate key (first on line %d)", prev)}
				}
				seen[key] = kline
				vt, err := t.token()
				if err != nil {
					return node{}, err
				}
				val, err := t.value(vt, depth+1)
				if err != nil {
					return node{}, err
				}
				n.members = append(n.members, member{key: key, line: kline, val: val})
			}
			if _, err := t.token(); err != nil { // '}'
				return node{}, err
			}
			return n, nil
		default: // '['
			n := node{kind: kindArray, line: line}
			for t.dec.More() {
				et, err := t.token()
				if err != nil {
					return node{}, err
				}
				e, err := t.value(et, depth+1)
				if err != nil {
					return node{}, err
				}
				n.elems = append(n.elems, e)
			}
			if _, err := t.token(); err != nil { // ']'
				return node{}, err
			}
			return n, nil
		}
	case string:
		return node{kind: kindString, line: line, text: v}, nil
	case json.Number:
		return node{kind: kindNumber, line: line, text: v.String()}, nil
	case bool:
		return node{kind: kindBool, line: line, boolean: v}, nil
	default:
		return node{kind: kindNull, line: line}, nil
	}
}
