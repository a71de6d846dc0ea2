package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"stratum.dev/stratum/internal/host"
)

// SocketPath is where a running supervisor listens for the other stratum
// commands on a real host (`etcd rejoin`, `repoint`, `snapshot restore`
// stop, start and restart services through it).
const SocketPath = "/run/stratum/supervisor.sock"

// request is one control-socket call: one JSON object per connection.
type request struct {
	Op          string       `json:"op"` // start, stop, restart, status, check, exit, about, replace
	Service     string       `json:"service,omitempty"`
	Services    []string     `json:"services,omitempty"`
	Replacement *Replacement `json:"replacement,omitempty"`
}

// response is the answer to a request.
type response struct {
	Error string `json:"error,omitempty"`
	// Code names the sentinel the error matched, so the client's error
	// matches it too: "unknown-service", "unavailable", "running",
	// "unsupported", "shutting-down".
	Code   string              `json:"code,omitempty"`
	Status *host.ServiceStatus `json:"status,omitempty"`
	About  *About              `json:"about,omitempty"`
}

// Listen opens the control socket at path (a real path), root-only (mode
// 0600 in a 0700 directory), holding an exclusive flock on path+".lock" for
// as long as the listener is open: one supervisor per node, decided by the
// kernel, so two started at once cannot both bind (the loser replacing the
// winner's socket file, then unlinking it on its way out). A stale socket of
// a supervisor that died is replaced; while a live one holds the lock, or
// answers on the socket (an older stratum's, which takes none), Listen is
// refused. Closing the listener unlinks the socket, then releases the lock.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("control socket lock: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w on %s: this node's control plane is running; stop it first", ErrAlreadyRunning, path)
		}
		return nil, fmt.Errorf("control socket lock %s.lock: %w", path, err)
	}
	// A supervisor of an older stratum holds no lock: one that answers is
	// refused as well, before its socket could be replaced.
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		lock.Close()
		return nil, fmt.Errorf("%w on %s: this node's control plane is running; stop it first", ErrAlreadyRunning, path)
	}
	_ = os.Remove(path) // a dead supervisor's
	ln, err := net.Listen("unix", path)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("listen on the control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		lock.Close()
		return nil, err
	}
	return &lockedListener{Listener: ln, lock: lock}, nil
}

// lockedListener is the control socket's listener with its lock, released
// once the socket is closed (and unlinked).
type lockedListener struct {
	net.Listener
	lock *os.File
	once sync.Once
}

func (l *lockedListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { l.lock.Close() })
	return err
}

// Serve answers control-socket requests on ln until ctx ends or ln is
// closed. Only root (uid 0) is answered: a service stop is a root act. An
// accept that fails otherwise (EMFILE: the process is out of file
// descriptors for a moment) is logged and tried again after a pause that
// grows from acceptRetryMin to acceptRetryMax, as net/http's server does:
// the socket is how every other command reaches this node's services, and
// returning would leave it unanswered for the rest of the supervisor's life.
func (s *Supervisor) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			pause = min(max(2*pause, acceptRetryMin), acceptRetryMax)
			s.log.Warn("control socket: accept failed; trying again", "err", err, "in", pause)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(pause):
			}
			continue
		}
		pause = 0
		go s.answer(ctx, c)
	}
}

// acceptRetryMin and acceptRetryMax bound the pause after a failed accept.
const (
	acceptRetryMin = 5 * time.Millisecond
	acceptRetryMax = time.Second
)

// requestWithin bounds the wait for a caller's request on the control
// socket, and maxRequest its size (a replacement's command line is the
// largest, a few hundred bytes).
const (
	requestWithin = 10 * time.Second
	maxRequest    = 64 << 10
)

