//go:build riverconformance_fencing

package rivertest

import "github.com/weirhq/weir/fencing"

// conformanceDriver is the driver type these tests name in type parameters
// (requireInsertedTx[*conformanceDriver] and the like).
type conformanceDriver = fencing.Driver
