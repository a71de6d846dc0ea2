package vip

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
	"github.com/vishvananda/netlink"
)

// Gratuitous ARP: how many announcements Hold sends, and how far apart, so a
// neighbour that missed one still learns the new holder's MAC.
const (
	arpCount    = 3
	arpInterval = 100 * time.Millisecond
)

// ErrNoInterface is matched by InterfaceOf's error when no interface carries
// the address.
var ErrNoInterface = errors.New("no interface carries the address")

// NetlinkAnnouncer holds an IPv4 VIP on a Linux node as kube-vip's ARP mode
// does: the address as a /32 on an interface, announced by gratuitous ARP so
// the neighbours' caches point at this node's MAC at once instead of at the
// previous holder's until they expire.
type NetlinkAnnouncer struct {
	// Interface is the interface the VIP goes on. When empty, Hold uses the
	// interface that carries NodeIP, and Release the one that carries Addr.
	Interface string
	// NodeIP is the node's own address, used to find Interface when it is
	// empty: the VIP belongs on the node's network.
	NodeIP netip.Addr
	// Addr is the VIP, an IPv4 address.
	Addr netip.Addr
	// Lifetime, when set, is the address's valid lifetime in the kernel
	// (whole seconds, at least one): Hold renews it every Lifetime/3 until
	// Release, so the VIP of a holder that was killed (no Release ran)
	// leaves its interface by itself within Lifetime, and two nodes never
	// answer ARP for it for longer than that.
	Lifetime time.Duration
	// Reannounce, when set, is how often the gratuitous ARP is sent again
	// while the VIP is held. Two nodes can hold it at once for a while (a
	// cluster split by a snapshot restore elects a holder on each side);
	// the last to announce has the neighbours' caches, and when it lets go
	// they would keep pointing at it until they expire. Re-announcing gives
	// them back to the node still holding within Reannounce.
	Reannounce time.Duration

	mu      sync.Mutex
	renewal chan struct{} // closed by Release to stop the renewals and re-announcements
	// renewalDone is closed when the keeping goroutine has returned.
	renewalDone chan struct{}
	// lastWrite and within gate the renewals and re-announcements on the
	// lease (leaseGate, handed in by Run): nil keeps them ungated.
	lastWrite func() time.Time
	within    time.Duration
}

// gate makes the renewals and re-announcements run only while lastWrite is
// younger than within (leaseGate).
func (a *NetlinkAnnouncer) gate(lastWrite func() time.Time, within time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastWrite, a.within = lastWrite, within
}

// leaseFresh reports whether the lease this node holds the VIP by was
// written recently enough to keep announcing it; always, ungated.
func (a *NetlinkAnnouncer) leaseFresh() bool {
	a.mu.Lock()
	lastWrite, within := a.lastWrite, a.within
	a.mu.Unlock()
	return lastWrite == nil || time.Since(lastWrite()) < within
}

// InterfaceOf names the interface that carries ip, or returns an error
// matching ErrNoInterface when none does.
func InterfaceOf(ip netip.Addr) (string, error) {
	family := netlink.FAMILY_V4
	if ip.Unmap().Is6() {
		family = netlink.FAMILY_V6
	}
	var addrs []netlink.Addr
	var err error
	for range 3 { // a dump interrupted by a concurrent change is retried
		if addrs, err = netlink.AddrList(nil, family); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("find the interface of %s: list addresses: %w", ip, err)
	}
	for _, a := range addrs {
		if got, ok := netip.AddrFromSlice(a.IP); ok && got.Unmap() == ip.Unmap() {
			link, err := netlink.LinkByIndex(a.LinkIndex)
			if err != nil {
				return "", fmt.Errorf("find the interface of %s: link %d: %w", ip, a.LinkIndex, err)
			}
			return link.Attrs().Name, nil
		}
	}
	return "", fmt.Errorf("find the interface of %s: %w", ip, ErrNoInterface)
}

