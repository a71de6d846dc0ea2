package timeline

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"stratum.dev/stratum/sim"
)

// Span kinds: what holds on a host over a stretch of time. Each is drawn on
// a track of its own in the host's lane, as <rect class="span span-KIND">.
const (
	SpanLeader      = "leader"      // the host's etcd member leads the cluster
	SpanVIP         = "vip"         // the host holds the VIP
	SpanPartitioned = "partitioned" // a cut (partition, cut link) ends at the host, or it is isolated
	SpanCrashed     = "crashed"     // the host crashed and has not come back
	SpanDown        = "down"        // a service (etcd, kube-apiserver) is stopped
)

// Services a SpanDown names.
const (
	serviceEtcd      = "etcd"
	serviceAPIServer = "kube-apiserver"
)

// span is one stretch of time a state held on a host.
type span struct {
	host, kind string
	// service is the stopped service of a SpanDown, "" otherwise.
	service    string
	start, end time.Time
	// detail says what began it (the tooltip).
	detail string
	// toEnd is set when the log ended with the state still holding.
	toEnd bool
}

// mark is one event drawn at its instant.
type mark struct {
	host, kind string
	at         time.Time
	what       string
}

// model is an event log read as spans and marks, ready to draw.
type model struct {
	// hosts are the lanes besides the cluster's, in natural order.
	hosts      []string
	spans      []span
	marks      []mark
	start, end time.Time
	events     int
}

// The event texts the simulator records (sim/*.go, the Record calls) that
// begin or end a span. Any other text is drawn as a mark only.
var (
	reLeader      = regexp.MustCompile(`^etcd leader is now (\S+) \(term (\d+)\)$`)
	reNoLeader    = regexp.MustCompile(`^etcd has no leader$`)
	reVIPHolds    = regexp.MustCompile(`^holds the VIP\b`)
	reVIPReleased = regexp.MustCompile(`^released the VIP\b`)
	reKubeVIPStop = regexp.MustCompile(`^kube-vip stopped\b`)
	rePartition   = regexp.MustCompile(`^partition\b(.*)$`)
	reGroup       = regexp.MustCompile(`\{([^}]*)\}`)
	reCut         = regexp.MustCompile(`^cut (\S+) <-> (\S+)$`)
	reIsolated    = regexp.MustCompile(`^isolated$`)
	reNetHealed   = regexp.MustCompile(`^network healed\b`)
	reEtcdUp      = regexp.MustCompile(`^etcd started\b`)
	reEtcdDown    = regexp.MustCompile(`^etcd (stopped|crashed|member removed from the cluster)\b`)
	reAPIUp       = regexp.MustCompile(`^kube-apiserver ready\b`)
	reAPIDown     = regexp.MustCompile(`^kube-apiserver (stopped|killed)\b`)
	// reBackUp is a service start that shows a crashed host running again.
	reBackUp = regexp.MustCompile(`^(etcd started|kube-apiserver ready|kube-vip started|kube-controller-manager started)\b`)
)

type spanKey struct{ host, kind, service string }

// view is one member's last report of its leader.
type view struct {
	leader string // "" for none
	term   uint64
}

// deriver reads an event log in order, keeping the state each span stands
// for.
type deriver struct {
	m     model
	lanes map[string]bool
	open  map[spanKey]*span
	// The network: isolated hosts and cut pairs, as sim's network keeps them.
	isolated map[string]bool
	cut      map[[2]string]bool
	// netDetail is each partitioned host's current description.
	netDetail map[string]string
	// views are the members' latest leader reports; a member whose etcd
	// stopped has none.
	views map[string]view
	// etcdDown are the hosts whose etcd is known stopped.
	etcdDown map[string]bool
	leader   view
}

