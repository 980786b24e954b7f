package workflow

// Readier is anything that can become ready, such as every [Future].
type Readier interface {
	// IsReady reports whether it is ready.
	IsReady() bool
}

// Selector waits for the first of several futures or signal channels to
// become ready, like a select statement, but deterministically: when several
// are ready, the one that became ready first (in history order) wins, then
// the one added first. Each added future is selected at most once; a receive
// case can be selected again whenever its channel has a signal.
//
//	sel := workflow.NewSelector(ctx)
//	sel.AddFuture(charge, func() { ... charge.Get(ctx) ... })
//	sel.AddFuture(reserve, func() { ... })
//	sel.Select(ctx) // runs the callback of the first to be ready
type Selector struct {
	cases       []*selectorCase
	defaultCase func()
}

type selectorCase struct {
	ready    Readier
	fn       func()
	repeat   bool // a receive case: never used up
	selected bool
}

// NewSelector returns an empty Selector.
func NewSelector(ctx Context) *Selector {
	envOf(ctx) // fail early outside workflow code
	return &Selector{}
}

// AddFuture adds a case that is chosen once f is ready; fn runs when it is
// (fn typically calls f.Get, which then doesn't block). It returns s.
func (s *Selector) AddFuture(f Readier, fn func()) *Selector {
	s.cases = append(s.cases, &selectorCase{ready: f, fn: fn})
	return s
}

// AddReceive adds a case that is chosen whenever ch has a signal waiting; fn
// runs when it is and must receive it (ch.TryReceive), or the case stays
// ready. It returns s.
func (s *Selector) AddReceive(ch Readier, fn func()) *Selector {
	s.cases = append(s.cases, &selectorCase{ready: ch, fn: fn, repeat: true})
	return s
}

// AddDefault sets a callback that Select runs, without blocking, when no
// case is ready. It returns s.
func (s *Selector) AddDefault(fn func()) *Selector {
	s.defaultCase = fn
	return s
}

// HasPending reports whether some case can still be selected: a future not
// selected yet, or any receive case.
func (s *Selector) HasPending() bool {
	for _, c := range s.cases {
		if c.repeat || !c.selected {
			return true
		}
	}
	return false
}

// Select blocks until one of the pending cases is ready, marks it selected
// (unless it is a receive case) and runs its callback. With a default
// callback ([Selector.AddDefault]) it doesn't block: it runs the default when
// no case is ready. With no pending case it returns at once.
func (s *Selector) Select(ctx Context) {
	if !s.HasPending() {
		return
	}
	var chosen *selectorCase
	if s.defaultCase != nil {
		envOf(ctx) // fail outside workflow code, as when blocking
		if chosen = s.pick(); chosen == nil {
			s.defaultCase()
			return
		}
	} else {
		envOf(ctx).Await(func() bool {
			chosen = s.pick()
			return chosen != nil
		})
	}
	chosen.selected = !chosen.repeat
	if chosen.fn != nil {
		chosen.fn()
	}
}

// pick returns the pending ready case that became ready first, or nil.
func (s *Selector) pick() *selectorCase {
	var best *selectorCase
	var bestSeq int64
	for _, c := range s.cases {
		if (c.selected && !c.repeat) || !c.ready.IsReady() {
			continue
		}
		var seq int64
		if r, ok := c.ready.(readySeqer); ok {
			seq = r.readySeq()
		}
		if best == nil || seq < bestSeq {
			best, bestSeq = c, seq
		}
	}
	return best
}
