package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/pgshard/pgshard/store"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, id := range []string{"a", "0123456789abcdef0123456789abcdef", "é-ü/+=?", strings.Repeat("x", store.MaxIDLength), strings.Repeat("x", 8192)} {
		c := store.EncodeCursor(id)
		if strings.ContainsAny(c, "+/=") {
			t.Errorf("cursor %q is not URL-safe", c)
		}
		got, err := store.DecodeCursor(c)
		if err != nil || got != id {
			t.Errorf("DecodeCursor(EncodeCursor(%q)) = %q, %v", id, got, err)
		}
	}
	if got, err := store.DecodeCursor(""); got != "" || err != nil {
		t.Errorf("empty cursor: %q, %v", got, err)
	}
}

func TestDecodeCursorRejects(t *testing.T) {
	tests := []struct{ name, cursor, want string }{
		{"not base64", "!!!", "illegal base64"},
		{"padded", b64("1abc") + "==", "illegal base64"},
		{"version only", b64("1"), "no execution id"},
		{"unknown version", b64("2abc"), "unknown version"},
		{"NUL in id", b64("1a\x00b"), "not valid text"},
		{"invalid UTF-8", b64("1a\xffb"), "not valid text"},
		{"too long", store.EncodeCursor(strings.Repeat("x", 8193)), "too long"},
		{"carriage return", "M\rX0", "canonical"},
		{"line feed", store.EncodeCursor("abc")[:2] + "\n" + store.EncodeCursor("abc")[2:], "canonical"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := store.DecodeCursor(tt.cursor)
			if !errors.Is(err, store.ErrBadCursor) {
				t.Fatalf("error %v does not match ErrBadCursor", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// FuzzDecodeCursor: the cursor comes from clients. Decoding never panics,
// and whatever decodes is a valid id that encodes back to the same cursor.
func FuzzDecodeCursor(f *testing.F) {
	f.Add("")
	f.Add(store.EncodeCursor("0123456789abcdef0123456789abcdef"))
	f.Add("MQ")
	f.Add("!!")
	f.Add(b64("1a\x00"))
	f.Fuzz(func(t *testing.T, cursor string) {
		id, err := store.DecodeCursor(cursor)
		if err != nil {
			if !errors.Is(err, store.ErrBadCursor) {
				t.Fatalf("error %v does not match ErrBadCursor", err)
			}
			return
		}
		if cursor == "" {
			if id != "" {
				t.Fatalf("empty cursor decoded to %q", id)
			}
			return
		}
		if id == "" || strings.IndexByte(id, 0) >= 0 {
			t.Fatalf("decoded an invalid id %q", id)
		}
		if got := store.EncodeCursor(id); got != cursor {
			t.Fatalf("cursor %q decodes to %q, which encodes to %q", cursor, id, got)
		}
	})
}