// addr is the VIP as the /32 netlink adds and removes.
func (a *NetlinkAnnouncer) addr() (*netlink.Addr, error) {
	if !a.Addr.Is4() {
		return nil, fmt.Errorf("vip: the VIP %v is not an IPv4 address; ARP announces only IPv4", a.Addr)
	}
	na := &netlink.Addr{IPNet: &net.IPNet{IP: a.Addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if a.Lifetime > 0 {
		secs := max(int(a.Lifetime/time.Second), 1)
		na.ValidLft, na.PreferedLft = secs, secs
	}
	return na, nil
}

// Hold adds Addr/32 to the interface (a replace, so a second Hold changes
// nothing) and then sends gratuitous ARP from it, arpCount times arpInterval
// apart: each round a broadcast request and reply with sender and target the
// VIP and the interface's MAC as sender. An interface without an Ethernet
// address gets no ARP.
func (a *NetlinkAnnouncer) Hold(ctx context.Context) error {
	addr, err := a.addr()
	if err != nil {
		return err
	}
	name := a.Interface
	if name == "" {
		if name, err = InterfaceOf(a.NodeIP); err != nil {
			return fmt.Errorf("hold the VIP %s: %w; the VIP was not added; set the interface explicitly", a.Addr, err)
		}
	}
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("hold the VIP %s on %s: %w; the VIP was not added", a.Addr, name, err)
	}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("hold the VIP %s: add %s to %s: %w; the VIP was not added", a.Addr, addr.IPNet, name, err)
	}
	if err := a.keep(link, addr, name); err != nil {
		return fmt.Errorf("hold the VIP %s: %w; releasing it", a.Addr, err)
	}
	if err := announce(ctx, name, a.Addr); err != nil {
		return fmt.Errorf("hold the VIP %s: the address is on %s, but announcing it failed: %w", a.Addr, name, err)
	}
	return nil
}

