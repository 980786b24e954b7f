package server

import "time"

// SetAfterDescribe makes s run fn between a run page's reads of the run
// (Describe) and of its history, where another transaction may commit.
func SetAfterDescribe(s *Server, fn func()) { s.afterDescribe = fn }

// SetUINow makes s's UI sessions and sign-in limits read the time from now.
func SetUINow(s *Server, now func() time.Time) {
	s.ui.sessions.mu.Lock()
	defer s.ui.sessions.mu.Unlock()
	s.ui.sessions.now = now
}
