package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
	stratumvip "stratum.dev/stratum/internal/vip"
)

// VIP lease timing: kube-vip's defaults are 5 s / 3 s / 1 s; the simulator
// runs at a fifth of that so failover fits in a test.
const (
	vipLeaseDuration = 2 * time.Second
	vipRenewDeadline = 1500 * time.Millisecond
	vipRetryPeriod   = 250 * time.Millisecond
	// VIPLeaseName is the Lease in kube-system the VIP candidates elect through.
	VIPLeaseName = stratumvip.DefaultLease
)

// vip is the cluster's one client address: a listener on its own loopback
// address whose :6443 forwards each connection to the apiserver of the host
// that currently holds the VIP lease. With no holder, connections are refused
// (closed), as a VIP that nobody announces answers nothing.
type vip struct {
	addr netip.Addr
	ln   net.Listener

	mu     sync.Mutex
	holder *Host
	conns  map[net.Conn]struct{}
	// bytes is what the forwarder has carried, both ways, since the start;
	// answers counts the reads it has carried from apiservers to clients
	// (a response is one or a few). An armed cut (CutVIPConnectionsAt,
	// CutVIPAnswer) closes every connection when bytes reaches cutBytes, or
	// instead of carrying answer cutAnswer; cut is closed then.
	bytes     int64
	answers   int64
	cutBytes  int64
	cutAnswer int64
	cut       chan struct{}
	// events records the cut.
	events *EventLog
}

func (c *Cluster) startVIP() error {
	ln, err := net.Listen("tcp", net.JoinHostPort(c.vip.addr.String(), strconv.Itoa(version.APIServerPort)))
	if err != nil {
		return err
	}
	c.vip.ln = ln
	c.vip.events = c.events
	c.vip.conns = map[net.Conn]struct{}{}
	go c.vip.serve(c)
	return nil
}

func (v *vip) serve(c *Cluster) {
	for {
		conn, err := v.ln.Accept()
		if err != nil {
			return
		}
		go v.forward(conn)
	}
}

func (v *vip) track(conn net.Conn, add bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if add {
		v.conns[conn] = struct{}{}
	} else {
		delete(v.conns, conn)
	}
}

func (v *vip) forward(in net.Conn) {
	v.track(in, true)
	defer v.track(in, false)
	defer in.Close()
	v.mu.Lock()
	h := v.holder
	v.mu.Unlock()
	if h == nil {
		return
	}
	out, err := net.DialTimeout("tcp", net.JoinHostPort(h.ip.String(), strconv.Itoa(version.APIServerPort)), 2*time.Second)
	if err != nil {
		return
	}
	v.track(out, true)
	defer v.track(out, false)
	defer out.Close()
	done := make(chan struct{}, 2)
	go func() { v.carry(out, in, false); done <- struct{}{} }()
	go func() { v.carry(in, out, true); done <- struct{}{} }()
	<-done
}

