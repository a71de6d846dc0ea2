package ha

// ReadJoinIntent exposes the intent journal's reader to the external tests:
// nil for a journal that parses, an error matching ErrNoJoinIntent for none,
// any other error for one that is damaged.
func (n *Node) ReadJoinIntent() error {
	_, err := n.readJoinIntent()
	return err
}

// ErrNoJoinIntent is the reader's "no journal".
var ErrNoJoinIntent = errNoIntent

// OnSnapshotPrivateDir calls f with every snapshot save's private directory
// once the save has opened it, until the test ends: f may replace it as
// another user would.
func OnSnapshotPrivateDir(t interface{ Cleanup(func()) }, f func(dir string)) {
	snapshotPrivateDirOpened.Store(&f)
	t.Cleanup(func() { snapshotPrivateDirOpened.Store(nil) })
}