// derive reads events (in the order recorded) as lanes, spans and marks.
func derive(events []sim.Event) model {
	d := &deriver{
		lanes: map[string]bool{}, open: map[spanKey]*span{},
		isolated: map[string]bool{}, cut: map[[2]string]bool{}, netDetail: map[string]string{},
		views: map[string]view{}, etcdDown: map[string]bool{},
	}
	d.m.events = len(events)
	for i, e := range events {
		if e.Host != "" {
			d.lanes[e.Host] = true
		}
		if i == 0 || e.Time.Before(d.m.start) {
			d.m.start = e.Time
		}
		if e.Time.After(d.m.end) {
			d.m.end = e.Time
		}
	}
	for h := range d.lanes {
		d.m.hosts = append(d.m.hosts, h)
	}
	slices.SortFunc(d.m.hosts, naturalCompare)
	for _, e := range events {
		if d.event(e) {
			d.m.marks = append(d.m.marks, mark{host: e.Host, kind: e.Kind, at: e.Time, what: e.What})
		}
	}
	for _, s := range d.open {
		s.end, s.toEnd = d.m.end, true
		d.m.spans = append(d.m.spans, *s)
	}
	slices.SortStableFunc(d.m.spans, func(a, b span) int {
		if c := a.start.Compare(b.start); c != 0 {
			return c
		}
		return strings.Compare(a.host+a.kind+a.service, b.host+b.kind+b.service)
	})
	return d.m
}

// event applies one event and reports whether it is drawn as a mark: every
// event is, but for the leader and VIP reports the spans show whole.
func (d *deriver) event(e sim.Event) bool {
	h, w, at := e.Host, e.What, e.Time
	switch e.Kind {
	case "leader":
		if m := reLeader.FindStringSubmatch(w); m != nil && h != "" {
			term, _ := strconv.ParseUint(m[2], 10, 64)
			d.views[h] = view{leader: m[1], term: term}
			delete(d.etcdDown, h)
			d.updateLeader(at)
			return false
		}
		if reNoLeader.MatchString(w) && h != "" {
			d.views[h] = view{}
			d.updateLeader(at)
			return false
		}
	case "vip":
		switch {
		case reVIPHolds.MatchString(w) && h != "":
			// The simulator's VIP has one holder: a new one replaces the last.
			for k := range d.open {
				if k.kind == SpanVIP && k.host != h {
					d.close(k, at)
				}
			}
			d.begin(spanKey{h, SpanVIP, ""}, at, w)
			return false
		case reVIPReleased.MatchString(w):
			d.close(spanKey{h, SpanVIP, ""}, at)
			return false
		}
	case "crash":
		if h != "" {
			d.begin(spanKey{h, SpanCrashed, ""}, at, w)
		}
	case "checkpoint":
		// An operation on the host: it runs again.
		d.close(spanKey{h, SpanCrashed, ""}, at)
	case "action":
		if w == "reboot" {
			d.close(spanKey{h, SpanCrashed, ""}, at)
		}
	case "heal":
		if reNetHealed.MatchString(w) {
			clear(d.isolated)
			clear(d.cut)
			d.updateNetwork(at, w)
		}
	case "fault":
		switch {
		case rePartition.MatchString(w) && h == "":
			d.partition(rePartition.FindStringSubmatch(w)[1])
			d.updateNetwork(at, w)
		case reCut.MatchString(w) && h == "":
			m := reCut.FindStringSubmatch(w)
			d.cut[pairOf(m[1], m[2])] = true
			d.updateNetwork(at, w)
		case reIsolated.MatchString(w) && h != "":
			d.isolated[h] = true
			d.updateNetwork(at, w)
		}
	}
	if h != "" && (e.Kind == "service" || e.Kind == "fault") {
		d.service(h, w, at)
	}
	return true
}

// service applies a service's start or stop on host h.
func (d *deriver) service(h, w string, at time.Time) {
	if reBackUp.MatchString(w) {
		d.close(spanKey{h, SpanCrashed, ""}, at)
	}
	switch {
	case reEtcdUp.MatchString(w):
		d.close(spanKey{h, SpanDown, serviceEtcd}, at)
		delete(d.etcdDown, h)
	case reEtcdDown.MatchString(w):
		d.begin(spanKey{h, SpanDown, serviceEtcd}, at, w)
		d.etcdDown[h] = true
		delete(d.views, h)
		d.updateLeader(at)
	case reAPIUp.MatchString(w):
		d.close(spanKey{h, SpanDown, serviceAPIServer}, at)
	case reAPIDown.MatchString(w):
		d.begin(spanKey{h, SpanDown, serviceAPIServer}, at, w)
	case reKubeVIPStop.MatchString(w):
		// A stopped kube-vip no longer holds the VIP (the simulator clears
		// the holder without a release event).
		d.close(spanKey{h, SpanVIP, ""}, at)
	}
}

