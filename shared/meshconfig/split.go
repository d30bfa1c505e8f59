package meshconfig

import "bytes"

// document is one YAML document of a stream.
type document struct {
	index int    // 0-based position in the stream
	line  int    // 1-based line of the stream where data starts
	data  []byte // the document's text, its opening "---" blanked to spaces
}

// splitDocuments splits a YAML stream at document markers, line by line,
// so that a syntax error in one document cannot hide the others (a
// streaming parser stops at the first error).
//
// The counting follows YAML's: a document starts at a "---" line (text
// after "---" on the same line belongs to it) and ends at the next "---"
// or at a "..." line. Text before the first marker, or after a "...", is a
// document only when it holds more than blank lines, comments and
// directives. Explicit but empty documents keep their index; the caller
// skips them.
func splitDocuments(data []byte) []document {
	var (
		docs     []document
		cur      bytes.Buffer
		curLine  = 1
		explicit bool // cur was opened by "---"
		lineNo   int
	)
	flush := func() {
		if explicit || hasContent(cur.Bytes()) {
			docs = append(docs, document{index: len(docs), line: curLine, data: bytes.Clone(cur.Bytes())})
		}
		cur.Reset()
	}
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line = data[:i+1]
		}
		data = data[len(line):]
		lineNo++
		body := bytes.TrimRight(line, "\r\n")
		switch {
		case isMarker(body, "---"):
			flush()
			explicit = true
			curLine = lineNo
			// Keep the line, marker blanked, so that YAML's column and line
			// numbers stay those of the file.
			cur.WriteString("   ")
			cur.Write(line[3:])
		case isMarker(body, "..."):
			flush()
			explicit = false
		default:
			if cur.Len() == 0 && !explicit {
				curLine = lineNo
			}
			cur.Write(line)
		}
	}
	flush()
	return docs
}

// isMarker reports whether line is the marker alone or followed by blanks
// and more text, as YAML allows ("--- # comment", "--- {a: 1}").
func isMarker(line []byte, marker string) bool {
	if !bytes.HasPrefix(line, []byte(marker)) {
		return false
	}
	rest := line[len(marker):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

// hasContent reports whether text holds anything besides blank lines,
// comment lines and directives ("%YAML 1.1").
func hasContent(text []byte) bool {
	for line := range bytes.Lines(text) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && line[0] != '%' {
			return true
		}
	}
	return false
}
