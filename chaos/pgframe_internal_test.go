package chaos

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

type encoder interface{ Encode([]byte) ([]byte, error) }

func encode(t testing.TB, msgs ...encoder) []byte {
	t.Helper()
	var b []byte
	for _, m := range msgs {
		var err error
		if b, err = m.Encode(b); err != nil {
			t.Fatalf("encode %T: %v", m, err)
		}
	}
	return b
}

// frameAll feeds b to f in chunks of size step (0: all at once) and
// returns the frames (heads copied) and the first error.
func frameAll(f *framer, b []byte, step int) ([]frame, error) {
	var out []frame
	for len(b) > 0 {
		chunk := b
		if step > 0 && len(chunk) > step {
			chunk = chunk[:step]
		}
		for len(chunk) > 0 {
			n, fr, ok, err := f.next(chunk)
			if err != nil {
				return out, err
			}
			if n == 0 {
				return out, fmt.Errorf("no progress on %d bytes", len(chunk))
			}
			if ok {
				fr.Head = slices.Clone(fr.Head)
				out = append(out, fr)
			}
			chunk = chunk[n:]
			b = b[n:]
		}
	}
	return out, nil
}

const commitQuery = `SELECT committed, found_version FROM pgshard_commit_cas($1::text, $2::text, $3::text, $4::int, $5::text)`

func TestFramerFrontend(t *testing.T) {
	stream := encode(t,
		&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "postgres", "database": "x"}},
		&pgproto3.Parse{Query: "SELECT set_config('statement_timeout', $1, true)"},
		&pgproto3.Bind{Parameters: [][]byte{[]byte("5000ms")}},
		&pgproto3.Describe{ObjectType: 'P'},
		&pgproto3.Execute{},
		&pgproto3.Parse{Name: "s1", Query: commitQuery},
		&pgproto3.Bind{PreparedStatement: "s1"},
		&pgproto3.Execute{},
		&pgproto3.Sync{},
		&pgproto3.Query{String: "select * from PGSHARD_COMMIT ('a')"},
		&pgproto3.Terminate{},
	)
	wantTypes := []byte{0, 'P', 'B', 'D', 'E', 'P', 'B', 'E', 'S', 'Q', 'X'}
	wantCommit := []bool{false, false, false, false, false, true, false, false, false, true, false}
	for _, step := range []int{0, 1, 2, 3, 5, 7, 64} {
		t.Run(fmt.Sprintf("step%d", step), func(t *testing.T) {
			frames, err := frameAll(newFramer(frontendSide), stream, step)
			if err != nil {
				t.Fatal(err)
			}
			var types []byte
			total := 0
			for i, fr := range frames {
				types = append(types, fr.Type)
				total += fr.Len
				if i < len(wantCommit) && isCommit(fr) != wantCommit[i] {
					t.Errorf("frame %d (%q): isCommit = %v, want %v (head %q)", i, fr.Type, !wantCommit[i], wantCommit[i], fr.Head)
				}
			}
			if !bytes.Equal(types, wantTypes) {
				t.Fatalf("types %q, want %q", types, wantTypes)
			}
			if total != len(stream) {
				t.Fatalf("frame lengths add up to %d, the stream has %d bytes", total, len(stream))
			}
			if frames[0].Code != protocolV3 {
				t.Errorf("startup code %d", frames[0].Code)
			}
		})
	}
}

func TestFramerBackend(t *testing.T) {
	stream := encode(t,
		&pgproto3.AuthenticationOk{},
		&pgproto3.ParameterStatus{Name: "server_version", Value: "15"},
		&pgproto3.BackendKeyData{ProcessID: 7, SecretKey: []byte{0, 0, 0, 9}},
		&pgproto3.ReadyForQuery{TxStatus: 'I'},
		&pgproto3.ParseComplete{},
		&pgproto3.BindComplete{},
		&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("committed")}, {Name: []byte("found_version")}}},
		&pgproto3.DataRow{Values: [][]byte{[]byte("t"), []byte("3")}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
		&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"},
		&pgproto3.ReadyForQuery{TxStatus: 'I'},
	)
	frames, err := frameAll(newFramer(backendSide), stream, 3)
	if err != nil {
		t.Fatal(err)
	}
	var types []byte
	for _, fr := range frames {
		types = append(types, fr.Type)
		switch fr.Type {
		case 'D':
			if v, ok := firstBool(fr.Head); !ok || !v {
				t.Errorf("DataRow head %q: firstBool = %v, %v", fr.Head, v, ok)
			}
		case 'E':
			if c := errorCode(fr.Head); c != "57P01" {
				t.Errorf("ErrorResponse code %q", c)
			}
		}
	}
	if want := []byte("RSKZ12TDCEZ"); !bytes.Equal(types, want) {
		t.Fatalf("types %q, want %q", types, want)
	}
}

