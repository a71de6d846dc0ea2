package sim

import (
	"context"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/server/v3/etcdserver"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A removed embedded member must not take the simulator down.
//
// etcd applies a member's removal in EtcdServer.applyConfChange
// (server/etcdserver/server.go): RaftCluster.RemoveMember deletes the member
// from the cluster's member map and marks its ID removed, under one lock. A
// member that applies its own removal keeps serving clients for another
// second (stopWithDelay), and a member whose peers answer it "410 Gone" stops
// at once; either way it stops through the server's error channel, which in
// etcd 3.7.3 carries nothing but "the member has been permanently removed from
// the cluster". Between applying its removal and stopping, a Status call
// reaches maintenanceServer.Status -> EtcdServer.IsLearner ->
// RaftCluster.IsLocalMemberLearner, which finds no local member and calls
// zap's Panic; gRPC does not recover handler panics, so a real etcd process
// dies there and an embedded member takes the whole test process with it.
// (etcd's own learner interceptor guards the same call with IsMemberExist,
// but checks and calls under two separate locks.)
//
// The simulator therefore does what a supervisor sees of a real member: the
// member stops. Three layers, from the earliest:
//
//   - removalGuard is the outermost gRPC interceptor of the member's client
//     server (grpc.UnaryInterceptor / StreamInterceptor, which gRPC runs
//     before the chain etcd installs). Once the member's own view marks its ID
//     removed, every call is refused with Unavailable before it reaches etcd,
//     as a dead process's connections are; a panic raised inside a call while
//     the member is removed (the check-then-call race) is recovered into the
//     same refusal, and any other panic is re-raised untouched.
//   - embeddedEtcd.watch polls that mark and also catches the server
//     stopping on its own, then stops the member hard and reports it, so
//     Host.EtcdRunning is false within one poll of the removal rather than a
//     second later (or never, when the removal came from the peers).
//   - Host.etcdRemoved records "etcd member removed from the cluster;
//     stopped" and forgets the member, as a supervisor would an exited one.

// etcdLocalIDPanic is the panic value of RaftCluster.IsLocalMemberLearner for
// a member missing from its own membership (zap panics with the message).
const etcdLocalIDPanic = "failed to find local ID in cluster members"

// errMemberRemoved is what a call to a removed member gets: Unavailable, the
// code a client sees of a member that is down, so clientv3 tries another
// endpoint.
var errMemberRemoved = status.Error(codes.Unavailable, "etcd member removed from the cluster; stopped")

// removalGuard refuses client calls to a member that has been removed from
// its cluster, before they reach etcd.
type removalGuard struct {
	// srv is the member's server, set once embed.StartEtcd returns (clients
	// are served before it does; until then nothing can have been removed
	// that the recover below would not catch).
	srv     atomic.Pointer[etcdserver.EtcdServer]
	once    sync.Once
	removed chan struct{}
	// stopping is set when the simulator begins to stop the member: its
	// backend is about to close under any call in flight (etcd 3.7.3's
	// Status then dereferences the closed bbolt transaction), which in a real
	// etcd process is a dying process's last gasp, not a crash of the others.
	stopping atomic.Bool
}

// errMemberStopping is what a call to a member being stopped gets.
var errMemberStopping = status.Error(codes.Unavailable, "etcd member stopping")

// markStopping refuses every later call and recovers a panic of one in
// flight: the member is going away.
func (g *removalGuard) markStopping() { g.stopping.Store(true) }

func newRemovalGuard() *removalGuard {
	return &removalGuard{removed: make(chan struct{})}
}

// serverOptions are the gRPC options that install the guard outermost.
func (g *removalGuard) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnaryInterceptor(g.unary), grpc.StreamInterceptor(g.stream)}
}

// markRemoved makes every later call refused and wakes the member's watch.
func (g *removalGuard) markRemoved() {
	g.once.Do(func() { close(g.removed) })
}

// isRemoved reports whether the member was marked removed or its own view of
// the cluster says its ID was removed.
func (g *removalGuard) isRemoved() bool {
	select {
	case <-g.removed:
		return true
	default:
	}
	s := g.srv.Load()
	if s == nil || !s.IsIDRemoved(uint64(s.MemberID())) {
		return false
	}
	g.markRemoved()
	return true
}

func (g *removalGuard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (_ any, err error) {
	if g.isRemoved() {
		return nil, errMemberRemoved
	}
	if g.stopping.Load() {
		return nil, errMemberStopping
	}
	defer g.recoverRemoved(&err)
	return handler(ctx, req)
}

func (g *removalGuard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	if g.isRemoved() {
		return errMemberRemoved
	}
	if g.stopping.Load() {
		return errMemberStopping
	}
	defer g.recoverRemoved(&err)
	return handler(srv, ss)
}

// recoverRemoved turns a panic of a call to a member removed meanwhile into
// errMemberRemoved, and one of a call to a member being stopped into
// errMemberStopping; any other panic is re-raised.
func (g *removalGuard) recoverRemoved(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if g.stopping.Load() && !g.isRemoved() {
		*err = errMemberStopping
		return
	}
	if !g.isRemoved() && r != etcdLocalIDPanic {
		panic(r)
	}
	g.markRemoved()
	*err = errMemberRemoved
}