// carry copies src to dst — an apiserver's answers to a client when
// answers — counting against an armed cut: a write that reaches the cut's
// byte is carried up to it, an answer that is the cut's is not carried at
// all; then every connection is closed.
func (v *vip) carry(dst io.Writer, src io.Reader, answers bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			v.mu.Lock()
			send, cut := int64(n), false
			if answers {
				v.answers++
				if v.answers == v.cutAnswer {
					send, cut = 0, true
				}
			}
			if v.cutBytes > 0 && v.bytes+send >= v.cutBytes {
				send, cut = v.cutBytes-v.bytes, true
			}
			v.bytes += send
			v.mu.Unlock()
			if _, werr := dst.Write(buf[:send]); werr != nil {
				return
			}
			if cut {
				v.cutAll()
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cutAll closes every connection through the VIP, once per arming, as a VIP
// moving away would, and records it.
func (v *vip) cutAll() {
	v.mu.Lock()
	if v.cut == nil {
		v.mu.Unlock()
		return
	}
	v.cutBytes, v.cutAnswer = 0, 0
	for conn := range v.conns {
		conn.Close()
	}
	close(v.cut)
	v.cut = nil
	n := len(v.conns) / 2
	v.mu.Unlock()
	v.events.Record("-", "fault", "cut every connection through the VIP (%d client connections), as a VIP moving mid-request does", n)
}

func (v *vip) setHolder(h *Host) (changed bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.setHolderLocked(h)
}

// setHolderLocked is setHolder with v.mu held.
func (v *vip) setHolderLocked(h *Host) (changed bool) {
	if v.holder == h {
		return false
	}
	v.holder = h
	// Connections through the old holder end, as a moved VIP's would.
	for conn := range v.conns {
		conn.Close()
	}
	return true
}

// clearHolder clears the holder if it is h, and reports whether it was. The
// check and the clear are one step, so a holder set meanwhile stays.
func (v *vip) clearHolder(h *Host) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if h == nil || v.holder != h {
		return false
	}
	v.setHolderLocked(nil)
	return true
}

func (v *vip) close() {
	if v.ln != nil {
		v.ln.Close()
	}
	v.setHolder(nil)
}

// VIPBytes is how many bytes the VIP has carried, both ways, since the
// cluster started: a measure of traffic a test draws a cut point in.
func (c *Cluster) VIPBytes() int64 {
	c.vip.mu.Lock()
	defer c.vip.mu.Unlock()
	return c.vip.bytes
}

// VIPAnswers is how many reads the VIP has carried from apiservers to
// clients since the cluster started: each is a response or part of one.
func (c *Cluster) VIPAnswers() int64 {
	c.vip.mu.Lock()
	defer c.vip.mu.Unlock()
	return c.vip.answers
}

// CutVIPConnectionsAt arms a cut of every connection through the VIP when
// the VIP has carried n bytes (VIPBytes) — the byte that reaches n is
// delivered, the rest of that write is not — as a VIP that moves to
// another control plane mid-request closes them: a request half sent, or
// one applied whose answer is lost. New connections go through afterwards.
// The channel is closed once the cut is made; an n already passed cuts at
// the next byte. Arming replaces a cut not yet made.
func (c *Cluster) CutVIPConnectionsAt(n int64) <-chan struct{} {
	v := &c.vip
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cutBytes, v.cutAnswer, v.cut = max(n, v.bytes+1), 0, make(chan struct{})
	return v.cut
}

// CutVIPAnswer arms a cut of every connection through the VIP in place of
// carrying answer k (counted as VIPAnswers counts): the request it answers
// was applied, and its client never hears so — the case a write that is
// retried must judge. The channel is closed once the cut is made; a k
// already passed cuts at the next answer. Arming replaces a cut not yet
// made.
func (c *Cluster) CutVIPAnswer(k int64) <-chan struct{} {
	v := &c.vip
	v.mu.Lock()
	defer v.mu.Unlock()
	v.cutBytes, v.cutAnswer, v.cut = 0, max(k, v.answers+1), make(chan struct{})
	return v.cut
}

// DisarmVIPCut drops a cut armed and not yet made, and reports whether there
// was one.
func (c *Cluster) DisarmVIPCut() bool {
	v := &c.vip
	v.mu.Lock()
	defer v.mu.Unlock()
	armed := v.cut != nil
	v.cutBytes, v.cutAnswer, v.cut = 0, 0, nil
	return armed
}

// VIPHolder is the host that holds the VIP now, nil when none does.
func (c *Cluster) VIPHolder() *Host {
	c.vip.mu.Lock()
	defer c.vip.mu.Unlock()
	return c.vip.holder
}

// VIPAddress is the cluster's VIP.
func (c *Cluster) VIPAddress() netip.Addr { return c.vip.addr }

// VIPURL is https://<vip>:6443.
func (c *Cluster) VIPURL() string {
	return "https://" + net.JoinHostPort(c.vip.addr.String(), strconv.Itoa(version.APIServerPort))
}

// vipCandidate is a host's kube-vip: stratum's own VIP election
// (stratumvip.Run, the one real nodes run) on the VIP Lease through the host's
// own apiserver, with an announcer that points the cluster's VIP forwarder at
// the host. Holding the lease is holding the VIP.
type vipCandidate struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// vipAnnouncer is the simulator's stratumvip.Announcer: holding the VIP makes
// the host the forwarder's holder, and, as the real announcer re-sends its
// gratuitous ARP, makes it so again every vipReannounce while it holds (two
// holders at once, as in a cluster split by a restore, take the VIP in
// turns, and the one left holding takes it back once the other lets go);
// releasing it clears the holder if it is still the host. The claims go on
// past Hold's context (which ends when Hold returns), until Release or the
// end of the candidate (life), as the real announcer's go on until Release.
type vipAnnouncer struct {
	h    *Host
	life context.Context
	mu   sync.Mutex
	stop chan struct{} // closed by Release; nil while not holding
}

// vipReannounce is how often a holding candidate claims the forwarder again
// (stratumvip.DefaultReannounce on real nodes; shorter here, as the
// simulator's lease timings are).
const vipReannounce = time.Second

// Hold makes the host the VIP holder and records it, then keeps claiming it
// until Release or the candidate's end.
func (a *vipAnnouncer) Hold(context.Context) error {
	a.claim("holds the VIP %s")
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stop != nil {
		return nil
	}
	stop := make(chan struct{})
	a.stop = stop
	go func() {
		t := time.NewTicker(vipReannounce)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-a.life.Done():
				return
			case <-t.C:
				a.claim("holds the VIP %s (re-announced)")
			}
		}
	}()
	return nil
}

func (a *vipAnnouncer) claim(what string) {
	c := a.h.cluster
	if c.vip.setHolder(a.h) {
		c.events.Record(a.h.name, "vip", what, c.vip.addr)
	}
}

// Release stops the claims and clears the VIP holder if it is the host, and
// records it.
func (a *vipAnnouncer) Release() error {
	a.mu.Lock()
	if a.stop != nil {
		close(a.stop)
		a.stop = nil
	}
	a.mu.Unlock()
	c := a.h.cluster
	if c.vip.clearHolder(a.h) {
		c.events.Record(a.h.name, "vip", "released the VIP")
	}
	return nil
}

