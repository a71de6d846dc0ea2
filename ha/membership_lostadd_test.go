package ha_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestMemberAddWhoseAnswerIsLostIsNotTakenAsNothingAdded: an attempt whose
// add went out through one endpoint and whose answer was lost, the next
// endpoint then not answering at all, may have added the member. It must
// not be taken for an attempt that sent no add (a quorum lost for a
// moment, which MemberAdd waits out): that would say "nothing was added"
// about a learner that exists, and the join would not roll it back. It
// returns at once, for the caller's rollback.
func TestMemberAddWhoseAnswerIsLostIsNotTakenAsNothingAdded(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1, SpareHosts: 2})
	ctx := context.Background()
	silent := c.Host("cp3").IP().String()
	ln := silentEtcdListener(t, c.Host("cp3"))
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range held {
			conn.Close()
		}
	}()
	go func() {
		for {
			conn, err := ln.Accept() // accepted, never answered
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn)
			mu.Unlock()
		}
	}()
	cp1 := c.Host("cp1")
	var lost atomic.Bool
	// Every answer reaches this node 600 ms late (a read may take 5 s),
	// and the learner is seen on another connection well within that.
	n := ha.NewNode(ha.Env{Host: laggingHandle{Handle: cp1.Handle(), lag: 600 * time.Millisecond, lost: &lost}, EtcdReadTimeout: 5 * time.Second})
	spare := c.Host("cp2")
	// The answer is lost once the learner exists.
	watched, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	cli, err := cp1.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	go func() {
		for watched.Err() == nil {
			if ml, err := cli.MemberList(watched); err == nil && slices.ContainsFunc(ml.Members, func(m *etcdserverpb.Member) bool {
				return slices.Contains(m.PeerURLs, spare.PeerURL())
			}) {
				lost.Store(true)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err = n.MemberAdd(ctx, []string{cp1.IP().String(), silent}, "cp2", spare.PeerURL())
	took := time.Since(start)
	stopWatch()
	if !lost.Load() {
		t.Fatalf("the learner was never added, so no answer was lost (MemberAdd: %v)", err)
	}
	if err == nil || strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("MemberAdd whose add landed with its answer lost, the other endpoint silent = %v, want an error that does not say nothing was added", err)
	}
	if took > 25*time.Second {
		t.Errorf("MemberAdd took %s: it asked again after an add that may have landed", took.Round(time.Second))
	}
	if found, learner := isLearner(t, cp1, spare.PeerURL()); !found || !learner {
		t.Errorf("the learner whose add's answer was lost: found %t learner %t, want it there for the caller's rollback", found, learner)
	}
}

// silentEtcdListener listens on h's etcd client port and never answers: an
// endpoint that accepts connections and says nothing. It is closed when the
// test ends.
func silentEtcdListener(t testing.TB, h *sim.Host) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(h.IP().String(), strconv.Itoa(version.EtcdClientPort)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// laggingHandle is a simulated host's Handle whose connections deliver what
// the other end sends lag late, and nothing once lost is set: answers lost
// on their way back, below TLS.
type laggingHandle struct {
	*sim.Handle
	lag  time.Duration
	lost *atomic.Bool
}

func (h laggingHandle) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	conn, err := h.Handle.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return newLaggingConn(conn, h.lag, h.lost), nil
}

// laggingConn is laggingHandle's connection: a reader takes what arrives
// with its time, and Read hands each chunk over lag after it arrived, or
// drops it when lost is set by then.
type laggingConn struct {
	net.Conn
	lag       time.Duration
	lost      *atomic.Bool
	chunks    chan lagChunk
	pending   []byte
	err       error
	closed    chan struct{}
	closeOnce sync.Once
}

// lagChunk is what one read of the connection got, and when.
type lagChunk struct {
	b   []byte
	at  time.Time
	err error
}

// newLaggingConn starts conn's reader, which ends with conn.
func newLaggingConn(conn net.Conn, lag time.Duration, lost *atomic.Bool) *laggingConn {
	l := &laggingConn{Conn: conn, lag: lag, lost: lost, chunks: make(chan lagChunk, 256), closed: make(chan struct{})}
	go func() {
		for {
			buf := make([]byte, 32<<10)
			n, err := conn.Read(buf)
			select {
			case l.chunks <- lagChunk{buf[:n], time.Now(), err}:
			case <-l.closed:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return l
}

func (l *laggingConn) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		if l.err != nil {
			return 0, l.err
		}
		var ch lagChunk
		select {
		case ch = <-l.chunks:
		case <-l.closed:
			return 0, net.ErrClosed
		}
		select {
		case <-time.After(time.Until(ch.at.Add(l.lag))):
		case <-l.closed:
			return 0, net.ErrClosed
		}
		if l.lost.Load() {
			continue // lost on its way back
		}
		l.pending, l.err = ch.b, ch.err
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	return n, nil
}

func (l *laggingConn) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Conn.Close()
}
