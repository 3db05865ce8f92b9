// Package percentile computes the p50, p95 and p99 figures the benchmarks print, the same way in each of
// them, so that a figure of one benchmark can be compared with the same figure of another.
package percentile

import (
	"cmp"
	"slices"
)

// Of returns the p-th percentile (0 to 100) of xs: the value at index (len(xs)-1)*p/100 of the samples in
// ascending order, so 0 is the smallest and 100 the largest. It returns the zero value when there are no
// samples, and leaves xs as it is.
func Of[T cmp.Ordered](xs []T, p int) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}
