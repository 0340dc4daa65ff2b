package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// ErrBadCursor is matched by the error for a malformed ListOptions.Cursor.
var ErrBadCursor = errors.New("malformed list cursor")

// cursorVersion prefixes every cursor, so the format can change later.
const cursorVersion = '1'

// maxCursorID bounds the id a cursor may carry: far above MaxIDLength, so
// that a listing also pages past the longer ids another program may have
// stored (a Postgres btree entry holds up to about 2700 bytes, more if the
// id compresses), and still a bound on what a client can make us decode.
const maxCursorID = 8192

// EncodeCursor returns the cursor that continues a listing after the
// execution id lastID. Cursors are opaque to callers; the router and the
// store share this encoding, so a cursor from either works with both.
func EncodeCursor(lastID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(cursorVersion) + lastID))
}

// DecodeCursor returns the id a cursor continues after ("" for the empty
// cursor). It rejects anything EncodeCursor cannot have produced for a
// valid id: bad base64, an unknown version, an empty or over-long id,
// invalid UTF-8 or a NUL byte (which Postgres text cannot hold), and any
// other spelling of a valid cursor (base64 decoding skips CR and LF), so
// one id has exactly one cursor.
func DecodeCursor(cursor string) (string, error) {
	if cursor == "" {
		return "", nil
	}
	if len(cursor) > base64.RawURLEncoding.EncodedLen(maxCursorID+1) {
		return "", fmt.Errorf("%w: too long (%d bytes)", ErrBadCursor, len(cursor))
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	if len(raw) < 2 {
		return "", fmt.Errorf("%w: no execution id", ErrBadCursor)
	}
	if raw[0] != cursorVersion {
		return "", fmt.Errorf("%w: unknown version %q", ErrBadCursor, raw[0])
	}
	id := string(raw[1:])
	if !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0 {
		return "", fmt.Errorf("%w: the execution id is not valid text", ErrBadCursor)
	}
	if EncodeCursor(id) != cursor {
		return "", fmt.Errorf("%w: not in canonical form (line breaks or other characters the encoding does not produce)", ErrBadCursor)
	}
	return id, nil
}

// listSQL pages executions by id in bytewise order (COLLATE "C", served by
// executions_id_c_idx), filtering on the JSON document, which is parsed
// once per row, and projecting the seed's summary fields from it (status,
// parent_id, active_path, outcome). Roots are parent_id IS NULL, as in the
// seed. Every non-empty id sorts after ”, the no-cursor value. Rows of
// buckets the shard's fence does not serve are left out (migration 0008),
// (newScan).
var listSQL = newScan(`e.id, e.definition_id, e.version, COALESCE(d.status, '') AS status,
    COALESCE(d.parent_id, '') AS parent_id, d.active_path, d.outcome`,
	`executions e
    CROSS JOIN LATERAL jsonb_to_record(e.data::jsonb) AS d(status text, parent_id text, active_path jsonb, outcome jsonb)`,
	`e.id COLLATE "C" > $1::text
      AND `+fenceServes("e.id")+`
      AND ($2::text = '' OR e.definition_id = $2::text)
      AND (cardinality($3::text[]) = 0 OR d.status = ANY($3::text[]))
      AND (NOT $4::bool OR d.parent_id IS NULL)`,
	`e.id COLLATE "C"`, `$5::bigint`)

// ListExecutions returns one page of executions matching o, ordered by id
// (bytewise). It reads Limit+1 rows to learn whether a next page exists.
func (s *Store) ListExecutions(ctx context.Context, o ListOptions) (Page, error) {
	page, _, err := s.listExecutions(ctx, o, false)
	return page, err
}

// ListExecutionsServed is ListExecutions with the served set its scan was
// filtered by, read in the scan's own snapshot (served.go).
func (s *Store) ListExecutionsServed(ctx context.Context, o ListOptions) (Page, Served, error) {
	return s.listExecutions(ctx, o, true)
}

func (s *Store) listExecutions(ctx context.Context, o ListOptions, served bool) (Page, Served, error) {
	after, err := DecodeCursor(o.Cursor)
	if err != nil {
		return Page{}, Served{}, fmt.Errorf("list executions: %w", err)
	}
	limit := o.PageLimit()
	statuses := o.Statuses
	if statuses == nil {
		statuses = []string{}
	}
	var page Page
	var id, def, status, parent *string
	var version *int
	var path, outcome []byte
	sv, err := s.scan(ctx, listSQL, served, []any{after, o.DefinitionID, statuses, o.RootsOnly, int64(limit + 1)},
		[]any{&id, &def, &version, &status, &parent, &path, &outcome},
		func() error {
			if id == nil || def == nil || version == nil || status == nil || parent == nil {
				return fmt.Errorf("an execution row with a NULL column")
			}
			sm := Summary{ID: *id, DefinitionID: *def, Version: *version, Status: *status, ParentID: *parent}
			if path != nil && string(path) != "null" {
				if err := json.Unmarshal(path, &sm.ActivePath); err != nil {
					return fmt.Errorf("execution %s: active_path: %w", sm.ID, err)
				}
			}
			if outcome != nil && string(outcome) != "null" {
				// jsonb prints {"n": 1}; give back the compact form the
				// JSON document holds.
				var buf bytes.Buffer
				if err := json.Compact(&buf, outcome); err != nil {
					return fmt.Errorf("execution %s: outcome: %w", sm.ID, err)
				}
				sm.Outcome = buf.Bytes()
			}
			page.Items = append(page.Items, sm)
			return nil
		})
	if err != nil {
		return Page{}, Served{}, fmt.Errorf("list executions: %w", err)
	}
	if len(page.Items) > limit {
		page.Items = page.Items[:limit]
		last := page.Items[limit-1].ID
		if len(last) > maxCursorID {
			return Page{}, Served{}, fmt.Errorf("list executions: execution id %.40q… is %d bytes, longer than a cursor can carry (%d)", last, len(last), maxCursorID)
		}
		page.NextCursor = EncodeCursor(last)
	}
	return page, sv, nil
}
