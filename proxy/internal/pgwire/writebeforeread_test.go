package pgwire

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestWriteBeforeRead: a queued write goes out with the next read, which
// then gets the peer's answer, round trip after round trip (the reads
// after a drained socket wait for the answer without a failed read
// first); a peer that closes ends the wait with an error instead of
// hanging; FlushPending writes a write no read made.
func TestWriteBeforeRead(t *testing.T) {
	server, client := tcpPair(t)
	r := newRawIO(client)
	if r == nil {
		t.Skip("no raw socket access")
	}
	_ = client.SetReadDeadline(time.Now().Add(20 * time.Second)) // a hang fails the test
	done := make(chan error, 1)
	go func() { // the peer: answers each 4-byte request with its reverse; owned: read below
		buf := make([]byte, 4)
		for range 50 {
			if _, err := io.ReadFull(server, buf); err != nil {
				done <- err
				return
			}
			if _, err := server.Write([]byte{buf[3], buf[2], buf[1], buf[0]}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]byte, 64)
	for i := range 50 {
		req := []byte{byte(i), 'a', 'b', 'c'}
		r.WriteBeforeRead(req)
		req[0] = 0xff // WriteBeforeRead copied it
		got := 0
		for got < 4 {
			n, err := r.Read(buf[got:])
			if err != nil {
				t.Fatalf("round trip %d: %v", i, err)
			}
			got += n
		}
		if want := []byte{'c', 'b', 'a', byte(i)}; !bytes.Equal(buf[:4], want) {
			t.Fatalf("round trip %d: got %q, want %q", i, buf[:4], want)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// FlushPending: the write without a read.
	r.WriteBeforeRead([]byte("wxyz"))
	if err := r.FlushPending(); err != nil {
		t.Fatal(err)
	}
	_ = server.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 4)
	if _, err := io.ReadFull(server, got); err != nil || string(got) != "wxyz" {
		t.Fatalf("FlushPending: %q, %v", got, err)
	}
	// The peer closes: the queued write's read fails, it does not wait
	// forever.
	server.Close()
	time.Sleep(50 * time.Millisecond)
	r.WriteBeforeRead([]byte("last"))
	if _, err := r.Read(buf); err == nil {
		t.Fatal("read after the peer closed: no error")
	}
}
