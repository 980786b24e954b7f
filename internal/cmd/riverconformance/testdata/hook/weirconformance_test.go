//go:build riverconformance_fencing

package river_test

import _ "github.com/riverqueue/river/internal/weirconformance" // runs River's tests on weir's fencing driver
