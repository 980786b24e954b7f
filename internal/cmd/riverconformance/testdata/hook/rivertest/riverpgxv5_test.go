//go:build !riverconformance_fencing

package rivertest_test

import "github.com/riverqueue/river/riverdriver/riverpgxv5"

// conformanceDriver is the driver type these tests name in type parameters
// (rivertest.RequireInsertedTx[*conformanceDriver] and the like).
type conformanceDriver = riverpgxv5.Driver