// answer serves one request on c. The request runs on a context that also
// ends when the caller hangs up (a command stopped by Ctrl-C while it waits
// for a start's readiness), so its wait does not go on for nobody; what the
// request set going (a wanted service's restarts) goes on. The protocol is
// one JSON request, then the answer on the same connection: a caller that
// shuts its sending side down after its request (nc -N) is taken as gone.
func (s *Supervisor) answer(ctx context.Context, c net.Conn) {
	defer c.Close()
	ctx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	var resp response
	if uid, err := peerUID(c); err != nil || uid != 0 {
		resp.Error = fmt.Sprintf("the stratum supervisor answers only root (peer uid %d, %v)", uid, err)
		_ = json.NewEncoder(c).Encode(resp)
		return
	}
	// A request comes at once and is small: a caller that connects and
	// sends nothing, or sends without end, would hold a goroutine and a
	// descriptor (or memory) of a supervisor that runs for months.
	_ = c.SetReadDeadline(time.Now().Add(requestWithin))
	var req request
	if err := json.NewDecoder(bufio.NewReader(io.LimitReader(c, maxRequest))).Decode(&req); err != nil {
		resp.Error = "malformed request: " + err.Error()
		_ = json.NewEncoder(c).Encode(resp)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	// A caller sends one request and then only reads: a read that
	// returns is its hang-up (or this answer's own close, after it).
	go func() {
		var b [1]byte
		_, _ = c.Read(b[:])
		hangUp()
	}()
	var err error
	switch req.Op {
	case "start":
		err = s.StartService(ctx, req.Service)
	case "stop":
		err = s.StopService(ctx, req.Service)
	case "restart":
		err = s.RestartService(ctx, req.Service)
	case "status":
		var st host.ServiceStatus
		st, err = s.ServiceStatus(ctx, req.Service)
		if err == nil {
			resp.Status = &st
		}
	case "check":
		err = s.CheckServices(ctx, req.Services)
	case "exit":
		err = s.requestExit()
	case "about":
		about := s.About()
		resp.About = &about
	case "replace":
		if req.Replacement == nil {
			err = errors.New("a replace request names no replacement")
		} else {
			err = s.requestReplacement(*req.Replacement)
		}
	default:
		err = fmt.Errorf("%w: unknown operation %q", ErrUnsupported, req.Op)
	}
	if err != nil {
		resp.Error = err.Error()
		switch {
		case errors.Is(err, host.ErrUnknownService):
			resp.Code = "unknown-service"
		case errors.Is(err, host.ErrServicesUnavailable):
			resp.Code = "unavailable"
		case errors.Is(err, ErrServicesRunning):
			resp.Code = "running"
		case errors.Is(err, ErrUnsupported):
			resp.Code = "unsupported"
		case errors.Is(err, ErrShuttingDown):
			resp.Code = "shutting-down"
		}
	}
	_ = json.NewEncoder(c).Encode(resp)
}

func peerUID(c net.Conn) (uint32, error) {
	cred, err := peerCred(c)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

// peerCred is the kernel's word on the process at the other end of c, its
// PID numbered in this process's PID namespace (0 for one outside it).
func peerCred(c net.Conn) (*syscall.Ucred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, errors.New("not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// Client is host.Services through a running supervisor's control socket.
type Client struct {
	// Path is the socket's real path (SocketPath on a real host).
	Path string
}

// ErrNotRunning matches a call through a socket nobody answers on: no
// stratum supervisor runs on this node. It matches host.ErrNoServiceManager
// too: the supervisor is the node's service manager, so with none nothing
// runs here, and a step that restarts what runs has nothing to restart.
var ErrNotRunning = fmt.Errorf("no stratum supervisor is running on this node: %w", host.ErrNoServiceManager)

// ErrAlreadyRunning matches a Listen refused because a live supervisor
// answers on the socket: one node runs one supervisor.
var ErrAlreadyRunning = errors.New("a stratum supervisor already answers")

// Running reports whether a supervisor answers on the socket.
func (c Client) Running() bool {
	conn, err := net.DialTimeout("unix", c.Path, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

func (c Client) call(ctx context.Context, req request) (response, error) {
	resp, _, err := c.exchange(ctx, req)
	return resp, err
}

// exchange is call, also returning the supervisor's PID as the kernel
// numbers it in this process's PID namespace (0 when it runs outside it, or
// the kernel did not say).
func (c Client) exchange(ctx context.Context, req request) (response, int, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Path)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// Not an answer about the supervisor: a caller that took this for
		// "nothing runs" would wipe data under a running etcd.
		return response{}, 0, fmt.Errorf("reach the stratum supervisor (control socket %s): %w", c.Path, context.Cause(ctx))
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED):
		return response{}, 0, fmt.Errorf("%w (control socket %s: %v): start it with `stratum up`", ErrNotRunning, c.Path, err)
	default:
		return response{}, 0, fmt.Errorf("reach the stratum supervisor (control socket %s): %w", c.Path, err)
	}
	defer conn.Close()
	pid := 0
	if cred, err := peerCred(conn); err == nil {
		pid = int(cred.Pid)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	defer context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })()
	if err := json.NewEncoder(conn).Encode(req); err != nil {
		return response{}, 0, fmt.Errorf("send to the stratum supervisor: %w", err)
	}
	var resp response
	if err := json.NewDecoder(conn).Decode(&resp); err != nil {
		return response{}, 0, fmt.Errorf("read the stratum supervisor's answer to %s %s: %w", req.Op, req.Service, err)
	}
	if resp.Error != "" {
		return resp, pid, answerError{answered(resp)}
	}
	return resp, pid, nil
}

// answerError is an error the supervisor answered with (Answered).
type answerError struct{ err error }

func (e answerError) Error() string { return e.err.Error() }
func (e answerError) Unwrap() error { return e.err }

// Answered reports whether err is the supervisor's own answer to a call (a
// refusal or a failure it reported), as opposed to a supervisor not
// reached, or one whose answer was lost: a caller then does not know what
// it did.
func Answered(err error) bool {
	var a answerError
	return errors.As(err, &a)
}

// answered is the error resp carries, matching the sentinel its code names.
func answered(resp response) error {
	switch resp.Code {
	case "unknown-service":
		return fmt.Errorf("%w: %s", host.ErrUnknownService, resp.Error)
	case "unavailable":
		return fmt.Errorf("%w: %s", host.ErrServicesUnavailable, resp.Error)
	case "running":
		return fmt.Errorf("%w: %s", ErrServicesRunning, resp.Error)
	case "unsupported":
		return fmt.Errorf("%w: %s", ErrUnsupported, resp.Error)
	case "shutting-down":
		return fmt.Errorf("%w: %s", ErrShuttingDown, resp.Error)
	}
	// A supervisor older than the code answers an operation it does not
	// know in words only.
	if strings.HasPrefix(resp.Error, "unknown operation") {
		return fmt.Errorf("%w: %s", ErrUnsupported, resp.Error)
	}
	return errors.New(resp.Error)
}

func (c Client) StartService(ctx context.Context, name string) error {
	_, err := c.call(ctx, request{Op: "start", Service: name})
	return err
}

func (c Client) StopService(ctx context.Context, name string) error {
	_, err := c.call(ctx, request{Op: "stop", Service: name})
	return err
}

func (c Client) RestartService(ctx context.Context, name string) error {
	_, err := c.call(ctx, request{Op: "restart", Service: name})
	return err
}

func (c Client) ServiceStatus(ctx context.Context, name string) (host.ServiceStatus, error) {
	resp, err := c.call(ctx, request{Op: "status", Service: name})
	if err != nil {
		return host.ServiceStatus{}, err
	}
	if resp.Status == nil {
		return host.ServiceStatus{}, fmt.Errorf("the stratum supervisor sent no status for %s", name)
	}
	return *resp.Status, nil
}

func (c Client) CheckServices(ctx context.Context, names []string) error {
	_, err := c.call(ctx, request{Op: "check", Services: names})
	return err
}

// Exit asks the supervisor to end: refused (ErrServicesRunning) while it
// runs any service. Its foreground returns once asked (ExitRequested).
func (c Client) Exit(ctx context.Context) error {
	_, err := c.call(ctx, request{Op: "exit"})
	return err
}

var _ host.Services = Client{}