// An SSLRequest refused with 'N': the client then sends its StartupMessage,
// the server a one-byte answer before its typed messages.
func TestFramerSSLRefused(t *testing.T) {
	fe := newFramer(frontendSide)
	frames, err := frameAll(fe, encode(t, &pgproto3.SSLRequest{},
		&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}},
		&pgproto3.Query{String: "select 1"}), 4)
	if err != nil || len(frames) != 3 || frames[0].Code != codeSSLRequest || frames[1].Code != protocolV3 || frames[2].Type != 'Q' {
		t.Fatalf("frontend: %v %+v", err, frames)
	}
	be := newFramer(backendSide)
	be.oneByte = 1
	frames, err = frameAll(be, append([]byte("N"), encode(t, &pgproto3.AuthenticationOk{})...), 0)
	if err != nil || len(frames) != 2 || frames[0].Code != 'N' || frames[0].Len != 1 || frames[1].Type != 'R' {
		t.Fatalf("backend: %v %+v", err, frames)
	}
}

func TestFramerRejectsGarbage(t *testing.T) {
	tests := []struct {
		name  string
		side  side
		input []byte
	}{
		{"frontend unknown type", frontendSide, append(encode(t, &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber}), 'z', 0, 0, 0, 4)},
		{"frontend length below 4", frontendSide, append(encode(t, &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber}), 'Q', 0, 0, 0, 3)},
		{"startup too long", frontendSide, []byte{0, 0, 0x30, 0, 0, 3, 0, 0}},
		{"startup too short", frontendSide, []byte{0, 0, 0, 7, 0, 3, 0, 0}},
		{"startup unknown code", frontendSide, []byte{0, 0, 0, 8, 0, 2, 0, 0}},
		{"backend unknown type", backendSide, []byte{'x', 0, 0, 0, 4}},
		{"backend huge length", backendSide, []byte{'D', 0x40, 0, 0, 0}},
		{"bad one-byte answer", backendSide, []byte{'Q'}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFramer(tc.side)
			if tc.name == "bad one-byte answer" {
				f.oneByte = 1
			}
			_, err := frameAll(f, tc.input, 0)
			if !errors.Is(err, errFrame) {
				t.Fatalf("err = %v, want errFrame", err)
			}
			if _, _, _, err2 := f.next([]byte{'Q', 0, 0, 0, 4}); !errors.Is(err2, errFrame) {
				t.Fatalf("after failing, next = %v, want the error again", err2)
			}
		})
	}
}

func TestIsCommit(t *testing.T) {
	tests := []struct {
		sql  string
		want bool
	}{
		{commitQuery, true},
		{`SELECT committed, found_version FROM pgshard_commit($1::text, $2::text)`, true},
		{`select harel_commit_cas($1, $2, $3, $4, $5)`, true},
		{"SELECT * FROM PgShard_Commit\n\t(1)", true},
		{`SELECT pgshard_commit_count(1)`, false},
		{`SELECT my_pgshard_commit(1)`, false},
		{`SELECT 'pgshard_commit'`, false},
		{`SELECT pgshard_commit`, false},
		{`SELECT 1`, false},
		{``, false},
	}
	for _, tc := range tests {
		q := frame{Type: 'Q', Head: []byte(tc.sql + "\x00")}
		p := frame{Type: 'P', Head: []byte("stmt\x00" + tc.sql + "\x00\x00\x00")}
		if got := isCommit(q); got != tc.want {
			t.Errorf("Query %q: %v, want %v", tc.sql, got, tc.want)
		}
		if got := isCommit(p); got != tc.want {
			t.Errorf("Parse %q: %v, want %v", tc.sql, got, tc.want)
		}
	}
	if isCommit(frame{Type: 'B', Head: []byte(commitQuery)}) {
		t.Error("a Bind is never a commit")
	}
}

