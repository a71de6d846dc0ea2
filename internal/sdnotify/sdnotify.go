// Package sdnotify tells a service manager speaking systemd's notify
// protocol (a unit with Type=notify) how this process's start went: READY=1
// once it serves or has settled into a wait it says, STATUS= what it does,
// STOPPING=1 when it begins to stop. Without NOTIFY_SOCKET in the
// environment (run by hand, under another supervisor) every call does
// nothing. With it, `systemctl start stratum` returns once the control plane
// is up or has settled into a wait its status names (a failed start retried
// while its etcd voter is kept, etcd data awaited: a start systemd timed out
// would kill that voter), so a playbook restarting control planes one after
// another waits for each, and checks `stratum status` before the next.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// SocketEnv is the environment variable the service manager names its
// socket in.
const SocketEnv = "NOTIFY_SOCKET"

// Ready says the start is done: the service serves, or waits on something
// status names (empty: no status).
func Ready(status string) error { return Notify("READY=1", statusLine(status)) }

// Status says what the service does now.
func Status(status string) error { return Notify(statusLine(status)) }

// Stopping says the service has begun to stop.
func Stopping() error { return Notify("STOPPING=1") }

// maxStatus bounds a status's length: systemd drops a notification larger
// than its buffer (4 KiB) whole, READY=1 with it, and a supervisor whose
// READY never came is killed at the unit's start timeout.
const maxStatus = 512

// statusLine is a STATUS= assignment; the protocol's assignments are one
// per line, so a status is kept to its first, and to maxStatus bytes.
func statusLine(status string) string {
	if status == "" {
		return ""
	}
	first, _, _ := strings.Cut(status, "\n")
	if len(first) > maxStatus {
		first = strings.ToValidUTF8(first[:maxStatus-3], "") + "..."
	}
	return "STATUS=" + first
}

// Notify sends the assignments (empty ones left out) to the socket
// NOTIFY_SOCKET names, as one datagram: a path, or an abstract address
// written with a leading @. Without NOTIFY_SOCKET it does nothing.
func Notify(assignments ...string) error {
	addr := os.Getenv(SocketEnv)
	if addr == "" {
		return nil
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	var lines []string
	for _, a := range assignments {
		if a != "" {
			lines = append(lines, a)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify the service manager at %s: %w", os.Getenv(SocketEnv), err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		return fmt.Errorf("notify the service manager at %s: %w", os.Getenv(SocketEnv), err)
	}
	return nil
}
