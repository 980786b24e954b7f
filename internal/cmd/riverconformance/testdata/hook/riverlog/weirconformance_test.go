//go:build riverconformance_fencing

package riverlog_test

import _ "github.com/riverqueue/river/internal/weirconformance" // runs River's tests on weir's fencing driver
