package sim

import (
	"slices"
	"sync"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// peerAdds records the peers an embedded member's raft transport has added,
// read from its own log ("added remote peer"). etcd's CutPeer is not
// idempotent (pausing a bootstrap remote twice closes a channel twice and
// panics the process), so a cut is applied once per peer; but a peer the
// transport adds again (every peer, after a snapshot is applied) starts
// unpaused and must be cut again. This is how the simulator learns of it.
type peerAdds struct {
	mu  sync.Mutex
	ids map[uint64]bool
}

// take reports whether id was added since the last take, and forgets it.
func (p *peerAdds) take(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	added := p.ids[id]
	delete(p.ids, id)
	return added
}

func (p *peerAdds) add(id uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil {
		p.ids = map[uint64]bool{}
	}
	p.ids[id] = true
}

// watching returns lg with p listening to its transport's peer additions.
func (p *peerAdds) watching(lg *zap.Logger) *zap.Logger {
	return lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, peerAddCore{adds: p})
	}))
}

// peerAddMessage is what rafthttp.Transport.AddPeer logs, with the peer's
// ID in the remote-peer-id field.
const peerAddMessage = "added remote peer"

// peerAddCore is a zapcore.Core that writes nothing: it records the peer of
// every peerAddMessage entry.
type peerAddCore struct {
	adds   *peerAdds
	fields []zapcore.Field
}

func (c peerAddCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c peerAddCore) With(fs []zapcore.Field) zapcore.Core {
	return peerAddCore{adds: c.adds, fields: append(slices.Clone(c.fields), fs...)}
}

func (c peerAddCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == peerAddMessage {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c peerAddCore) Write(_ zapcore.Entry, fs []zapcore.Field) error {
	for _, f := range slices.Concat(c.fields, fs) {
		if f.Key != "remote-peer-id" {
			continue
		}
		if id, err := types.IDFromString(f.String); err == nil {
			c.adds.add(uint64(id))
		}
	}
	return nil
}

func (c peerAddCore) Sync() error { return nil }

// publishRetryMessage is what etcd logs when its publish of the member's
// name and client URLs failed and it tries again: after its request timeout
// (5 s plus two election timeouts, the member serving no client meanwhile),
// or because the member is stopping.
const publishRetryMessage = "failed to publish local member to cluster through raft"

// onMessage returns lg with fn called (synchronously, so keep it short) with
// the error field of every entry lg logs with message at info level or above
// ("" when it has none).
func onMessage(lg *zap.Logger, message string, fn func(errText string)) *zap.Logger {
	return lg.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, messageCore{message: message, fn: fn})
	}))
}

// messageCore is a zapcore.Core that writes nothing: it calls fn for every
// entry with its message.
type messageCore struct {
	message string
	fn      func(errText string)
	fields  []zapcore.Field
}

func (c messageCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }
func (c messageCore) Sync() error                  { return nil }

func (c messageCore) With(fs []zapcore.Field) zapcore.Core {
	return messageCore{message: c.message, fn: c.fn, fields: append(slices.Clone(c.fields), fs...)}
}

func (c messageCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == c.message {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c messageCore) Write(_ zapcore.Entry, fs []zapcore.Field) error {
	errText := ""
	for _, f := range slices.Concat(c.fields, fs) {
		if f.Key == "error" {
			if err, ok := f.Interface.(error); ok {
				errText = err.Error()
			}
		}
	}
	c.fn(errText)
	return nil
}
