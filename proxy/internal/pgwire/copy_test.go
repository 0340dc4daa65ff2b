package pgwire

import "testing"

// TestCopyBinaryHeader: a binary COPY file's header is recognised with its
// extension, and anything short or otherwise is not one; the trailer is
// exactly a field count of -1.
func TestCopyBinaryHeader(t *testing.T) {
	hdr := func(ext uint32, extra string) []byte {
		b := append([]byte(copySignature), 0, 0, 0, 0)
		b = AppendU32(b, ext)
		return append(b, extra...)
	}
	for _, c := range []struct {
		name string
		data []byte
		n    int
		ok   bool
	}{
		{"bare", hdr(0, ""), 19, true},
		{"with the first row", hdr(0, "\x00\x01\x00\x00\x00\x01a"), 19, true},
		{"with an extension", hdr(3, "xyz\xff\xff"), 22, true},
		{"an extension longer than the data", hdr(9, "xyz"), 0, false},
		{"short", hdr(0, "")[:18], 0, false},
		{"not a signature", append([]byte("PGCOPY\n\xff\r\n\x01"), make([]byte, 8)...), 0, false},
		{"text", []byte("1\tone\n"), 0, false},
		{"empty", nil, 0, false},
	} {
		n, ok := CopyBinaryHeaderLen(c.data)
		if n != c.n || ok != c.ok {
			t.Errorf("%s: got (%d, %v), want (%d, %v)", c.name, n, ok, c.n, c.ok)
		}
	}
	for _, c := range []struct {
		data string
		want bool
	}{{"\xff\xff", true}, {"\x00\x00", false}, {"\xff\xff\x00", false}, {"\xff", false}, {"", false}} {
		if got := IsCopyBinaryTrailer([]byte(c.data)); got != c.want {
			t.Errorf("IsCopyBinaryTrailer(%q) = %v", c.data, got)
		}
	}
	if got := AppendCopyData(nil, []byte("ab")); string(got) != "d\x00\x00\x00\x06ab" {
		t.Errorf("AppendCopyData: %q", got)
	}
}
