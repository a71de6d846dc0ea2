package sdnotify

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// listen is a service manager's notify socket at a path or an abstract
// address, and what it receives.
func listen(t *testing.T, addr string) (env string, recv func() string) {
	t.Helper()
	name := addr
	if addr[0] == '@' {
		name = "\x00" + addr[1:]
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return addr, func() string {
		t.Helper()
		buf := make([]byte, 4096)
		if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
}

func TestNotifySendsTheProtocolsDatagrams(t *testing.T) {
	for _, addr := range []string{filepath.Join(t.TempDir(), "notify"), "@stratum-sdnotify-test-" + t.Name()} {
		env, recv := listen(t, addr)
		t.Setenv(SocketEnv, env)
		if err := Ready("control plane up\nsecond line"); err != nil {
			t.Fatal(err)
		}
		if got := recv(); got != "READY=1\nSTATUS=control plane up\n" {
			t.Errorf("Ready at %s sent %q", addr, got)
		}
		long := strings.Repeat("é", 400) // 800 bytes
		if err := Status(long); err != nil {
			t.Fatal(err)
		}
		if got := recv(); len(got) > len("STATUS=")+maxStatus+1 || !utf8.ValidString(got) || !strings.HasSuffix(got, "...\n") {
			t.Errorf("a long status was sent as %d bytes %q, want it cut to %d, valid UTF-8", len(got), got, maxStatus)
		}
		if err := Status("waiting for etcd data"); err != nil {
			t.Fatal(err)
		}
		if got := recv(); got != "STATUS=waiting for etcd data\n" {
			t.Errorf("Status at %s sent %q", addr, got)
		}
		if err := Stopping(); err != nil {
			t.Fatal(err)
		}
		if got := recv(); got != "STOPPING=1\n" {
			t.Errorf("Stopping at %s sent %q", addr, got)
		}
	}
}

func TestNotifyWithoutASocketDoesNothing(t *testing.T) {
	t.Setenv(SocketEnv, "")
	if err := Ready("up"); err != nil {
		t.Fatalf("Ready without %s: %v", SocketEnv, err)
	}
	t.Setenv(SocketEnv, filepath.Join(t.TempDir(), "nobody-listens"))
	if err := Ready("up"); err == nil {
		t.Fatal("Ready to a socket nobody listens on: no error")
	}
}