// StartVIPCandidate starts the host's kube-vip. A running one is left as is.
// A host whose apiserver certificate does not cover the VIP is refused and no
// candidate starts: clients reaching the VIP would be served a certificate
// that does not name the address they dialed.
func (h *Host) StartVIPCandidate() error {
	h.mu.Lock()
	if h.vip != nil {
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()
	c := h.cluster
	if err := h.checkVIPCovered(); err != nil {
		err = fmt.Errorf("%w; no kube-vip candidate was started", err)
		c.events.Record(h.name, "error", "%v", err)
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := h.vipConfig(ctx)
	if err != nil {
		cancel()
		return err
	}
	cand := &vipCandidate{cancel: cancel, done: make(chan struct{})}
	h.mu.Lock()
	if h.vip != nil { // started meanwhile
		h.mu.Unlock()
		cancel()
		return nil
	}
	h.vip = cand
	h.mu.Unlock()
	c.events.Record(h.name, "service", "kube-vip started")
	go func() {
		defer close(cand.done)
		if err := stratumvip.Run(ctx, cfg); err != nil {
			// A refused win (the certificate no longer covers the VIP): the
			// VIP was not taken and the lease is released; the candidate is
			// gone, as kube-vip exits.
			c.events.Record(h.name, "error", "%v", err)
			h.forgetVIPCandidate(cand)
		}
	}()
	return nil
}

// vipConfig is the host's stratumvip.Run configuration: the election through the
// host's own apiserver at the simulator's timings, refusing the VIP while the
// host's apiserver certificate does not cover it. life is the candidate's:
// its announcer claims the VIP no longer once it ends.
func (h *Host) vipConfig(life context.Context) (stratumvip.Config, error) {
	rc, err := h.AdminConfig()
	if err != nil {
		return stratumvip.Config{}, err
	}
	rc.Timeout = vipRenewDeadline
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return stratumvip.Config{}, err
	}
	return stratumvip.Config{
		Client:        cs,
		Identity:      h.name,
		Lease:         VIPLeaseName,
		LeaseDuration: vipLeaseDuration,
		RenewDeadline: vipRenewDeadline,
		RetryPeriod:   vipRetryPeriod,
		CanHold:       h.checkVIPCovered,
		Announcer:     &vipAnnouncer{h: h, life: life},
	}, nil
}

// checkVIPCovered reports an error matching pki.ErrIPNotCovered unless the
// host's apiserver serving certificate names the cluster VIP among its IP
// SANs, as kube-vip on a real node checks before announcing the address.
func (h *Host) checkVIPCovered() error {
	vip := h.cluster.vip.addr
	redo := fmt.Sprintf("re-run `stratum up` on %s, which reissues the apiserver certificate to cover the VIP", h.name)
	certPEM, err := h.files.ReadFile(version.PKIFile("apiserver.crt"))
	if err != nil {
		return fmt.Errorf("%s refuses to take the VIP %s: read its apiserver certificate: %w; %s", h.name, vip, err, redo)
	}
	if err := pki.CheckLeafCovers(certPEM, net.IP(vip.AsSlice())); err != nil {
		var sans []net.IP
		if crt, perr := pki.ParseCert(certPEM); perr == nil {
			sans = crt.IPAddresses
		}
		return fmt.Errorf("%s refuses to take the VIP %s: its apiserver certificate %s covers only the IPs %v: %w; %s",
			h.name, vip, version.PKIFile("apiserver.crt"), sans, err, redo)
	}
	return nil
}

// StopVIPCandidate stops the host's kube-vip, releasing the lease if held.
func (h *Host) StopVIPCandidate() {
	h.mu.Lock()
	cand := h.vip
	h.mu.Unlock()
	if cand != nil {
		h.stopVIPCandidate(cand)
	}
}

// stopVIPCandidate stops cand and, when it is still the host's kube-vip,
// forgets it.
func (h *Host) stopVIPCandidate(cand *vipCandidate) {
	h.mu.Lock()
	if h.vip != cand {
		h.mu.Unlock()
		cand.cancel()
		return
	}
	h.vip = nil
	h.mu.Unlock()
	cand.cancel()
	select {
	case <-cand.done:
	case <-time.After(5 * time.Second):
	}
	c := h.cluster
	c.vip.clearHolder(h)
	c.events.Record(h.name, "service", "kube-vip stopped")
}

// forgetVIPCandidate forgets cand, a candidate that stopped by itself, when it
// is still the host's kube-vip.
func (h *Host) forgetVIPCandidate(cand *vipCandidate) {
	cand.cancel()
	h.mu.Lock()
	mine := h.vip == cand
	if mine {
		h.vip = nil
	}
	h.mu.Unlock()
	if mine {
		h.cluster.vip.clearHolder(h)
		h.cluster.events.Record(h.name, "service", "kube-vip stopped")
	}
}

// WaitVIP waits until some host holds the VIP, and returns it.
func (c *Cluster) WaitVIP(ctx context.Context) (*Host, error) {
	for {
		if h := c.VIPHolder(); h != nil {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("no host took the VIP: " + ctx.Err().Error())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
