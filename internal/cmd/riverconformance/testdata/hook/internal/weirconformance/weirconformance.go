//go:build riverconformance_fencing

// Package weirconformance switches River's own tests to weir's fencing driver.
// It is copied into a copy of River's module by weir's riverconformance
// command; importing it (from an external test package) sets River's two test
// hooks so that every client gets a fencing driver with its plugin first in
// Config.Plugins, and every test schema gets the fencing migration line after
// River's main line.
package weirconformance

import (
	"reflect"
	"slices"
	"unsafe"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdbtest"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/weirhq/weir/fencing"
)

func init() {
	riverdbtest.TestDriverHook = schemaDriver
	river.TestNewClientHook = clientDriver
}

// schemaDriver gives test schemas the fencing driver's migration lines: main,
// then fencing.
func schemaDriver(driver any) any {
	if fencingDriver, ok := toFencing(driver); ok {
		return fencingDriver
	}
	return driver
}

// clientDriver gives each client its own fencing driver over the pool the test
// chose, with the driver's plugin first in Config.Plugins, as the upgrade
// guide says. The plugin goes into the test's own configuration, as a user
// writes it there: rivertest.Worker runs jobs with the plugins of the
// configuration it was given.
func clientDriver(driver any, config *river.Config) (any, *river.Config) {
	fencingDriver, ok := toFencing(driver)
	if !ok {
		return driver, config
	}
	others := slices.DeleteFunc(slices.Clone(config.Plugins), func(plugin rivertype.Plugin) bool {
		_, isFencing := plugin.(*fencing.Plugin)
		return isFencing
	})
	config.Plugins = append([]rivertype.Plugin{fencingDriver.Plugin()}, others...)
	return fencingDriver, config
}

func toFencing(driver any) (*fencing.Driver, bool) {
	switch driver := driver.(type) {
	case *fencing.Driver:
		return driver, true
	case *riverpgxv5.Driver:
		fencingDriver, err := fencing.NewDriver(poolOf(driver), nil)
		if err != nil {
			panic(err)
		}
		return fencingDriver, true
	default:
		return nil, false
	}
}

// poolOf returns the pool a riverpgxv5 driver was built on; riverpgxv5 keeps
// it unexported.
func poolOf(driver *riverpgxv5.Driver) *pgxpool.Pool {
	field := reflect.ValueOf(driver).Elem().FieldByName("dbPool")
	if !field.IsValid() || field.Type() != reflect.TypeFor[*pgxpool.Pool]() {
		panic("weirconformance: riverpgxv5.Driver has no dbPool *pgxpool.Pool field; update the hook for this River version")
	}
	return *(**pgxpool.Pool)(unsafe.Pointer(field.UnsafeAddr())) //nolint:gosec // reads the driver's own pool
}
