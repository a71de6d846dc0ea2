package ha_test

import (
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/sim"
)

// lockProbe is a host that, at each removal through it and each read of
// the file reads names, tries the node's maintenance lock: it records those
// made while another operation could have taken it. It counts the locks
// taken through it too.
type lockProbe struct {
	*sim.Handle
	reads string
	// probed counts the probes; unlocked names those that found the lock
	// free.
	probed   int
	unlocked []string
	// taken counts the node's locks taken through it, by name: an
	// operation that gives one up midway and takes it again leaves a gap
	// another could take it in.
	taken map[string]int
}

func (p *lockProbe) Lock(name, holder string) (func() error, error) {
	release, err := p.Handle.Lock(name, holder)
	if err == nil {
		if p.taken == nil {
			p.taken = map[string]int{}
		}
		p.taken[name]++
	}
	return release, err
}

func (p *lockProbe) probe(what string) {
	p.probed++
	if release, err := nodelock.Acquire(p.Handle, nodelock.Maintenance, "the test's probe"); err == nil {
		p.unlocked = append(p.unlocked, what)
		_ = release()
	}
}

func (p *lockProbe) Remove(name string) error {
	p.probe("remove " + name)
	return p.Handle.Remove(name)
}

func (p *lockProbe) ReadFile(name string) ([]byte, error) {
	if name == p.reads {
		p.probe("read " + name)
	}
	return p.Handle.ReadFile(name)
}
