package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
)

// ErrBinariesNotFound means no Postgres server binaries (initdb and postgres)
// were found on PATH or under /usr/lib/postgresql/*/bin.
var ErrBinariesNotFound = errors.New("pgcluster: Postgres server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin")

// InstallHint is the one command that installs the binaries on Debian or
// Ubuntu. It is printed wherever ErrBinariesNotFound reaches a person.
const InstallHint = "sudo apt-get update && sudo apt-get install -y postgresql"

// EnvBinDir names a variable that, when set, is the only place FindBinDir
// looks: for picking one of several installed Postgres versions.
const EnvBinDir = "WEIR_POSTGRES_BIN"

// debianBinGlob is where Debian and Ubuntu packages put server binaries; they
// are not on PATH there.
const debianBinGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the directory holding initdb and postgres: $WEIR_POSTGRES_BIN
// when set, else the one on PATH if both are there, else the highest version
// under /usr/lib/postgresql/*/bin. The returned error wraps ErrBinariesNotFound.
func FindBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if hasServerBinaries(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%w in %s=%s", ErrBinariesNotFound, EnvBinDir, dir)
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if resolved, err := filepath.EvalSymlinks(initdb); err == nil {
			dir := filepath.Dir(resolved)
			if hasServerBinaries(dir) {
				return dir, nil
			}
		}
		if dir := filepath.Dir(initdb); hasServerBinaries(dir) {
			return dir, nil
		}
	}

	dirs, _ := filepath.Glob(debianBinGlob)
	// Highest major version first: /usr/lib/postgresql/17/bin before .../15/bin.
	slices.SortFunc(dirs, func(a, b string) int {
		return majorOf(b) - majorOf(a)
	})
	for _, dir := range dirs {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w; install them with: %s", ErrBinariesNotFound, InstallHint)
}

func majorOf(binDir string) int {
	major, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return major
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}
