// Package quietlog says a failure that repeats once: a loop that fails the
// same way at every pass for days (a supervisor's service that keeps
// exiting, the operator's pass every 30 s) logs it at Warn the first time,
// then at Debug with how often it came again, and at Warn again when it
// fails otherwise or after Reset.
package quietlog

import "log/slog"

// Repeats is one loop's record of the last failure said at Warn.
type Repeats struct {
	// Log is where the failures go.
	Log   *slog.Logger
	said  string
	again int
}

// Warn logs msg with err at Warn, unless the last Warn said the same, then
// at Debug with the count of repeats.
func (r *Repeats) Warn(msg string, err error) {
	if text := msg + ": " + err.Error(); text != r.said {
		r.Log.Warn(msg, "err", err)
		r.said, r.again = text, 0
		return
	}
	r.again++
	r.Log.Debug(msg, "err", err, "again", r.again)
}

// Repeating reports whether the last failure was a repeat, said at Debug.
func (r *Repeats) Repeating() bool { return r.again > 0 }

// Reset forgets the last failure: the next is said at Warn (the loop went
// well meanwhile).
func (r *Repeats) Reset() { r.said, r.again = "", 0 }
