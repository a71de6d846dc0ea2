package ha_test

import (
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/sim"
)

// lockProbe is a host that, at each removal through it and each read of
// the file reads names, tries the node's maintenance lock: it records those
// made while another operation could have taken it.
type lockProbe struct {
	*sim.Handle
	reads string
	// probed counts the probes; unlocked names those that found the lock
	// free.
	probed   int
	unlocked []string
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