// FuzzFrame: on any bytes, either side's framer never panics, always makes
// progress, keeps its captures bounded, and frames the same whether the
// bytes come at once or one by one.
func FuzzFrame(f *testing.F) {
	f.Add(encode(f, &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}},
		&pgproto3.Parse{Query: commitQuery}, &pgproto3.Sync{}), false)
	f.Add(encode(f, &pgproto3.AuthenticationOk{}, &pgproto3.DataRow{Values: [][]byte{[]byte("t")}},
		&pgproto3.ErrorResponse{Severity: "ERROR", Code: "40001"}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), true)
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47}, false)
	f.Add([]byte{'D', 0xff, 0xff, 0xff, 0xff}, true)
	f.Fuzz(func(t *testing.T, data []byte, backend bool) {
		s := frontendSide
		if backend {
			s = backendSide
		}
		whole, errWhole := frameAll(newFramer(s), data, 0)
		byOne, errOne := frameAll(newFramer(s), data, 1)
		if (errWhole == nil) != (errOne == nil) {
			t.Fatalf("error at once %v, byte by byte %v", errWhole, errOne)
		}
		if len(whole) != len(byOne) {
			t.Fatalf("%d frames at once, %d byte by byte", len(whole), len(byOne))
		}
		for i := range whole {
			a, b := whole[i], byOne[i]
			if a.Type != b.Type || a.Code != b.Code || a.Len != b.Len || !bytes.Equal(a.Head, b.Head) {
				t.Fatalf("frame %d: %+v at once, %+v byte by byte", i, a, b)
			}
			if len(a.Head) > frontendCapture || a.Len < 1 {
				t.Fatalf("frame %d: head %d bytes, len %d", i, len(a.Head), a.Len)
			}
			_ = isCommit(a)
			_ = errorCode(a.Head)
			_, _ = firstBool(a.Head)
		}
	})
}

// FuzzRelayScan: the relay's per-connection scanning never panics on any
// bytes from either side, forwards a prefix of what it read, and holds
// back only while a reply is being dropped.
func FuzzRelayScan(f *testing.F) {
	login := encode(f, &pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{"user": "u"}})
	f.Add(append(login, encode(f, &pgproto3.Query{String: "select pgshard_commit(1)"})...),
		encode(f, &pgproto3.AuthenticationOk{}, &pgproto3.ReadyForQuery{TxStatus: 'I'}, &pgproto3.DataRow{Values: [][]byte{[]byte("t")}}, &pgproto3.ReadyForQuery{TxStatus: 'I'}), uint8(3))
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47}, []byte("N\x00\x00"), uint8(1))
	f.Fuzz(func(t *testing.T, up, down []byte, split uint8) {
		r := &Relay{conns: map[*relayConn]struct{}{}, changed: make(chan struct{}), dropCh: make(chan struct{})}
		r.DropCommitReplies(2)
		c := &relayConn{r: r, done: make(chan struct{}), fe: newFramer(frontendSide), be: newFramer(backendSide)}
		c.upFraming.Store(true)
		c.downFraming.Store(true)
		step := int(split)%7 + 1
		for len(up) > 0 {
			n := min(step, len(up))
			if c.upFraming.Load() {
				c.scanUp(up[:n])
			}
			up = up[n:]
		}
		for len(down) > 0 {
			n := min(step, len(down))
			if !c.downFraming.Load() {
				break
			}
			fwd, act := c.scanDown(down[:n])
			if fwd < 0 || fwd > n {
				t.Fatalf("forward %d of %d bytes", fwd, n)
			}
			if fwd < n && act == actForward && !c.holding {
				t.Fatalf("held back %d bytes without holding a reply", n-fwd)
			}
			if act != actForward {
				break
			}
			down = down[n:]
		}
	})
}
