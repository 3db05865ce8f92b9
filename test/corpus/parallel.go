package corpus

import "sync"

// mapParallel calls f on each element of in, at most parallel calls at once (at least one), and returns
// the results in the order of in.
func mapParallel[T, R any](in []T, parallel int, f func(T) R) []R {
	out := make([]R, len(in))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i, v := range in {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = f(v)
		})
	}
	wg.Wait()
	return out
}
