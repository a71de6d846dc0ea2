package sim

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// memberStatus asks one member, through the test's own view (not partitioned),
// whom it follows.
func memberStatus(t *testing.T, c *Cluster, h *Host) (id, leader uint64, err error) {
	t.Helper()
	cli, err := c.Hosts()[0].etcdTestClient(h.ClientURL())
	if err != nil {
		return 0, 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, h.ClientURL())
	if err != nil {
		return 0, 0, err
	}
	return st.Header.MemberId, st.Leader, nil
}

// etcdTestClient is a client that does not go through any host's dialer: the
// harness's own view of the servers.
func (h *Host) etcdTestClient(endpoints ...string) (*clientv3.Client, error) {
	tlsCfg, err := h.etcdClientTLS()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: endpoints, TLS: tlsCfg, DialTimeout: 2 * time.Second})
}

func leaders(t *testing.T, c *Cluster, hosts []*Host) map[string]uint64 {
	out := map[string]uint64{}
	for _, h := range hosts {
		if _, l, err := memberStatus(t, c, h); err == nil {
			out[h.Name()] = l
		} else {
			t.Logf("status of %s: %v", h.Name(), err)
		}
	}
	return out
}

func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

func TestIsolatedLeaderIsReplacedAndHealHasOneLeader(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 3})
	hosts := c.Hosts()
	var old *Host
	var oldID uint64
	eventually(t, 5*time.Second, "one leader", func() (bool, string) {
		for _, h := range hosts {
			id, l, err := memberStatus(t, c, h)
			if err == nil && id == l {
				old, oldID = h, id
				return true, ""
			}
		}
		return false, fmt.Sprint(leaders(t, c, hosts))
	})
	c.Isolate(old.Name())
	var rest []*Host
	for _, h := range hosts {
		if h != old {
			rest = append(rest, h)
		}
	}
	eventually(t, 10*time.Second, "the two others elect a new leader", func() (bool, string) {
		ls := leaders(t, c, rest)
		if len(ls) != 2 {
			return false, fmt.Sprint(ls)
		}
		a, b := ls[rest[0].Name()], ls[rest[1].Name()]
		return a != 0 && a == b && a != oldID, fmt.Sprint(ls)
	})
	// The isolated old leader cannot reach its followers: it steps down
	// (etcd's check-quorum) and names no leader, or still names itself, but
	// never the new one.
	if _, l, err := memberStatus(t, c, old); err == nil && l != 0 && l != oldID {
		t.Fatalf("isolated old leader follows %x, which it cannot hear", l)
	}
	if len(c.Events().Find("fault", "isolated")) != 1 {
		t.Fatalf("event log does not record the isolation:\n%s", c.Events())
	}
	c.Heal()
	eventually(t, 10*time.Second, "after heal, exactly one leader named by all three", func() (bool, string) {
		ls := leaders(t, c, hosts)
		if len(ls) != 3 {
			return false, fmt.Sprint(ls)
		}
		first := ls[hosts[0].Name()]
		for _, l := range ls {
			if l == 0 || l != first {
				return false, fmt.Sprint(ls)
			}
		}
		return true, ""
	})
	if len(c.Events().Find("heal", "")) == 0 {
		t.Fatal("event log does not record the heal")
	}
}

func TestIsolatedHostDialsAreRefused(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 3})
	cp1, cp2 := c.Host("cp1"), c.Host("cp2")
	c.Isolate("cp2")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := cp2.Handle().DialContext(ctx, "tcp", strings.TrimPrefix(cp1.ClientURL(), "https://")); err == nil {
		t.Fatal("an isolated host dialed out")
	}
	if _, err := cp1.Handle().DialContext(ctx, "tcp", strings.TrimPrefix(cp2.ClientURL(), "https://")); err == nil {
		t.Fatal("a dial reached an isolated host")
	}
	c.Heal()
	conn, err := cp1.Handle().DialContext(ctx, "tcp", strings.TrimPrefix(cp2.ClientURL(), "https://"))
	if err != nil {
		t.Fatalf("dial after heal: %v", err)
	}
	conn.Close()
}

func TestCrashAndRestartMemberKeepsData(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 3})
	cp1, cp3 := c.Host("cp1"), c.Host("cp3")
	cli, err := cp1.EtcdClient(cp1.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "/sentinel", "before-crash"); err != nil {
		t.Fatal(err)
	}
	cp3.CrashEtcd()
	if cp3.EtcdRunning() {
		t.Fatal("crashed member still running")
	}
	if err := cp3.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	cli3, err := cp3.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli3.Close()
	resp, err := cli3.Get(ctx, "/sentinel")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before-crash" {
		t.Fatalf("after restart from the same data dir: %v %v", resp, err)
	}
}

