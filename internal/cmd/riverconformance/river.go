package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

const riverModule = "github.com/riverqueue/river"

// riverCopy is a writable, hooked copy of River's module.
type riverCopy struct {
	dir     string
	path    string
	version string
}

// prepareRiver copies River's module at the version weir's go.mod pins into
// dir and applies the driver hook: testdata/river.patch, the files under
// testdata/hook, and the driver type parameter of rivertest's tests (see
// testdata/README.md). The copy requires weir's module from this checkout.
func prepareRiver(ctx context.Context, weirRoot, dir string) (*riverCopy, error) {
	weirModule, err := goOutput(ctx, weirRoot, "list", "-m")
	if err != nil {
		return nil, err
	}
	downloaded, err := goOutput(ctx, weirRoot, "mod", "download", "-json", riverModule)
	if err != nil {
		return nil, err
	}
	var module struct{ Path, Version, Dir string }
	if err := json.Unmarshal([]byte(downloaded), &module); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", riverModule, err)
	}

	if err := os.CopyFS(dir, os.DirFS(module.Dir)); err != nil {
		return nil, err
	}
	// River's go.work names modules that its module zip leaves out.
	if err := os.Remove(filepath.Join(dir, "go.work")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	testdata := filepath.Join(weirRoot, commandDir, "testdata")
	if err := applyPatch(ctx, dir, filepath.Join(testdata, "river.patch")); err != nil {
		return nil, err
	}
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(testdata, "hook"))); err != nil {
		return nil, err
	}
	if err := renameDriverTypeParameter(filepath.Join(dir, "rivertest")); err != nil {
		return nil, err
	}
	if err := requireWeir(ctx, dir, weirModule, weirRoot); err != nil {
		return nil, err
	}
	return &riverCopy{dir: dir, path: module.Path, version: module.Version}, nil
}

// applyPatch applies a unified diff to dir; git apply fails, naming the hunk,
// when River's source no longer matches it.
func applyPatch(ctx context.Context, dir, patch string) error {
	cmd := exec.CommandContext(ctx, "git", "apply", "--verbose", patch)
	cmd.Dir = dir
	// dir is not a Git work tree; stop Git from finding one above it.
	cmd.Env = append(os.Environ(), "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying %s to River's source (update it for this River version): %w\n%s", filepath.Base(patch), err, output)
	}
	return nil
}

// renameDriverTypeParameter makes rivertest's tests name the driver type of
// the run (conformanceDriver) where they name *riverpgxv5.Driver as a type
// argument, as a user following the upgrade guide does.
func renameDriverTypeParameter(dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return err
	}
	renamed := 0
	for _, file := range files {
		source, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		count := bytes.Count(source, []byte("[*riverpgxv5.Driver]"))
		if count == 0 {
			continue
		}
		renamed += count
		source = bytes.ReplaceAll(source, []byte("[*riverpgxv5.Driver]"), []byte("[*conformanceDriver]"))
		if err := os.WriteFile(file, source, 0o644); err != nil {
			return err
		}
	}
	if renamed == 0 {
		return fmt.Errorf("no [*riverpgxv5.Driver] type argument in %s: update the hook for this River version", dir)
	}
	return nil
}

// requireWeir makes the copy require weir's module from weirRoot, with weir's
// checksums for the modules both need.
func requireWeir(ctx context.Context, dir, weirModule, weirRoot string) error {
	if _, err := goOutputEnv(ctx, dir, goEnv(), "mod", "edit",
		"-require="+weirModule+"@v0.0.0-00010101000000-000000000000",
		"-replace="+weirModule+"="+weirRoot); err != nil {
		return err
	}
	weirSums, err := os.ReadFile(filepath.Join(weirRoot, "go.sum"))
	if err != nil {
		return err
	}
	sums, err := os.OpenFile(filepath.Join(dir, "go.sum"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := sums.Write(weirSums); err != nil {
		sums.Close()
		return err
	}
	return sums.Close()
}

// goEnv is the environment of go commands run in the copy: no workspace, and
// go.mod/go.sum updated as the build needs.
func goEnv(extra ...string) []string {
	return append(os.Environ(), append([]string{"GOWORK=off", "GOFLAGS=-mod=mod"}, extra...)...)
}

// goOutput runs a go command in dir (weir's module) with the caller's
// environment.
func goOutput(ctx context.Context, dir string, args ...string) (string, error) {
	return goOutputEnv(ctx, dir, nil, args...)
}

// goOutputEnv runs a go command in dir with env (nil: the caller's).
func goOutputEnv(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	output, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return strings.TrimSpace(string(output)), nil
}

// createDatabase (re)creates database name on adminURL's server and returns
// its URL, with River's test pool size unless adminURL sets one.
func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("connecting to TEST_DATABASE_URL: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		return "", err
	}
	parsed, err := url.Parse(adminURL)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", fmt.Errorf("TEST_DATABASE_URL must be a postgres:// URL, got %q", adminURL)
	}
	parsed.Path = "/" + name
	query := parsed.Query()
	if !query.Has("pool_max_conns") {
		query.Set("pool_max_conns", "15")
	}
	parsed.RawQuery = query.Encode()
	return parsed.String(), nil
}
