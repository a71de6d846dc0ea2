package scenarios

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/sim"
)

// probe is an observer host for one call of the join's health gate that
// brackets every connection the gate opens to a member with the member's own
// answer, asked directly, just before the dial and just after the
// connection closes. The gate asks its Status on that connection in between;
// within one raft term a member's leader only goes from none to one leader,
// so when both brackets name the same leader in the same term, that is what
// the gate was told. A drawn delay on the dial to one member (a slow link
// from the joiner) skews the gate's reading of that member against the
// others, across a leadership change.
type probe struct {
	*sim.Handle
	delay map[string]time.Duration // by dial address
	// stalled maps a member's dial address to a listener that accepts
	// and never answers: the member stalls (TestPlantedStall's fault).
	stalled map[string]string
	truth   func(addr string) memberView

	// onClose, when set, is called with the number of connections closed so
	// far each time the gate closes one.
	onClose func(closed int)

	// answers are the member answers the gate judged.
	answers []ha.EtcdMemberHealth

	mu       sync.Mutex
	brackets map[string][]*bracket
	closed   int
}

type bracket struct {
	before, after memberView
	closed        chan struct{}
}

func (p *probe) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	if d := p.delay[address]; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	b := &bracket{before: p.truth(address), closed: make(chan struct{})}
	var d net.Dialer
	if hole, ok := p.stalled[address]; ok {
		return d.DialContext(ctx, network, hole)
	}
	conn, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.brackets[address] = append(p.brackets[address], b)
	p.mu.Unlock()
	return &bracketConn{Conn: conn, close: func() {
		b.after = p.truth(address)
		close(b.closed)
		p.mu.Lock()
		p.closed++
		n := p.closed
		p.mu.Unlock()
		if p.onClose != nil {
			p.onClose(n)
		}
	}}, nil
}

type bracketConn struct {
	net.Conn
	once  sync.Once
	close func()
}

func (c *bracketConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.close)
	return err
}

// heard is what the gate was told by each member, by dial address, when that
// is known: the gate's client may open more than one connection to a member
// (and close one late), so a member's answer is known when its own answer
// just before the first dial and just after the last close name the same
// leader in the same term. ok is false when any member's is not known so, or
// a connection is still open after wait.
func (p *probe) heard(wait time.Duration) (map[string]memberView, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	deadline := time.After(wait)
	out := map[string]memberView{}
	for addr, bs := range p.brackets {
		for _, b := range bs {
			select {
			case <-b.closed:
			case <-deadline:
				return nil, false
			}
		}
		first, last := bs[0].before, bs[0].after
		for _, b := range bs[1:] {
			if b.after.Term > last.Term || b.after.Err != nil {
				last = b.after
			}
		}
		for _, b := range bs {
			if b.after.Err != nil || b.before.Err != nil || b.after.Term != first.Term || b.after.Leader != first.Leader {
				return nil, false
			}
		}
		if first.Err != nil || last.Err != nil || first.Term != last.Term || first.Leader != last.Leader {
			return nil, false
		}
		out[addr] = first
	}
	return out, true
}

// probedGate runs the join's health gate (EtcdClusterHealthy on every
// member) through a fresh probe, the dial to slow delayed by delay.
func (s *splitBrain) probedGate(slow *sim.Host, delay time.Duration) (*probe, error) {
	return s.probedGateHooked(slow, delay, nil)
}

// probedGateHooked is probedGate with onClose set on the probe.
func (s *splitBrain) probedGateHooked(slow *sim.Host, delay time.Duration, onClose func(int)) (*probe, error) {
	p := &probe{Handle: s.hosts[0].Handle(), delay: map[string]time.Duration{}, brackets: map[string][]*bracket{},
		truth: func(addr string) memberView {
			for _, h := range s.hosts {
				if hostPort(h.ClientURL()) == addr {
					return s.viewOfHost(h)
				}
			}
			return memberView{Err: errNotAMember}
		}}
	p.onClose = onClose
	if slow != nil && delay > 0 {
		p.delay[hostPort(slow.ClientURL())] = delay
	}
	p.stalled = s.plant.stalled
	readTimeout := readTimeoutFor(s.c.Config().Etcd)
	gateReadTimeout := readTimeout
	if s.plant.readTimeout > 0 {
		gateReadTimeout = s.plant.readTimeout
	}
	n := ha.NewNode(ha.Env{Host: p, Log: quiet, EtcdReadTimeout: gateReadTimeout})
	type result struct {
		answers []ha.EtcdMemberHealth
		err     error
	}
	done := make(chan result, 1)
	go func() {
		answers, err := n.EtcdClusterHealth(s.ctx, s.ips)
		done <- result{answers, err}
	}()
	// The gate reads every member concurrently, each read bounded by the
	// read timeout: one that has not returned long after is stuck, and a
	// join would hang on it. That is a failure of its own, named, not a
	// wait for the check's or go test's deadline.
	bound := gateBound(readTimeout, delay)
	select {
	case r := <-done:
		p.answers = r.answers
		return p, r.err
	case <-time.After(bound):
		s.t.Fatalf("the join's health gate (EtcdClusterHealth on %v) did not return within %s (each member's read is bounded by %s): a join would hang on it", s.ips, bound, readTimeout)
		return nil, nil
	}
}

// gateBound is how long one gate call may take before it counts as stuck:
// its reads (the status, then the alarm list, each bounded by readTimeout)
// with the dial delay, four times over, and at least 10 s for a busy box.
func gateBound(readTimeout, delay time.Duration) time.Duration {
	return max(10*time.Second, 4*(2*readTimeout+delay))
}

func hostPort(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}

// describe is what the probe knows of each member's answer to the gate.
func (p *probe) describe() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for addr, bs := range p.brackets {
		for _, b := range bs {
			select {
			case <-b.closed:
				parts = append(parts, fmt.Sprintf("%s: %s .. %s", addr, b.before, b.after))
			default:
				parts = append(parts, fmt.Sprintf("%s: %s .. (open)", addr, b.before))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