func TestMixedVersionProcessMembers(t *testing.T) {
	assetstest.Require(t)
	c := Start(t, Config{ControlPlanes: 3, EtcdVersions: map[string]string{
		"cp1": version.Etcd, "cp2": version.EtcdPrevious, "cp3": version.EtcdPrevious,
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for _, h := range c.Hosts() {
		cli, err := h.EtcdClient()
		if err != nil {
			t.Fatal(err)
		}
		st, err := cli.Status(ctx, h.ClientURL())
		cli.Close()
		if err != nil {
			t.Fatalf("%s: %v", h.Name(), err)
		}
		seen[st.Version] = true
		if st.Leader == 0 {
			t.Fatalf("%s has no leader", h.Name())
		}
	}
	want1, want2 := strings.TrimPrefix(version.Etcd, "v"), strings.TrimPrefix(version.EtcdPrevious, "v")
	if !seen[want1] || !seen[want2] {
		t.Fatalf("member versions %v, want both %s and %s", seen, want1, want2)
	}
	cli, err := c.Host("cp2").EtcdClient(c.Host("cp1").ClientURL(), c.Host("cp3").ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/mixed", "ok"); err != nil {
		t.Fatalf("write to a mixed-version cluster: %v", err)
	}
}

// TestEtcdLogCause: a process etcd's start error names the fatal entry of its
// log, which etcd follows with its listeners' closing errors, not those.
func TestEtcdLogCause(t *testing.T) {
	log := `{"level":"error","msg":"setting up serving from embedded etcd failed.","error":"http: Server closed"}
{"level":"error","msg":"bootstrap failed","error":"incompatible with current running cluster"}
{"level":"fatal","msg":"discovery failed","error":"incompatible with current running cluster"}
{"level":"error","msg":"setting up serving from embedded etcd failed.","error":"accept tcp 127.0.0.1:2379: use of closed network connection"}
`
	if got, want := etcdLogCause(log), "fatal discovery failed: incompatible with current running cluster"; got != want {
		t.Errorf("etcdLogCause = %q, want %q", got, want)
	}
	if got := etcdLogCause("a\nb\n"); got != "ends: a | b" {
		t.Errorf("etcdLogCause without a fatal entry = %q, want its last lines", got)
	}
}

// TestStoppedMemberConnectionsDie: a member's stop, crash or graceful, ends
// every connection its ports accepted, as a process's exit does, and the
// member starts again on the same ports. etcd's own Close waits 1 s for its
// peer server's active connections and then returns, leaving them open: one
// mid-request stays open until the peer listener's 5 s read timeout, and one
// whose finished request raced net/http's abort of its next read (etcd's
// timeoutConn sets a new deadline on every Read) is served by the stopped
// server for as long as a peer's keep-alive requests come within 5 s of
// each other (docs/performance.md).
func TestStoppedMemberConnectionsDie(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		host string
		stop func(*Host)
	}{
		{"cp2", (*Host).CrashEtcd},
		{"cp3", (*Host).StopEtcd},
	} {
		h := c.Host(tc.host)
		tlsCfg, err := h.etcdClientTLS()
		if err != nil {
			t.Fatal(err)
		}
		// A peer's request, its headers not finished yet: the server
		// counts the connection active.
		conn, err := tls.Dial("tcp", strings.TrimPrefix(h.PeerURL(), "https://"), tlsCfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /version HTTP/1.1\r\nHost: "+h.IP().String()+"\r\n"); err != nil {
			t.Fatal(err)
		}
		tc.stop(h)
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("%s: a connection its peer port accepted is still open 3 s after the stop, as a dead process's never is", tc.host)
		}
		if err == nil {
			t.Fatalf("%s: a connection its peer port accepted was answered after the stop", tc.host)
		}
		if err := h.StartEtcd(ctx); err != nil {
			t.Fatalf("%s: start again on the same ports: %v", tc.host, err)
		}
	}
	cli, err := c.Host("cp1").EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, "/after-restarts", "x"); err != nil {
		t.Fatalf("the cluster after both restarts: %v", err)
	}
}

// TestMemberRunsWhatItsNodeStateSays: a member is started from the command
// line a real host runs (controlplane.EtcdArgs of its node state), so a node
// state whose client URL names another address makes the member listen
// there and not on the host's own; it once listened on the host's address
// whatever the node state said, and such a node state passed every
// simulated test.
func TestMemberRunsWhatItsNodeStateSays(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 1})
	cp1 := c.Host("cp1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp1.StopEtcd()
	st, err := nodestate.Load(cp1.Files())
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := "127.0.0.254:" + fmt.Sprint(version.EtcdClientPort)
	st.Etcd.ClientURL = "https://" + elsewhere
	if err := nodestate.Save(cp1.Files(), st); err != nil {
		t.Fatal(err)
	}
	if err := cp1.StartEtcd(ctx); err != nil {
		t.Logf("start with the client URL elsewhere: %v", err)
	}
	defer cp1.StopEtcd()
	own := net.JoinHostPort(cp1.IP().String(), fmt.Sprint(version.EtcdClientPort))
	if conn, err := net.DialTimeout("tcp", own, time.Second); err == nil {
		conn.Close()
		t.Fatalf("the member listens on the host's own %s although its node state names %s", own, elsewhere)
	}
	conn, err := net.DialTimeout("tcp", elsewhere, time.Second)
	if err != nil {
		t.Fatalf("the member does not listen on %s, the client URL its node state names: %v", elsewhere, err)
	}
	conn.Close()
}