// begin opens a span unless one of the same key is open.
func (d *deriver) begin(k spanKey, at time.Time, detail string) {
	if _, ok := d.open[k]; ok {
		return
	}
	d.open[k] = &span{host: k.host, kind: k.kind, service: k.service, start: at, detail: detail}
}

// close ends the open span of key k, if any.
func (d *deriver) close(k spanKey, at time.Time) {
	s, ok := d.open[k]
	if !ok {
		return
	}
	delete(d.open, k)
	s.end = at
	if s.end.Before(s.start) {
		s.end = s.start
	}
	d.m.spans = append(d.m.spans, *s)
}

// partition replaces the cuts with those of "{a,b} | {c}": every pair of
// hosts on different sides; hosts named in no group form one more side.
func (d *deriver) partition(groups string) {
	side := map[string]int{}
	for i, g := range reGroup.FindAllStringSubmatch(groups, -1) {
		for _, name := range strings.Split(g[1], ",") {
			if name = strings.TrimSpace(name); name != "" {
				side[name] = i + 1
			}
		}
	}
	clear(d.cut)
	for _, a := range d.m.hosts {
		for _, b := range d.m.hosts {
			if a < b && side[a] != side[b] {
				d.cut[pairOf(a, b)] = true
			}
		}
	}
}

// updateNetwork ends and begins the partitioned spans after the network
// changed by the event what: a host's span is split where what it is cut
// off from changes, so each span's detail holds throughout.
func (d *deriver) updateNetwork(at time.Time, what string) {
	for _, h := range d.m.hosts {
		var detail string
		if d.isolated[h] {
			detail = "isolated"
		} else {
			var from []string
			for _, p := range d.m.hosts {
				if p != h && d.cut[pairOf(h, p)] {
					from = append(from, p)
				}
			}
			if len(from) > 0 {
				detail = "cut off from " + strings.Join(from, ", ")
			}
		}
		k := spanKey{h, SpanPartitioned, ""}
		prev, was := d.netDetail[h]
		if was && prev == detail {
			continue
		}
		d.close(k, at)
		delete(d.netDetail, h)
		if detail != "" {
			d.netDetail[h] = detail
			d.begin(k, at, fmt.Sprintf("%s (after %q)", detail, what))
		}
	}
}

// updateLeader moves the leader span to the leader a majority of the
// reporting members name (members whose etcd stopped do not count), in the
// highest term they report; no span while there is none, or while the named
// leader's own etcd is stopped.
func (d *deriver) updateLeader(at time.Time) {
	counts := map[string]int{}
	for _, v := range d.views {
		if v.leader != "" {
			counts[v.leader]++
		}
	}
	var next view
	for name, n := range counts {
		if 2*n > len(d.views) && !d.etcdDown[name] {
			next.leader = name
		}
	}
	if next.leader != "" {
		for _, v := range d.views {
			if v.leader == next.leader && v.term > next.term {
				next.term = v.term
			}
		}
	}
	if next == d.leader {
		return
	}
	if d.leader.leader != "" {
		d.close(spanKey{d.leader.leader, SpanLeader, ""}, at)
	}
	d.leader = next
	if next.leader != "" {
		d.begin(spanKey{next.leader, SpanLeader, ""}, at,
			fmt.Sprintf("etcd leader in term %d, as %d of the %d reporting members say", next.term, counts[next.leader], len(d.views)))
	}
}

func pairOf(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

// naturalCompare orders names with their digit runs compared as numbers:
// cp2 before cp10.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		ca, ra := chunk(a)
		cb, rb := chunk(b)
		da, db := unicode.IsDigit(rune(ca[0])), unicode.IsDigit(rune(cb[0]))
		switch {
		case da && db:
			na, nb := strings.TrimLeft(ca, "0"), strings.TrimLeft(cb, "0")
			if len(na) != len(nb) {
				return len(na) - len(nb)
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
		default:
			if c := strings.Compare(ca, cb); c != 0 {
				return c
			}
		}
		a, b = ra, rb
	}
	return len(a) - len(b)
}

// chunk splits s after its leading run of digits or of non-digits.
func chunk(s string) (string, string) {
	digit := unicode.IsDigit(rune(s[0]))
	i := 1
	for i < len(s) && unicode.IsDigit(rune(s[i])) == digit {
		i++
	}
	return s[:i], s[i:]
}
