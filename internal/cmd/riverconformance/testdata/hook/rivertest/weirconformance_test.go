//go:build riverconformance_fencing

package rivertest_test

import (
	_ "github.com/riverqueue/river/internal/weirconformance" // runs River's tests on weir's fencing driver

	"github.com/weirhq/weir/fencing"
)

// conformanceDriver is the driver type these tests name in type parameters
// (rivertest.RequireInsertedTx[*conformanceDriver] and the like).
type conformanceDriver = fencing.Driver