// keep re-adds addr every Lifetime/3, refreshing its lifetime, and sends
// the gratuitous ARP again every Reannounce, until Release; with neither set
// there is nothing to keep. The netlink handle and the ARP socket are opened
// here, in the caller's network namespace, whichever thread the keeping
// goroutine runs on. Each renewal looks the interface up by name: one deleted
// and made again (a network restart re-creating a bridge, a bond or a VLAN)
// has a new index, and renewing on the old one failed for good, the address
// gone within its lifetime while this node kept the lease.
func (a *NetlinkAnnouncer) keep(link netlink.Link, addr *netlink.Addr, name string) error {
	if a.Lifetime <= 0 && a.Reannounce <= 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.renewal != nil {
		return nil // already keeping
	}
	var nh *netlink.Handle
	if a.Lifetime > 0 {
		var err error
		if nh, err = netlink.NewHandle(); err != nil {
			return fmt.Errorf("open a netlink handle to renew the VIP's lifetime: %w", err)
		}
	}
	var ga *garp
	if a.Reannounce > 0 {
		var err error
		if ga, err = dialGARP(name, a.Addr); err != nil {
			if nh != nil {
				nh.Close()
			}
			return fmt.Errorf("open the ARP socket to re-announce the VIP: %w", err)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	a.renewal, a.renewalDone = stop, done
	go func() {
		defer close(done)
		var renewC, arpC <-chan time.Time
		if nh != nil {
			defer nh.Close()
			t := time.NewTicker(max(a.Lifetime/3, 100*time.Millisecond))
			defer t.Stop()
			renewC = t.C
		}
		if a.Reannounce > 0 {
			defer func() { ga.close() }() // the socket of the interface as it is last
			t := time.NewTicker(a.Reannounce)
			defer t.Stop()
			arpC = t.C
		}
		// dropped: the address was taken off because the lease went
		// stale; a fresh lease again (its renewals came back in time)
		// puts it back and announces it at once.
		dropped := false
		// redial: the ARP socket is to be opened on the interface as it is
		// now (it was made again), until a dial succeeds.
		redial := false
		for {
			select {
			case <-stop:
				return
			case <-renewC:
				if !a.leaseFresh() {
					if !dropped {
						_ = nh.AddrDel(link, addr) // a failure leaves it to its lifetime
						dropped = true
					}
					continue
				}
				remade := false
				if cur, err := nh.LinkByName(name); err == nil && cur.Attrs().Index != link.Attrs().Index {
					link, remade = cur, true
					ga.close()
					ga, redial = nil, a.Reannounce > 0
				}
				if redial {
					var err error
					ga, err = dialGARP(name, a.Addr)
					redial = err != nil // a failure is dialled again next tick
				}
				_ = nh.AddrReplace(link, addr) // a failure is retried next tick; the lifetime bounds the damage
				if dropped || remade {
					dropped = false
					_ = ga.round()
				}
			case <-arpC:
				if a.leaseFresh() && !dropped {
					_ = ga.round() // a failure is retried next tick
				}
			}
		}
	}()
	return nil
}

// stopRenewal stops the renewals and re-announcements, leaving the address
// to expire: what a killed holder leaves behind. It returns once the keeping
// goroutine has, so no renewal in flight re-adds the address after Release
// removed it.
func (a *NetlinkAnnouncer) stopRenewal() {
	a.mu.Lock()
	stop, done := a.renewal, a.renewalDone
	a.renewal, a.renewalDone = nil, nil
	a.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// garp is an ARP socket on one interface with the gratuitous ARP for one
// VIP ready to send.
type garp struct {
	c          *arp.Client
	name       string
	req, reply *arp.Packet
}

// dialGARP opens the ARP socket on the interface name and builds the
// gratuitous request and reply for vip; nil for an interface without an
// Ethernet address (nothing resolves the VIP by ARP there).
func dialGARP(name string, vip netip.Addr) (*garp, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	mac := ifi.HardwareAddr
	if len(mac) != 6 {
		return nil, nil
	}
	c, err := arp.Dial(ifi)
	if err != nil {
		return nil, fmt.Errorf("open an ARP socket on %s: %w", name, err)
	}
	// A request's target MAC is unknown (zero); Linux takes a reply as
	// gratuitous only when its target MAC is the sender's.
	req, err := arp.NewPacket(arp.OperationRequest, mac, vip, make(net.HardwareAddr, 6), vip)
	if err != nil {
		c.Close()
		return nil, err
	}
	reply, err := arp.NewPacket(arp.OperationReply, mac, vip, mac, vip)
	if err != nil {
		c.Close()
		return nil, err
	}
	return &garp{c: c, name: name, req: req, reply: reply}, nil
}

// round sends one broadcast request and reply. A nil garp sends nothing.
func (g *garp) round() error {
	if g == nil {
		return nil
	}
	broadcast := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	for _, p := range []*arp.Packet{g.req, g.reply} {
		if err := g.c.WriteTo(p, broadcast); err != nil {
			return fmt.Errorf("send gratuitous ARP %s on %s: %w", p.Operation, g.name, err)
		}
	}
	return nil
}

func (g *garp) close() {
	if g != nil {
		g.c.Close()
	}
}

// announce sends the gratuitous ARP rounds for vip from the interface name:
// arpCount rounds, arpInterval apart.
func announce(ctx context.Context, name string, vip netip.Addr) error {
	g, err := dialGARP(name, vip)
	if err != nil {
		return err
	}
	defer g.close()
	for i := range arpCount {
		if i > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(arpInterval):
			}
		}
		if err := g.round(); err != nil {
			return err
		}
	}
	return nil
}

// Release removes Addr/32 from the interface, or, when Interface is empty,
// from the interface that carries it. An address or interface already gone
// is released.
func (a *NetlinkAnnouncer) Release() error {
	addr, err := a.addr()
	if err != nil {
		return err
	}
	a.stopRenewal()
	name := a.Interface
	if name == "" {
		if name, err = InterfaceOf(a.Addr); errors.Is(err, ErrNoInterface) {
			return nil
		} else if err != nil {
			return fmt.Errorf("release the VIP %s: %w; it may still be on this node: remove it with `ip addr del %s/32 dev <interface>`", a.Addr, err, a.Addr)
		}
	}
	link, err := netlink.LinkByName(name)
	if _, gone := errors.AsType[netlink.LinkNotFoundError](err); gone {
		return nil
	} else if err != nil {
		return fmt.Errorf("release the VIP %s from %s: %w; it may still be there: remove it with `ip addr del %s/32 dev %s`", a.Addr, name, err, a.Addr, name)
	}
	if err := netlink.AddrDel(link, addr); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("release the VIP %s: remove it from %s: %w; it is still there: remove it with `ip addr del %s/32 dev %s`", a.Addr, name, err, a.Addr, name)
	}
	return nil
}
