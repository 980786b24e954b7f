//go:build !riverconformance_fencing

package rivertest

import "github.com/riverqueue/river/riverdriver/riverpgxv5"

// conformanceDriver is the driver type these tests name in type parameters
// (requireInsertedTx[*conformanceDriver] and the like).
type conformanceDriver = riverpgxv5.Driver
