package cel

import "sync/atomic"

// Holder publishes the compiled rule set that the webhook currently serves. Load and Store
// are safe for concurrent use; the zero value holds no program.
//
// Callers compile a new policy version first and Store the result only when Compile
// succeeded, so a policy that does not compile never replaces the set in service.
type Holder struct {
	current atomic.Pointer[Program]
}

// Load returns the program in service, or nil if none was stored yet. Evaluate on a nil
// program denies every object.
func (h *Holder) Load() *Program { return h.current.Load() }

// Store puts p in service; evaluations that already loaded the previous program finish
// with it. Storing nil is ignored, so the set in service can only be replaced by another.
func (h *Holder) Store(p *Program) {
	if p == nil {
		return
	}
	h.current.Store(p)
}
