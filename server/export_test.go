package server

// SetAfterDescribe makes s run fn between a run page's reads of the run
// (Describe) and of its history, where another transaction may commit.
func SetAfterDescribe(s *Server, fn func()) { s.afterDescribe = fn }
