package store

import "encoding/json"

// Decoding a stored execution is on every load's path, so the usual
// document — only the fields Execution names, written by MarshalJSON —
// is decoded in one json.Unmarshal into executionDoc, after which a scan
// of the document's top-level keys (no allocation) confirms that nothing
// was left for Extra. Anything else — an unknown or differently cased key,
// an escaped key, a document that is not an object or does not fit
// executionDoc — takes the general path of UnmarshalJSON, which also
// produces every error, so both paths give the same Execution and the
// same error for any input.

// decodeKnown decodes b when its top-level keys are exactly among
// knownFields; ok is false when the general path must decode it.
func decodeKnown(b []byte) (e Execution, ok bool) {
	var d executionDoc
	if json.Unmarshal(b, &d) != nil || !onlyKnownKeys(b) {
		return Execution{}, false
	}
	e.setDoc(&d)
	return e, true
}

// setDoc sets e's fields from the decoded known fields (Extra untouched).
func (e *Execution) setDoc(d *executionDoc) {
	*e = Execution{
		ID: d.ID, DefinitionID: d.DefinitionID, Version: d.Version, Status: d.Status,
		ActivePath: d.ActivePath,
	}
	if d.ParentID != nil {
		e.ParentID = *d.ParentID
	}
	if !isNull(d.Outcome) {
		e.Outcome = d.Outcome
	}
	if !isNull(d.Context) {
		e.Context = d.Context
	}
}

// onlyKnownKeys reports whether b, valid JSON, is an object whose
// top-level keys are all spelled exactly as in knownFields, without
// escapes. It answers false rather than look closer.
func onlyKnownKeys(b []byte) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i++
	for {
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(b, i+1)
		}
		if i >= len(b) || b[i] != '"' {
			return false
		}
		j := i + 1
		for j < len(b) && b[j] != '"' && b[j] != '\\' {
			j++
		}
		if j >= len(b) || b[j] != '"' || !knownKey(b[i+1:j]) {
			return false
		}
		i = skipSpace(b, j+1)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i = skipValue(b, skipSpace(b, i+1)); i < 0 {
			return false
		}
	}
}

// knownKey reports whether k names one of executionDoc's fields exactly.
func knownKey(k []byte) bool {
	switch string(k) {
	case "id", "definition_id", "version", "status", "outcome", "active_path", "parent_id", "context":
		return true
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the JSON value starting at b[i]
// (b is valid JSON), or -1.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return -1
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i // the enclosing object's end
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
		if depth == 0 && i < len(b) && isValueEnd(b[i]) {
			return i
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}

func isValueEnd(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}
